// labels: gpu
// CUDA graphs: a training step captured once and replayed gives the same loss
// and gradients, bit for bit, as the same step run kernel by kernel, across
// changing seeds (dropout) and valid rows (a short last batch, also with
// batchnorm's own kernels over the real rows), for training
// and evaluation; an update recorded with the step skips and scales under fp16
// loss scaling as the eager one does, and moves averaged weights
// (train.ema_decay) as the eager one does; inputs staged on the copy stream
// arrive in order while compute runs, from a host buffer reused at once; and
// so do the small uploads through the pinned ring. Skipped with the reason on
// a machine without a GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gpu_cnn_fixture.h"
#include "gpu_skip.h"
#include "runner/graph/program.h"
#include "tests/program_fixture.h"

#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/cuda_backend.h"

using namespace trainer;
using namespace trainer::graph;
using trainer::testing::read_floats;

namespace {

// `short_batches`: batchnorm as the own kernels over the real rows, not cuDNN's.
std::unique_ptr<Program> compile_cnn(bool record_steps, bool ema = false,
                                     bool short_batches = false) {
  ModelInput in;
  in.batch = 32;
  in.sample_shape = {1, 12, 12};
  in.num_classes = 10;
  CompileOptions options;
  options.optimizer_state_tensors = 0;
  options.deterministic = true;  // the same algorithms in both programs
  options.record_steps = record_steps;
  options.ema = ema;
  options.short_batches = short_batches;
  Backend& backend = cuda_backend(0);
  auto program = std::make_unique<Program>(differentiate(graph_of_yaml(testing::kSmallCnn, in)),
                                           backend, options);
  initialize_params(*program, 5);
  testing::feed_fixed_batch(*program);
  return program;
}

std::vector<float> train_result(Program& program, std::uint64_t seed, std::int64_t valid_rows) {
  program.train_step(seed, valid_rows);
  std::vector<float> out = read_floats(program, program.loss());
  for (const auto& p : program.params()) {
    if (!p.grad) continue;
    const auto g = read_floats(program, p.grad);
    out.insert(out.end(), g.begin(), g.end());
  }
  return out;
}

}  // namespace

TEST_CASE("a replayed CUDA graph equals the step run kernel by kernel") {
  const bool short_batches = GENERATE(false, true);
  INFO((short_batches ? "batchnorm over the real rows" : "cuDNN's batchnorm"));
  auto graphed = compile_cnn(true, false, short_batches);
  auto eager = compile_cnn(false, false, short_batches);
  const std::vector<std::pair<std::uint64_t, std::int64_t>> steps = {{1, -1}, {2, -1}, {3, -1},
                                                                     {4, 20}, {5, -1}, {3, -1}};
  for (std::size_t i = 0; i < steps.size(); ++i) {
    INFO("step " << i << " seed " << steps[i].first << " valid rows " << steps[i].second);
    const auto g = train_result(*graphed, steps[i].first, steps[i].second);
    const auto e = train_result(*eager, steps[i].first, steps[i].second);
    REQUIRE(g.size() == e.size());
    CHECK(g == e);
  }
  CHECK(graphed->step_execution() == "recorded");
  CHECK(eager->step_execution().rfind("eager: ", 0) == 0);
  // Evaluation (running statistics, no dropout) replays its own graph.
  for (std::int64_t valid : {32, 32, 9, 32}) {
    graphed->eval_step(valid);
    eager->eval_step(valid);
    CHECK(read_floats(*graphed, graphed->loss()) == read_floats(*eager, eager->loss()));
  }
  // A different seed draws a different dropout mask inside the replayed graph.
  CHECK(train_result(*graphed, 7, -1) != train_result(*graphed, 8, -1));
}

