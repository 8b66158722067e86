// Moving a Program's tensors to and from safetensors: parameters (including
// non-trainable state such as batchnorm running statistics) under their YAML
// names, optimizer moments under "optimizer.state0.<name>" /
// "optimizer.state1.<name>", and the averaged weights (train.ema_decay) under
// "ema.<name>" with the optimizer state, or under the parameter names alone
// for a file of their own.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runner/checkpoint/safetensors.h"
#include "runner/graph/program.h"

namespace trainer::checkpoint {

// The most bytes of a checkpoint file held in memory at once, written or read.
inline constexpr std::size_t kCheckpointPieceBytes = std::size_t{16} << 20;

// A tensor of the program (on its device) under the name a file gives it.
struct NamedTensor {
  std::string name;
  TensorRef tensor;
};

std::vector<NamedTensor> parameter_tensors(const graph::Program& program);
// The averaged weights under the parameter names (empty without them).
std::vector<NamedTensor> averaged_parameter_tensors(const graph::Program& program);
// Optimizer moments and the averaged weights.
std::vector<NamedTensor> optimizer_state_tensors(const graph::Program& program);

struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string>
      mismatches;  // "fc1.weight: shape [10, 4] in the file, [10, 8] in the model"
};

struct TensorShape {
  std::string name;
  Shape shape;
};

// What keeps `file` from filling float32 tensors `wanted`: each one missing,
// of another dtype or shape, and each tensor of the file whose name starts
// with `extra_prefix` that is not wanted ("" checks every name), but
// PyTorch's batchnorm step counter (X.num_batches_tracked beside a wanted
// X.running_mean), which nothing here reads.
std::vector<std::string> mismatches_of(const Safetensors& file,
                                       const std::vector<TensorShape>& wanted,
                                       const std::string& extra_prefix);

// Throws CheckpointNotFinite when a tensor of `file` that fits one of `wanted`
// holds a NaN or an infinity, naming `path`, the first such tensor, the
// index and position of its first such value, how many it holds, and how
// many other tensors hold one.
// The file is read a piece at a time.
void check_finite(const SafetensorsFile& file, const std::vector<TensorShape>& wanted,
                  const std::string& path);

// Copies `file`'s tensors (read from `path`) into the program's parameters.
// Strict: every parameter present with the same shape and no extra tensor, or
// a CheckpointMismatch listing every mismatch and nothing is copied. Non-strict:
// the matching ones are copied and the others reported. A value that is not
// finite in a tensor to copy: CheckpointNotFinite (check_finite), nothing copied.
// The file is read a piece at a time, straight into the program's tensors.
LoadReport load_parameters(graph::Program& program, const SafetensorsFile& file,
                           const std::string& path, bool strict);

// Copies optimizer moments and the averaged weights; always strict (a
// resumed run must match exactly).
void load_optimizer_state(graph::Program& program, const SafetensorsFile& file,
                          const std::string& path);

// Copies the averaged weights ("ema.<name>" in an optimizer state file) into
// the program's parameters, strictly: what evaluating them needs.
void load_averaged_parameters(graph::Program& program, const SafetensorsFile& state_file,
                              const std::string& path);

}  // namespace trainer::checkpoint
