// Program parameters and optimizer state <-> safetensors tensors.
#include "runner/checkpoint/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace trainer::checkpoint {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The float32 values of a stored tensor that are not finite: how many, the
// first one's flat index and its value; counted a piece at a time.
struct NonFinite {
  std::size_t count = 0, first = 0;
  float value = 0;

  // Counts those of `piece`, which starts at element `at` of the tensor.
  void count_in(std::string_view piece, std::size_t at) {
    for (std::size_t i = 0; i < piece.size() / sizeof(float); ++i) {
      float v;
      std::memcpy(&v, piece.data() + i * sizeof v, sizeof v);
      if (std::isfinite(v)) continue;
      if (count++ == 0) {
        first = at + i;
        value = v;
      }
    }
  }
};

// Flat index `i` of a tensor of `shape` as its position: [1, 3].
std::string position_of(std::size_t i, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> at(shape.size(), 0);
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<std::size_t>(std::max<std::int64_t>(1, shape[d]));
    at[d] = static_cast<std::int64_t>(i % extent);
    i /= extent;
  }
  return shape_text(at);
}

// Whether stored tensor `t` can take the place of a float32 tensor of `shape`.
bool fits(const StoredTensor& t, const Shape& shape) {
  return t.dtype == "F32" && t.shape == shape;
}

// Checks every target against the file and copies when all match (or, non-strict, the matching
// ones).
LoadReport copy_matching(graph::Program& program, const std::vector<NamedTensor>& targets,
                         const SafetensorsFile& file, const std::string& path, bool strict,
                         const std::string& extra_prefix) {
  std::vector<TensorShape> shapes;
  for (const auto& target : targets) shapes.push_back({target.name, target.tensor.shape});
  LoadReport report;
  report.mismatches = mismatches_of(file.contents(), shapes, extra_prefix);
  if (strict && !report.mismatches.empty()) {
    std::string list;
    for (const auto& m : report.mismatches) list += "\n  " + m;
    throw CheckpointMismatch(path + ": " + std::to_string(report.mismatches.size()) +
                             " tensor(s) do not match the model:" + list);
  }
  check_finite(file, shapes, path);  // before anything is copied
  for (const auto& target : targets) {
    const StoredTensor* stored = file.contents().find(target.name);
    if (!stored || !fits(*stored, target.tensor.shape)) continue;
    auto* data = static_cast<char*>(target.tensor.data);
    file.read_pieces(*stored, kCheckpointPieceBytes, [&](std::string_view piece, std::uint64_t at) {
      program.backend().copy_to_device(data + at, piece.data(), piece.size());
    });
    report.loaded.push_back(stored->name);
  }
  if (!report.loaded.empty()) program.weights_written();
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
  for (const auto& t : file.tensors) {
    // PyTorch's batchnorm counts its steps in X.num_batches_tracked, which
    // no computation here reads (momentum is fixed): not a mismatch.
    constexpr std::string_view kCounter = ".num_batches_tracked";
    if (t.name.ends_with(kCounter) &&
        names.count(t.name.substr(0, t.name.size() - kCounter.size()) + ".running_mean"))
      continue;
    if (!names.count(t.name) && t.name.rfind(extra_prefix, 0) == 0)
      mismatches.push_back(t.name + ": in the file, not in the model");
  }
  return mismatches;
}

void check_finite(const SafetensorsFile& file, const std::vector<TensorShape>& wanted,
                  const std::string& path) {
  std::string first;
  std::size_t tensors = 0;
  for (const auto& w : wanted) {
    const StoredTensor* t = file.contents().find(w.name);
    if (!t || !fits(*t, w.shape)) continue;
    NonFinite bad;
    file.read_pieces(*t, kCheckpointPieceBytes, [&](std::string_view piece, std::uint64_t at) {
      bad.count_in(piece, static_cast<std::size_t>(at / sizeof(float)));
    });
    if (bad.count == 0 || tensors++ > 0) continue;
    first = "tensor '" + t->name + "' element " + std::to_string(bad.first) + " (at " +
            position_of(bad.first, t->shape) + ") is " +
            (std::isnan(bad.value) ? "NaN"
             : bad.value > 0       ? "+inf"
                                   : "-inf") +
            "; " + std::to_string(bad.count) + " of its " +
            std::to_string(t->file_bytes / sizeof(float)) +
            (bad.count == 1 ? " values is not finite" : " values are not finite");
  }
  if (tensors == 0) return;
  throw CheckpointNotFinite(
      path + ": " + first +
      (tensors > 1 ? " (and " + std::to_string(tensors - 1) + " more tensor(s) hold such values)"
                   : std::string()) +
      " (the run had diverged, or the file was edited)");
}

std::vector<NamedTensor> parameter_tensors(const graph::Program& program) {
  std::vector<NamedTensor> out;
  for (const auto& p : program.params()) out.push_back({p.param->name, p.value});
  return out;
}

std::vector<NamedTensor> averaged_parameter_tensors(const graph::Program& program) {
  std::vector<NamedTensor> out;
  for (const auto& p : program.params())
    if (p.ema) out.push_back({p.param->name, p.ema});
  return out;
}

std::vector<NamedTensor> optimizer_state_tensors(const graph::Program& program) {
  std::vector<NamedTensor> out;
  for (const auto& p : program.params()) {
    if (p.state0) out.push_back({"optimizer.state0." + p.param->name, p.state0});
    if (p.state1) out.push_back({"optimizer.state1." + p.param->name, p.state1});
    if (p.ema) out.push_back({"ema." + p.param->name, p.ema});
  }
  return out;
}

LoadReport load_parameters(graph::Program& program, const SafetensorsFile& file,
                           const std::string& path, bool strict) {
  return copy_matching(program, parameter_tensors(program), file, path, strict, "");
}

void load_optimizer_state(graph::Program& program, const SafetensorsFile& file,
                          const std::string& path) {
  copy_matching(program, optimizer_state_tensors(program), file, path, true, "optimizer.");
}

void load_averaged_parameters(graph::Program& program, const SafetensorsFile& state_file,
                              const std::string& path) {
  std::vector<NamedTensor> targets = parameter_tensors(program);
  for (NamedTensor& target : targets) target.name = "ema." + target.name;
  copy_matching(program, targets, state_file, path, true, "ema.");
}

}  // namespace trainer::checkpoint
