// Program parameters and optimizer state <-> safetensors tensors.
#include "runner/checkpoint/weights.h"

#include <set>

namespace trainer::checkpoint {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

StoredTensor to_stored(const graph::Program& program, const std::string& name, const TensorRef& t) {
  StoredTensor s;
  s.name = name;
  s.dtype = "F32";
  s.shape = t.shape;
  s.bytes.resize(t.bytes());
  program.backend().copy_to_host(s.bytes.data(), t.data, t.bytes());
  return s;
}

struct Target {
  std::string name;
  TensorRef ref;
};

// Whether stored tensor `t` can take the place of a float32 tensor of `shape`.
bool fits(const StoredTensor& t, const Shape& shape) {
  return t.dtype == "F32" && t.shape == shape;
}

// Checks every target against the file and copies when all match (or, non-strict, the matching
// ones).
LoadReport copy_matching(graph::Program& program, const std::vector<Target>& targets,
                         const Safetensors& file, const std::string& path, bool strict,
                         const std::string& extra_prefix) {
  std::vector<TensorShape> shapes;
  for (const auto& target : targets) shapes.push_back({target.name, target.ref.shape});
  LoadReport report;
  report.mismatches = mismatches_of(file, shapes, extra_prefix);
  if (strict && !report.mismatches.empty()) {
    std::string list;
    for (const auto& m : report.mismatches) list += "\n  " + m;
    throw CheckpointMismatch(path + ": " + std::to_string(report.mismatches.size()) +
                             " tensor(s) do not match the model:" + list);
  }
  for (const auto& target : targets) {
    const StoredTensor* stored = file.find(target.name);
    if (!stored || !fits(*stored, target.ref.shape)) continue;
    program.backend().copy_to_device(target.ref.data, stored->bytes.data(), target.ref.bytes());
    report.loaded.push_back(stored->name);
  }
  return report;
}

}  // namespace

std::vector<std::string> mismatches_of(const Safetensors& file,
                                       const std::vector<TensorShape>& wanted,
                                       const std::string& extra_prefix) {
  std::vector<std::string> mismatches;
  std::set<std::string> names;
  for (const auto& w : wanted) {
    names.insert(w.name);
    const StoredTensor* t = file.find(w.name);
    if (!t)
      mismatches.push_back(w.name + ": missing from the file (the model has shape " +
                           shape_text(w.shape) + ")");
    else if (t->dtype != "F32")
      mismatches.push_back(w.name + ": dtype " + t->dtype + " in the file, F32 in the model");
    else if (t->shape != w.shape)
      mismatches.push_back(w.name + ": shape " + shape_text(t->shape) + " in the file, " +
                           shape_text(w.shape) + " in the model");
  }
  for (const auto& t : file.tensors)
    if (!names.count(t.name) && t.name.rfind(extra_prefix, 0) == 0)
      mismatches.push_back(t.name + ": in the file, not in the model");
  return mismatches;
}

Safetensors parameters_of(const graph::Program& program) {
  Safetensors file;
  file.metadata["format"] = "pt";
  for (const auto& p : program.params())
    file.tensors.push_back(to_stored(program, p.param->name, p.value));
  return file;
}

Safetensors averaged_parameters_of(const graph::Program& program) {
  Safetensors file;
  file.metadata["format"] = "pt";
  for (const auto& p : program.params())
    if (p.ema) file.tensors.push_back(to_stored(program, p.param->name, p.ema));
  return file;
}

Safetensors optimizer_state_of(const graph::Program& program) {
  Safetensors file;
  for (const auto& p : program.params()) {
    if (p.state0)
      file.tensors.push_back(to_stored(program, "optimizer.state0." + p.param->name, p.state0));
    if (p.state1)
      file.tensors.push_back(to_stored(program, "optimizer.state1." + p.param->name, p.state1));
    if (p.ema) file.tensors.push_back(to_stored(program, "ema." + p.param->name, p.ema));
  }
  return file;
}

LoadReport load_parameters(graph::Program& program, const Safetensors& file,
                           const std::string& path, bool strict) {
  std::vector<Target> targets;
  for (const auto& p : program.params()) targets.push_back({p.param->name, p.value});
  return copy_matching(program, targets, file, path, strict, "");
}

void load_optimizer_state(graph::Program& program, const Safetensors& file,
                          const std::string& path) {
  std::vector<Target> targets;
  for (const auto& p : program.params()) {
    if (p.state0) targets.push_back({"optimizer.state0." + p.param->name, p.state0});
    if (p.state1) targets.push_back({"optimizer.state1." + p.param->name, p.state1});
    if (p.ema) targets.push_back({"ema." + p.param->name, p.ema});
  }
  copy_matching(program, targets, file, path, true, "optimizer.");
}

void load_averaged_parameters(graph::Program& program, const Safetensors& state_file,
                              const std::string& path) {
  std::vector<Target> targets;
  for (const auto& p : program.params()) targets.push_back({"ema." + p.param->name, p.value});
  copy_matching(program, targets, state_file, path, true, "ema.");
}

}  // namespace trainer::checkpoint