TEST_CASE("the optimizer update recorded with the step reads each step's learning rate") {
  auto graphed = compile_cnn(true);
  auto eager = compile_cnn(false);
  std::vector<ParamSlot> graphed_slots = graphed->optimizer_slots();
  std::vector<ParamSlot> eager_slots = eager->optimizer_slots();
  VectorOps& ops = graphed->backend().vector_ops();
  graphed->set_update([&] { ops.optimizer_update(graphed_slots); });
  eager->set_update([&] { ops.optimizer_update(eager_slots); });
  OptimizerStep opt;
  for (int step = 0; step < 6; ++step) {
    opt.lr = 0.05f / static_cast<float>(step + 1);  // a new rate each step
    for (Program* p : {graphed.get(), eager.get()}) {
      ops.set_optimizer_step(opt);
      p->train_step(static_cast<std::uint64_t>(step), -1);
    }
  }
  CHECK(graphed->step_execution() == "recorded");
  for (std::size_t i = 0; i < graphed->params().size(); ++i) {
    INFO("parameter " << graphed->params()[i].param->name);
    CHECK(read_floats(*graphed, graphed->params()[i].value) ==
          read_floats(*eager, eager->params()[i].value));
  }
  graphed->set_update(nullptr);
  eager->set_update(nullptr);
}

TEST_CASE(
    "averaged weights moved inside the recorded step by each step's weight equal the eager ones") {
  auto graphed = compile_cnn(true, true);
  auto eager = compile_cnn(false, true);
  std::vector<ParamSlot> graphed_slots = graphed->optimizer_slots();
  std::vector<ParamSlot> eager_slots = eager->optimizer_slots();
  VectorOps& ops = graphed->backend().vector_ops();
  for (Program* p : {graphed.get(), eager.get()}) p->reset_ema();
  graphed->set_update([&] {
    ops.optimizer_update(graphed_slots);
    graphed->update_ema();
  });
  eager->set_update([&] {
    ops.optimizer_update(eager_slots);
    eager->update_ema();
  });
  OptimizerStep opt;
  opt.lr = 0.05f;
  ops.set_optimizer_step(opt);
  for (int step = 0; step < 5; ++step) {
    // A new weight each step (a warm-up): the recorded average reads it from device memory.
    ops.set_average_weight(0.5f / static_cast<float>(step + 1));
    for (Program* p : {graphed.get(), eager.get()})
      p->train_step(static_cast<std::uint64_t>(step), -1);
  }
  CHECK(graphed->step_execution() == "recorded");
  for (std::size_t i = 0; i < graphed->params().size(); ++i) {
    INFO("parameter " << graphed->params()[i].param->name);
    const auto averaged = read_floats(*graphed, graphed->params()[i].ema);
    CHECK(averaged == read_floats(*eager, eager->params()[i].ema));
    CHECK(averaged != read_floats(*graphed, graphed->params()[i].value));  // it lags the weights
  }
  // Evaluated in the weights' place, then back.
  const auto weights = read_floats(*graphed, graphed->params()[0].value);
  for (Program* p : {graphed.get(), eager.get()}) {
    p->swap_ema();
    p->eval_step(32);
  }
  CHECK(read_floats(*graphed, graphed->loss()) == read_floats(*eager, eager->loss()));
  for (Program* p : {graphed.get(), eager.get()}) p->swap_ema();
  CHECK(read_floats(*graphed, graphed->params()[0].value) == weights);
  graphed->set_update(nullptr);
  eager->set_update(nullptr);
}

