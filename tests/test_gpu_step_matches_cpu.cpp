// labels: gpu
// A whole CUDA training step computes what the CPU's does: the small CNN of
// gpu_cnn_fixture.h (conv, batchnorm, relu, max pool, linear with relu,
// dropout, linear), compiled on each backend as a run compiles it (its
// activations folded where that backend folds them, its formats), from the
// same weights and batch, then three SGD updates with momentum through each
// backend's update (dropout draws the same mask on both for a seed). In
// float32 (no TF32) the losses, gradients and weights agree to float32
// summation order; in bf16 the losses agree to bf16 rounding, and the bf16
// weight copies the update writes equal the updated weights rounded, so no
// layer reads a stale copy. The op tests compare one kernel at a time; this
// compares how they work together (the shared workspace, what backward reads
// of what forward saved, the folded activations). Skipped with the reason on
// a machine without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu_cnn_fixture.h"
#include "gpu_skip.h"
#include "runner/graph/formats.h"
#include "runner/graph/fusion.h"
#include "runner/graph/precision.h"
#include "runner/graph/program.h"
#include "tests/program_fixture.h"

#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/cuda_backend.h"

using namespace trainer;
using namespace trainer::graph;
using trainer::testing::read_floats;

namespace {

// The program a run with `precision` compiles on `backend`, its weights
// initialised from seed 5, fed the fixed batch of 32.
std::unique_ptr<Program> compile_cnn(Backend& backend, const std::string& precision) {
  ModelInput in;
  in.batch = 32;
  in.sample_shape = {1, 12, 12};
  in.num_classes = 10;
  Graph g = graph_of_yaml(testing::kSmallCnn, in);
  assign_compute_types(g, precision);
  fuse_activations(
      g, [&](const std::string& op, Epilogue e) { return backend.fuses_activation(op, e); });
  assign_formats(g, backend.activation_formats(), precision);
  CompileOptions options;
  options.optimizer_state_tensors = 1;  // the momentum buffer
  options.deterministic = true;
  auto program = std::make_unique<Program>(differentiate(std::move(g)), backend, options);
  initialize_params(*program, 5);
  testing::feed_fixed_batch(*program);
  return program;
}

// What each step left: its loss, then (after the steps) every gradient and weight.
struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads, weights;
};

// Three steps of SGD with momentum (lr 0.05, momentum 0.9) on `program`. The
// parameters are read through a const program, which leaves its bf16 copies
// as the update wrote them.
Trained train_three_steps(Program& program) {
  std::vector<ParamSlot> slots = program.optimizer_slots();
  VectorOps& ops = program.backend().vector_ops();
  program.set_update([&] { ops.optimizer_update(slots); });
  OptimizerStep opt;
  opt.lr = 0.05f;
  opt.momentum = 0.9f;
  Trained t;
  for (int step = 1; step <= 3; ++step) {
    opt.step = step;
    ops.set_optimizer_step(opt);
    program.train_step(static_cast<std::uint64_t>(step), -1);
    t.losses.push_back(read_floats(program, program.loss())[0]);
  }
  program.set_update(nullptr);
  const Program& after = program;
  for (const ParamStorage& p : after.params()) {
    if (!p.grad) continue;
    t.grads.push_back(read_floats(after, p.grad));
    t.weights.push_back(read_floats(after, p.value));
  }
  return t;
}

// max |a - b| over max |b|, or over `floor` where that is larger: the
// difference relative to the tensor's scale.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b,
                           double floor = 1e-12) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = floor;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// The largest magnitude over all of `tensors`.
double largest(const std::vector<std::vector<float>>& tensors) {
  double most = 0;
  for (const auto& t : tensors)
    for (float v : t) most = std::max(most, std::fabs(static_cast<double>(v)));
  return most;
}

// conv1's bias comes before a batchnorm, which takes out every channel's
// mean: its gradient is 0 in exact arithmetic, and what each backend computes
// is the rounding noise of its own summation order, as are the steps the
// updates make from its initial 0. Its gradient and weights are measured
// against the largest of the model's (on an H200: 3e-7 of the largest
// gradient in float32, and 1.3e-8 of the largest weight in float32, 9e-5 in
// bf16, after three steps).
bool zero_in_exact_arithmetic(const std::string& parameter) {
  return parameter == "conv1.bias";
}

// `x` rounded to bf16 (to nearest, ties to even), as its 16 bits.
std::uint16_t bf16_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// The CPU's and the GPU's program for `precision`, each trained three steps;
// their losses step by step agree within `loss_tolerance` (relative).
struct TrainedOnBoth {
  std::unique_ptr<Program> cpu, gpu;
  Trained want, got;  // the CPU's, the GPU's
};

TrainedOnBoth train_on_both(const std::string& precision, double loss_tolerance) {
  TrainedOnBoth both{
      compile_cnn(cpu_backend(), precision), compile_cnn(cuda_backend(0), precision), {}, {}};
  both.want = train_three_steps(*both.cpu);
  both.got = train_three_steps(*both.gpu);
  for (std::size_t s = 0; s < both.want.losses.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(both.got.losses[s] == Approx(both.want.losses[s]).epsilon(loss_tolerance));
  }
  REQUIRE(both.got.grads.size() == both.want.grads.size());
  return both;
}

}  // namespace

TEST_CASE("a float32 CUDA training step equals the CPU's") {
  const TrainedOnBoth both = train_on_both("fp32", 1e-5);
  const Program& named = *both.cpu;
  const double largest_grad = largest(both.want.grads);
  const double largest_weight = largest(both.want.weights);
  std::size_t k = 0;
  for (const ParamStorage& p : named.params()) {
    if (!p.grad) continue;
    INFO("parameter " << p.param->name);
    if (zero_in_exact_arithmetic(p.param->name)) {
      CHECK(relative_difference(both.got.grads[k], both.want.grads[k], largest_grad) < 1e-5);
      CHECK(relative_difference(both.got.weights[k], both.want.weights[k], largest_weight) < 1e-6);
    } else {
      CHECK(relative_difference(both.got.grads[k], both.want.grads[k]) < 1e-4);
      CHECK(relative_difference(both.got.weights[k], both.want.weights[k]) < 1e-5);
    }
    ++k;
  }
}

TEST_CASE("a bf16 CUDA training step equals the CPU's, and its weight copies stay current") {
  const TrainedOnBoth both = train_on_both("bf16", 1e-2);
  const Program& gpu_program = *both.gpu;
  const double largest_weight = largest(both.want.weights);
  std::size_t copies = 0, k = 0;
  for (const ParamStorage& p : gpu_program.params()) {
    if (!p.grad) continue;
    INFO("parameter " << p.param->name);
    if (zero_in_exact_arithmetic(p.param->name))
      CHECK(relative_difference(both.got.weights[k], both.want.weights[k], largest_weight) < 1e-3);
    else
      CHECK(relative_difference(both.got.weights[k], both.want.weights[k]) < 1e-2);
    if (p.bf16_copy) {
      ++copies;
      std::vector<std::uint16_t> copy(static_cast<std::size_t>(p.bf16_copy.numel()));
      gpu_program.backend().copy_to_host(copy.data(), p.bf16_copy.data, copy.size() * 2);
      const std::vector<float>& weights = both.got.weights[k];
      REQUIRE(copy.size() == weights.size());
      std::size_t stale = 0;
      for (std::size_t i = 0; i < copy.size(); ++i) stale += copy[i] != bf16_bits(weights[i]);
      CHECK(stale == 0);
    }
    ++k;
  }
  CHECK(copies == 3);  // conv1, fc1 and fc2 compute in bf16
}
#endif
