// labels: cpu
// The lowered program on the CPU backend: whole-model gradients against finite
// differences (autodiff, fan-in sums, kernels and memory plan together), and
// gradient accumulation equal to the large batch, also with dropout when the
// micro-batches (or ranks) say where their rows sit in the step's batch.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "runner/graph/program.h"
#include "tests/program_fixture.h"

using namespace trainer;
using namespace trainer::graph;

namespace {

const char* kModel = R"(
layers:
  - {type: conv2d, name: stem, out_channels: 4, kernel: 3, padding: 1}
  - {type: tanh, name: t0}
  - {type: conv2d, name: a, out_channels: 4, kernel: 3, padding: 1, stride: 1}
  - {type: tanh, name: t1}
  - {type: add, name: sum, inputs: [t1, t0]}
  - {type: flatten}
  - {type: linear, name: fc, out_features: 5}
)";

// The same layers with dropout between the convolutions and before the head.
const char* kDropoutModel = R"(
layers:
  - {type: conv2d, name: stem, out_channels: 4, kernel: 3, padding: 1}
  - {type: tanh, name: t0}
  - {type: dropout, name: d0, p: 0.4}
  - {type: conv2d, name: a, out_channels: 4, kernel: 3, padding: 1, stride: 1}
  - {type: tanh, name: t1}
  - {type: flatten}
  - {type: dropout, name: d1, p: 0.3}
  - {type: linear, name: fc, out_features: 5}
)";

std::unique_ptr<Program> compile_model(std::int64_t batch, bool accumulate,
                                       const char* model = kModel) {
  ModelInput in;
  in.batch = batch;
  in.sample_shape = {2, 5, 5};
  in.num_classes = 5;
  CompileOptions options;
  options.optimizer_state_tensors = 0;
  options.accumulate_gradients = accumulate;
  auto program =
      std::make_unique<Program>(differentiate(graph_of_yaml(model, in)), cpu_backend(), options);
  initialize_params(*program, 7);
  return program;
}

// Rows first_row, first_row + stride, ... of the whole batch.
void fill_batch(Program& program, std::int64_t first_row, const std::vector<float>& inputs,
                const std::vector<std::int64_t>& labels, std::int64_t stride = 1) {
  const std::int64_t rows = program.labels().numel();
  const std::int64_t per_row = program.input().numel() / rows;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t source = first_row + r * stride;
    std::copy_n(inputs.begin() + source * per_row, per_row, program.input().f32() + r * per_row);
    program.labels().i64()[r] = labels[static_cast<std::size_t>(source)];
  }
}

// The largest difference between the parameter gradients of a and b, relative
// to the largest gradient, over all parameters.
void check_same_gradients(Program& a, Program& b, double tolerance) {
  for (std::size_t p = 0; p < a.params().size(); ++p) {
    const auto& x = a.params()[p];
    const auto& y = b.params()[p];
    if (!x.grad) continue;
    double max_abs = 0, max_diff = 0;
    for (std::int64_t i = 0; i < x.grad.numel(); ++i) {
      max_abs = std::max(max_abs, static_cast<double>(std::abs(x.grad.f32()[i])));
      max_diff =
          std::max(max_diff, static_cast<double>(std::abs(x.grad.f32()[i] - y.grad.f32()[i])));
    }
    INFO(x.param->name << ": max |grad| " << max_abs << ", max difference " << max_diff);
    CHECK(max_diff <= tolerance * max_abs + 1e-9);
  }
}

struct Batch {
  std::vector<float> inputs;
  std::vector<std::int64_t> labels;
};

Batch random_batch(std::int64_t rows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<std::int64_t> label(0, 4);
  Batch b;
  b.inputs.resize(static_cast<std::size_t>(rows * 2 * 5 * 5));
  for (auto& x : b.inputs) x = normal(rng);
  b.labels.resize(static_cast<std::size_t>(rows));
  for (auto& l : b.labels) l = label(rng);
  return b;
}

double loss_of(Program& program) {
  program.eval_step(-1);
  return program.loss().f32()[0];
}

}  // namespace

TEST_CASE("whole-model gradients match finite differences") {
  auto program = compile_model(3, false);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> inputs(static_cast<std::size_t>(program->input().numel()));
  for (auto& x : inputs) x = normal(rng);
  fill_batch(*program, 0, inputs, {1, 4, 0});
  program->loss_seed().f32()[0] = 1.0f;
  program->train_step(0);

  // Central differences in float32 with a step of 1e-2 on smooth (tanh) layers:
  // truncation error ~h^2 * f''' ~ 1e-4 and rounding ~1e-7 / h ~ 1e-5, so a 2%
  // relative tolerance (with a 1e-3 absolute floor) holds with a wide margin.
  const float h = 1e-2f;
  int checked = 0;
  for (auto& p : program->params()) {
    if (!p.grad) continue;
    const std::int64_t n = p.value.numel();
    for (std::int64_t i : {std::int64_t{0}, n / 2, n - 1}) {
      float* w = p.value.f32() + i;
      const float saved = *w;
      *w = saved + h;
      const double up = loss_of(*program);
      *w = saved - h;
      const double down = loss_of(*program);
      *w = saved;
      const double numeric = (up - down) / (2 * h);
      const double analytic = p.grad.f32()[i];
      INFO(p.param->name << "[" << i << "] analytic " << analytic << " numeric " << numeric);
      CHECK(std::abs(analytic - numeric) <= 2e-2 * std::abs(numeric) + 1e-3);
      ++checked;
    }
  }
  CHECK(checked == 3 * 6);  // weight and bias of stem, a and fc
}

