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

// Checks every target against the file and copies when all match (or, non-strict, the matching
// ones).
LoadReport copy_matching(graph::Program& program, const std::vector<Target>& targets,
                         const Safetensors& file, const std::string& path, bool strict,
                         const std::string& extra_prefix) {
  LoadReport report;
  std::vector<std::pair<const StoredTensor*, TensorRef>> copies;
  std::set<std::string> wanted;
  for (const auto& target : targets) {
    wanted.insert(target.name);
    const StoredTensor* t = file.find(target.name);
    if (!t) {
      report.mismatches.push_back(target.name + ": missing from the file (the model has shape " +
                                  shape_text(target.ref.shape) + ")");
      continue;
    }
    if (t->dtype != "F32") {
      report.mismatches.push_back(target.name + ": dtype " + t->dtype +
                                  " in the file, F32 in the model");
      continue;
    }
    if (t->shape != target.ref.shape) {
      report.mismatches.push_back(target.name + ": shape " + shape_text(t->shape) +
                                  " in the file, " + shape_text(target.ref.shape) +
                                  " in the model");
      continue;
    }
    copies.emplace_back(t, target.ref);
  }
  for (const auto& t : file.tensors)
    if (!wanted.count(t.name) && t.name.rfind(extra_prefix, 0) == 0)
      report.mismatches.push_back(t.name + ": in the file, not in the model");
  if (strict && !report.mismatches.empty()) {
    std::string list;
    for (const auto& m : report.mismatches) list += "\n  " + m;
    throw CheckpointMismatch(path + ": " + std::to_string(report.mismatches.size()) +
                             " tensor(s) do not match the model:" + list);
  }
  for (const auto& [stored, ref] : copies) {
    program.backend().copy_to_device(ref.data, stored->bytes.data(), ref.bytes());
    report.loaded.push_back(stored->name);
  }
  return report;
}

}  // namespace

Safetensors parameters_of(const graph::Program& program) {
  Safetensors file;
  file.metadata["format"] = "pt";
  for (const auto& p : program.params())
    file.tensors.push_back(to_stored(program, p.param->name, p.value));
  return file;
}

Safetensors optimizer_state_of(const graph::Program& program) {
  Safetensors file;
  for (const auto& p : program.params()) {
    if (p.state0)
      file.tensors.push_back(to_stored(program, "optimizer.state0." + p.param->name, p.state0));
    if (p.state1)
      file.tensors.push_back(to_stored(program, "optimizer.state1." + p.param->name, p.state1));
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
  }
  copy_matching(program, targets, file, path, true, "optimizer.");
}

}  // namespace trainer::checkpoint
