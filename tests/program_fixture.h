// Graph-level test fixtures: the graph of a `model:` YAML block, parameters
// initialised as a run would, and a compiled program on the CPU backend with
// no optimizer state, the input filled with N(0, 1) from `input_seed`, row i
// labelled i % classes, and the loss seed 1 (gradients of the plain loss).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runner/config/yaml_reader.h"
#include "runner/graph/builder.h"
#include "runner/graph/init.h"
#include "runner/graph/program.h"

namespace trainer::graph {

// The graph of `yaml` (the model's `layers:`) for batches of `in`; any
// diagnostic fails the test.
inline Graph graph_of_yaml(const std::string& yaml, const ModelInput& in) {
  config::Diagnostics diags;
  const config::Node model = config::parse_yaml(yaml, "model.yaml", diags);
  Graph g = build_graph(model, in, diags);
  INFO(diags.format_all());
  REQUIRE(diags.empty());
  return g;
}

// Every parameter initialised as a run with this seed would, through the
// program's backend.
inline void initialize_params(Program& program, std::uint64_t seed) {
  std::vector<float> values;
  for (auto& p : program.params()) {
    initialize_param(*p.param, seed, values);
    program.backend().copy_to_device(p.value.data, values.data(), values.size() * sizeof(float));
  }
}

inline std::unique_ptr<Program> compile_test_program(Graph g, std::uint64_t param_seed,
                                                     unsigned input_seed, std::int64_t classes) {
  CompileOptions options;
  options.optimizer_state_tensors = 0;
  auto program = std::make_unique<Program>(differentiate(std::move(g)), cpu_backend(), options);
  initialize_params(*program, param_seed);
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