TEST_CASE("accumulating 4 micro-batches of 8 equals one batch of 32") {
  const std::int64_t total = 32;
  const Batch data = random_batch(total);
  auto big = compile_model(total, false);
  fill_batch(*big, 0, data.inputs, data.labels);
  big->loss_seed().f32()[0] = 1.0f;
  big->train_step(0);

  auto small = compile_model(total / 4, true);
  small->zero_gradients();
  for (int micro = 0; micro < 4; ++micro) {
    fill_batch(*small, micro * (total / 4), data.inputs, data.labels);
    small->loss_seed().f32()[0] = 0.25f;  // the trainer's 1 / accumulation
    small->train_step(static_cast<std::uint64_t>(micro));
  }
  check_same_gradients(*big, *small, 1e-6);
}

TEST_CASE("with dropout, micro-batches and ranks that say where their rows sit equal the batch") {
  const std::int64_t total = 32;
  const std::uint64_t seed = 17;
  const Batch data = random_batch(total);
  auto big = compile_model(total, false, kDropoutModel);
  fill_batch(*big, 0, data.inputs, data.labels);
  big->loss_seed().f32()[0] = 1.0f;
  big->train_step(seed);

  // 4 micro-batches of consecutive rows: micro m holds rows 8m ... 8m + 7.
  auto micro_batches = compile_model(total / 4, true, kDropoutModel);
  micro_batches->zero_gradients();
  for (std::int64_t micro = 0; micro < 4; ++micro) {
    fill_batch(*micro_batches, micro * (total / 4), data.inputs, data.labels);
    micro_batches->loss_seed().f32()[0] = 0.25f;
    micro_batches->train_step(StepValues{seed, -1, micro * (total / 4), 1});
  }
  check_same_gradients(*big, *micro_batches, 1e-6);

  // 2 ranks, each with 2 micro-batches of 8 (the loader's sharding: rank r
  // holds rows r, r + 2, ...; its micro-batch m rows r + 2 * (8m + j)). The
  // ranks' accumulated gradients, averaged, are the batch's.
  std::vector<std::unique_ptr<Program>> ranks;
  for (std::int64_t rank = 0; rank < 2; ++rank) {
    ranks.push_back(compile_model(total / 4, true, kDropoutModel));
    Program& r = *ranks.back();
    r.zero_gradients();
    for (std::int64_t micro = 0; micro < 2; ++micro) {
      const std::int64_t first = rank + 2 * micro * (total / 4);
      fill_batch(r, first, data.inputs, data.labels, 2);
      r.loss_seed().f32()[0] = 0.5f;
      r.train_step(StepValues{seed, -1, first, 2});
    }
  }
  for (std::size_t p = 0; p < ranks[0]->params().size(); ++p) {
    auto& g0 = ranks[0]->params()[p].grad;
    const auto& g1 = ranks[1]->params()[p].grad;
    if (!g0) continue;
    for (std::int64_t i = 0; i < g0.numel(); ++i) g0.f32()[i] = 0.5f * (g0.f32()[i] + g1.f32()[i]);
  }
  check_same_gradients(*big, *ranks[0], 1e-6);

  // Without the positions every micro-batch draws the first rows' masks: the
  // test tells.
  auto unplaced = compile_model(total / 4, true, kDropoutModel);
  unplaced->zero_gradients();
  for (std::int64_t micro = 0; micro < 4; ++micro) {
    fill_batch(*unplaced, micro * (total / 4), data.inputs, data.labels);
    unplaced->loss_seed().f32()[0] = 0.25f;
    unplaced->train_step(StepValues{seed, -1, 0, 1});
  }
  const auto& want = big->params().back().grad;
  const auto& got = unplaced->params().back().grad;
  double diff = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i)
    diff = std::max(diff, static_cast<double>(std::abs(want.f32()[i] - got.f32()[i])));
  CHECK(diff > 1e-3);
}

namespace {

const char* kCheckpointed = R"(
layers:
  - {type: conv2d, name: stem, out_channels: 8, kernel: 3, padding: 1}
  - {type: batchnorm, name: bn}
  - {type: relu, name: r0}
  - {type: conv2d, name: a, out_channels: 8, kernel: 3, padding: 1}
  - {type: dropout, name: drop, p: 0.3}
  - {type: relu, name: r1}
  - {type: add, name: sum, inputs: [r1, r0]}
  - {type: maxpool2d, kernel: 2}
  - {type: flatten}
  - {type: linear, name: fc, out_features: 5}
)";

std::unique_ptr<Program> compile_checkpointed(const std::string& recompute) {
  ModelInput in;
  in.batch = 4;
  in.sample_shape = {2, 6, 6};
  in.num_classes = 5;
  auto program =
      compile_test_program(graph_of_yaml(std::string(kCheckpointed) + recompute, in), 11, 2, 5);
  program->train_step(42);
  return program;
}

}  // namespace

TEST_CASE("recomputed activations give bit-identical gradients and statistics") {
  auto plain = compile_checkpointed("");
  for (const std::string recompute :
       {"recompute: [bn, a, drop, sum]\n", "recompute: {every: 2}\n"}) {
    INFO(recompute);
    auto checkpointed = compile_checkpointed(recompute);
    CHECK(checkpointed->training_graph().recompute_steps > 0);
    for (std::size_t p = 0; p < plain->params().size(); ++p) {
      const auto& a = plain->params()[p];
      const auto& b = checkpointed->params()[p];
      INFO(a.param->name);
      // Running statistics move once per step, not once per recompute.
      for (std::int64_t i = 0; i < a.value.numel(); ++i)
        REQUIRE(a.value.f32()[i] == b.value.f32()[i]);
      if (!a.grad) continue;
      for (std::int64_t i = 0; i < a.grad.numel(); ++i) REQUIRE(a.grad.f32()[i] == b.grad.f32()[i]);
    }
  }
}
