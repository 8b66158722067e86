// What the GPU program tests compile and feed: a small CNN (conv, batchnorm,
// relu, max pool, linear with relu, dropout, linear) for 1x12x12 images in 10
// classes, a fixed batch (input values from a formula, row i labelled i % 10,
// loss seed 1) uploaded through the program's backend, and reading a float32
// tensor back.
#pragma once

#include <cstdint>
#include <vector>

#include "runner/graph/program.h"

namespace trainer::testing {

inline const char* kSmallCnn = R"(
layers:
  - {type: conv2d, name: conv1, out_channels: 8, kernel: 3, padding: 1}
  - {type: batchnorm, name: bn1}
  - {type: relu}
  - {type: maxpool2d, kernel: 2}
  - {type: flatten}
  - {type: linear, name: fc1, out_features: 32}
  - {type: relu}
  - {type: dropout, name: drop, p: 0.3}
  - {type: linear, name: fc2, out_features: 10}
)";

inline void feed_fixed_batch(graph::Program& program) {
  Backend& backend = program.backend();
  std::vector<float> input(static_cast<std::size_t>(program.input().numel()));
  for (std::size_t i = 0; i < input.size(); ++i)
    input[i] = static_cast<float>((i * 29) % 17) / 8.0f - 1.0f;
  std::vector<std::int64_t> labels(static_cast<std::size_t>(program.labels().numel()));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  const float one = 1.0f;
  backend.copy_to_device(program.input().data, input.data(), input.size() * sizeof(float));
  backend.copy_to_device(program.labels().data, labels.data(), labels.size() * 8);
  backend.copy_to_device(program.loss_seed().data, &one, sizeof one);
}

inline std::vector<float> read_floats(const graph::Program& program, const TensorRef& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  program.backend().copy_to_host(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

}  // namespace trainer::testing