TEST_CASE("a recorded update with loss scaling skips and scales like the eager one") {
  // Step 3's input holds a NaN, so its gradients do: that update, replayed
  // from the recording, must skip itself and halve the scale on the device.
  LossScaleRule rule;
  rule.growth_interval = 2;
  LossScaleState start;
  start.scale = 1024;
  // Learning rate and momentum by applied update (the step's SGD has no
  // momentum buffer: the momentum is not used).
  const std::vector<ScheduledUpdate> schedule = {{0.05f, 0.0f}, {0.04f, 0.0f}, {0.03f, 0.0f},
                                                 {0.02f, 0.0f}, {0.01f, 0.0f}, {0.005f, 0.0f}};
  struct Result {
    std::vector<std::vector<float>> params;
    LossScaleState state;
    std::string execution;
  };
  auto run = [&](bool record) {
    auto program = compile_cnn(record);
    std::vector<ParamSlot> slots = program->optimizer_slots();
    Backend& backend = program->backend();
    VectorOps& ops = backend.vector_ops();
    program->set_update([&] { ops.optimizer_update(slots); });
    ops.start_loss_scaling(rule, start);
    ops.set_schedule(0, schedule);
    ops.set_optimizer_step(OptimizerStep{});
    std::vector<float> input = read_floats(*program, program->input());
    std::vector<float> poisoned = input;
    poisoned[3] = std::numeric_limits<float>::quiet_NaN();
    for (int step = 1; step <= 6; ++step) {
      const auto& x = step == 3 ? poisoned : input;
      backend.copy_to_device(program->input().data, x.data(), x.size() * sizeof(float));
      ops.fill_loss_seed(program->loss_seed(), 1.0);
      program->train_step(static_cast<std::uint64_t>(step), -1);
    }
    Result r;
    r.state = ops.loss_scale_state();
    ops.stop_loss_scaling();
    for (const auto& p : program->params())
      if (p.grad) r.params.push_back(read_floats(*program, p.value));
    r.execution = program->step_execution();
    program->set_update(nullptr);
    return r;
  };
  const Result graphed = run(true), eager = run(false);
  CHECK(graphed.execution == "recorded");
  CHECK(graphed.state.skipped == 1);
  CHECK(graphed.state.last_overflow_step == 3);
  CHECK(graphed.state.steps == 6);
  CHECK(graphed.state.scale == 2048);  // grown at step 2, halved at 3, grown at 5
  CHECK(graphed.state.scale == eager.state.scale);
  CHECK(graphed.state.clean_steps == eager.state.clean_steps);
  REQUIRE(graphed.params.size() == eager.params.size());
  for (std::size_t i = 0; i < graphed.params.size(); ++i)
    CHECK(graphed.params[i] == eager.params[i]);
}

TEST_CASE("staged input copies land in order and free the host buffer at once") {
  Backend& gpu = cuda_backend(0);
  const std::int64_t n = 100003;
  const int batches = 12;
  const Shape shape{n};
  void* input = gpu.allocate(static_cast<std::size_t>(n) * 4);
  std::vector<void*> seen(batches);
  std::vector<float> host(static_cast<std::size_t>(n));
  for (int b = 0; b < batches; ++b) {
    seen[b] = gpu.allocate(static_cast<std::size_t>(n) * 4);
    gpu.vector_ops().fill({seen[b], shape, DType::f32}, 0.0f);
    for (std::int64_t i = 0; i < n; ++i) host[static_cast<std::size_t>(i)] = b * 1000.0f + i % 97;
    gpu.copy_input_to_device(input, host.data(), host.size() * 4);
    std::fill(host.begin(), host.end(), -1.0f);  // the source may be reused now
    // Compute-stream work that reads the input this batch put there.
    gpu.vector_ops().accumulate({seen[b], shape, DType::f32}, {input, shape, DType::f32});
  }
  for (int b = 0; b < batches; ++b) {
    gpu.copy_to_host(host.data(), seen[b], host.size() * 4);
    for (std::int64_t i = 0; i < n; ++i) {
      INFO("batch " << b << " element " << i);
      REQUIRE(host[static_cast<std::size_t>(i)] == b * 1000.0f + i % 97);
    }
    gpu.release(seen[b]);
  }
  gpu.release(input);
}

// The small uploads of each step go through a ring of pinned slots: more of
// them than the ring has slots land in order, each read from its source before
// the call returns, and compute work queued after each one sees its value.
TEST_CASE("small uploads through the pinned ring land in order, past its wrap") {
  Backend& gpu = cuda_backend(0);
  const int uploads = 200;  // several times round the ring
  const Shape one{1}, all{uploads};
  void* value = gpu.allocate(4);
  void* seen = gpu.allocate(static_cast<std::size_t>(uploads) * 4);
  gpu.vector_ops().fill({seen, all, DType::f32}, 0.0f);
  for (int k = 0; k < uploads; ++k) {
    float host = 3.0f * k + 1.0f;
    gpu.copy_to_device(value, &host, sizeof host);
    host = -1.0f;  // the source may be reused at once
    void* slot = static_cast<float*>(seen) + k;
    gpu.vector_ops().accumulate({slot, one, DType::f32}, {value, one, DType::f32});
  }
  std::vector<float> got(static_cast<std::size_t>(uploads));
  gpu.copy_to_host(got.data(), seen, got.size() * 4);
  for (int k = 0; k < uploads; ++k) {
    INFO("upload " << k);
    REQUIRE(got[static_cast<std::size_t>(k)] == 3.0f * k + 1.0f);
  }
  gpu.release(seen);
  gpu.release(value);
}
#endif
