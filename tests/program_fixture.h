// A compiled program on the CPU backend for graph-level tests: no optimizer
// state, parameters initialised as a run would from `param_seed`, the input
// filled with N(0, 1) from `input_seed`, row i labelled i % classes, and the
// loss seed 1 (gradients of the plain loss).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "runner/graph/init.h"
#include "runner/graph/program.h"

namespace trainer::graph {

inline std::unique_ptr<Program> compile_test_program(Graph g, std::uint64_t param_seed,
                                                     unsigned input_seed, std::int64_t classes) {
  CompileOptions options;
  options.optimizer_state_tensors = 0;
  auto program = std::make_unique<Program>(differentiate(std::move(g)), cpu_backend(), options);
  std::vector<float> values;
  for (auto& p : program->params()) {
    initialize_param(*p.param, param_seed, values);
    std::copy(values.begin(), values.end(), p.value.f32());
  }
  std::mt19937 rng(input_seed);
  std::normal_distribution<float> normal;
  for (std::int64_t i = 0; i < program->input().numel(); ++i)
    program->input().f32()[i] = normal(rng);
  for (std::int64_t i = 0; i < program->labels().numel(); ++i)
    program->labels().i64()[i] = i % classes;
  program->loss_seed().f32()[0] = 1.0f;
  return program;
}

}  // namespace trainer::graph
