// labels: cpu
// Recorded steps (CUDA graphs on a GPU) on the CPU: a backend that records by
// keeping the queued work shows when the program records, replays and falls
// back to direct calls; the step's seed and valid rows reach the kernels
// through backend memory, so the kernel arguments a recording holds stay the
// same from step to step.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/out_of_memory.h"
#include "runner/graph/program.h"
#include "tests/program_fixture.h"

using namespace trainer;
using namespace trainer::graph;

namespace {

// The CPU kernels and memory, under another name: the backends below change
// one thing each.
class CpuLikeBackend : public Backend {
 public:
  explicit CpuLikeBackend(const std::string& name) : Backend(name) { register_cpu_kernels(*this); }
  void* allocate(std::size_t bytes) override { return cpu_backend().allocate(bytes); }
  void release(void* ptr) override { cpu_backend().release(ptr); }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    cpu_backend().copy_to_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    cpu_backend().copy_to_host(dst, src, bytes);
  }
  VectorOps& vector_ops() override { return cpu_backend().vector_ops(); }
};

// A recording that keeps the queued work and runs it again at each replay
// (or refuses to record, with `refusal`, after queueing the work once, as a
// capture that fails at its end does).
class RecordingBackend final : public CpuLikeBackend {
 public:
  explicit RecordingBackend(std::string refusal = {})
      : CpuLikeBackend("recording"), refusal_(std::move(refusal)) {}

  std::unique_ptr<RecordedWork> record(const std::function<void()>& queue_work,
                                       std::string& why_not) override {
    ++recordings;
    if (!refusal_.empty()) {
      // As a failed CUDA capture: the calls' host code has run once already
      // when the step then runs directly (here their work runs too, and is
      // overwritten by the direct run's).
      queue_work();
      why_not = refusal_;
      return nullptr;
    }
    return std::make_unique<Kept>(queue_work, replays);
  }

  int recordings = 0;
  int replays = 0;

 private:
  class Kept final : public RecordedWork {
   public:
    Kept(std::function<void()> work, int& replays) : work_(std::move(work)), replays_(replays) {}
    void replay() override {
      ++replays_;
      work_();
    }

   private:
    std::function<void()> work_;
    int& replays_;
  };
  std::string refusal_;
};

const char* kModel = R"(
layers:
  - {type: linear, name: fc1, out_features: 16}
  - {type: relu}
  - {type: dropout, name: drop, p: 0.5}
  - {type: linear, name: fc2, out_features: 4}
)";

std::unique_ptr<Program> compile_on(Backend& backend, bool record_steps) {
  ModelInput in;
  in.batch = 6;
  in.sample_shape = {5};
  in.num_classes = 4;
  CompileOptions options;
  options.optimizer_state_tensors = 0;
  options.record_steps = record_steps;
  auto program =
      std::make_unique<Program>(differentiate(graph_of_yaml(kModel, in)), backend, options);
  initialize_params(*program, 3);
  for (std::int64_t i = 0; i < program->input().numel(); ++i)
    program->input().f32()[i] = static_cast<float>((i * 37) % 11) / 5.0f - 1.0f;
  for (std::int64_t i = 0; i < program->labels().numel(); ++i)
    program->labels().i64()[i] = (i * 3) % 4;
  program->loss_seed().f32()[0] = 1.0f;
  return program;
}

// What one training step leaves behind: the loss and every parameter gradient.
std::vector<float> step_result(Program& program, std::uint64_t seed, std::int64_t valid_rows) {
  program.train_step(seed, valid_rows);
  std::vector<float> out = {program.loss().f32()[0]};
  for (const auto& p : program.params())
    if (p.grad) out.insert(out.end(), p.grad.f32(), p.grad.f32() + p.grad.numel());
  return out;
}

struct StepCase {
  std::uint64_t seed;
  std::int64_t valid_rows;
};
const std::vector<StepCase> kSteps = {{11, -1}, {12, -1}, {13, 4}, {11, -1}, {14, 2}};

}  // namespace

TEST_CASE("the first step runs directly, the second is recorded, later ones replay it") {
  RecordingBackend backend;
  auto recorded = compile_on(backend, true);
  auto direct = compile_on(cpu_backend(), false);
  CHECK(recorded->step_execution() == "eager: no more than one step ran (the first runs directly)");
  for (std::size_t i = 0; i < kSteps.size(); ++i) {
    INFO("step " << i);
    CHECK(step_result(*recorded, kSteps[i].seed, kSteps[i].valid_rows) ==
          step_result(*direct, kSteps[i].seed, kSteps[i].valid_rows));
  }
  CHECK(backend.recordings == 1);
  CHECK(backend.replays == static_cast<int>(kSteps.size()) - 1);
  CHECK(recorded->step_execution() == "recorded");
  CHECK(direct->step_execution() == "eager: recording is off (backend.cuda_graphs: false)");
}

TEST_CASE("a replayed step reads the step's seed and valid rows when it runs") {
  RecordingBackend backend;
  auto program = compile_on(backend, true);
  const auto first = step_result(*program, 11, -1);
  const auto again = step_result(*program, 11, -1);  // recorded here
  CHECK(first == again);
  CHECK(step_result(*program, 12, -1) != first);  // a new dropout mask
  CHECK(step_result(*program, 11, -1) == first);
  const auto fewer_rows = step_result(*program, 11, 3);
  CHECK(fewer_rows[0] != first[0]);  // the loss counts 3 rows, not 6
  CHECK(backend.replays == 4);
}

TEST_CASE("kernel arguments are the same at every step, whatever the seed and valid rows") {
  auto program = compile_on(cpu_backend(), false);
  auto arguments = [&] {
    std::vector<std::vector<const void*>> all;
    for (const Call& c : program->train_calls()) {
      const KernelArgs& a = c.args;
      std::vector<const void*> v = {a.output.data,
                                    a.workspace,
                                    a.grad_output.data,
                                    a.step,
                                    reinterpret_cast<const void*>(a.seed_salt),
                                    reinterpret_cast<const void*>(std::uintptr_t{a.training}),
                                    reinterpret_cast<const void*>(std::uintptr_t{a.update_state})};
      for (const auto& t : a.inputs) v.push_back(t.data);
      for (const auto& t : a.params) v.push_back(t.data);
      for (const auto* s : a.saved) v.push_back(s);
      for (const auto& t : a.grad_inputs) v.push_back(t.data);
      for (const auto& t : a.grad_params) v.push_back(t.data);
      all.push_back(v);
    }
    return all;
  };
  program->train_step(1, -1);
  const auto before = arguments();
  program->train_step(2, 3);
  program->eval_step(5);
  CHECK(arguments() == before);
  // Only the stochastic call has a salt.
  int salted = 0;
  for (const Call& c : program->train_calls()) salted += c.args.seed_salt != 0;
  CHECK(salted == 2);  // dropout's forward and backward
}

TEST_CASE("a backend that cannot record runs every step directly and says why") {
  RecordingBackend refusing("no graphs here");
  auto program = compile_on(refusing, true);
  auto direct = compile_on(cpu_backend(), false);
  for (const StepCase& s : kSteps)
    CHECK(step_result(*program, s.seed, s.valid_rows) ==
          step_result(*direct, s.seed, s.valid_rows));
  CHECK(refusing.recordings == 1);  // tried once, at the second step
  CHECK(program->step_execution() == "eager: no graphs here");
}

TEST_CASE("a step with a hook between backward calls is never recorded") {
  RecordingBackend backend;
  auto program = compile_on(backend, true);
  int hooked = 0;
  program->set_after_backward([&](const Call&) { ++hooked; });
  for (const StepCase& s : kSteps) program->train_step(s.seed, s.valid_rows);
  CHECK(backend.recordings == 0);
  CHECK(hooked > 0);
  CHECK(program->step_execution() ==
        "eager: gradients are reduced across ranks while backward runs");
}

TEST_CASE("evaluation steps are recorded apart from training steps") {
  RecordingBackend backend;
  auto program = compile_on(backend, true);
  auto direct = compile_on(cpu_backend(), false);
  for (std::int64_t valid : {6, 6, 2, 6}) {
    program->eval_step(valid);
    direct->eval_step(valid);
    CHECK(program->loss().f32()[0] == direct->loss().f32()[0]);
  }
  CHECK(backend.recordings == 1);
  CHECK(backend.replays == 3);
  CHECK(program->step_execution() == "eager: no more than one step ran (the first runs directly)");
}

TEST_CASE("an update set on the program runs at the end of every step and is recorded with it") {
  RecordingBackend backend;
  auto program = compile_on(backend, true);
  std::vector<float> loss_seen_by_update;
  program->set_update([&] { loss_seen_by_update.push_back(program->loss().f32()[0]); });
  std::vector<float> losses;
  for (const StepCase& s : kSteps) losses.push_back(step_result(*program, s.seed, s.valid_rows)[0]);
  CHECK(loss_seen_by_update == losses);  // once per step, after forward and backward
  CHECK(backend.recordings == 1);
  CHECK(backend.replays == static_cast<int>(kSteps.size()) - 1);
  // A new update starts over: one direct step, then a new recording.
  int updates = 0;
  program->set_update([&] { ++updates; });
  for (int i = 0; i < 3; ++i) program->train_step(1, -1);
  CHECK(updates == 3);
  CHECK(backend.recordings == 2);
  // Taking the update away (a training loop ending) starts over again, but
  // the steps that ran were recorded: the run's manifest says so.
  program->set_update(nullptr);
  CHECK(program->step_execution() == "recorded");
}

namespace {

// Dropout's backward throws what `fail` throws (a library's status
// mid-step, on a GPU).
class FailingBackend final : public CpuLikeBackend {
 public:
  explicit FailingBackend(std::function<void()> fail) : CpuLikeBackend("failing") {
    add_kernel("dropout", [fail](const KernelContext&) { return std::make_unique<Failing>(fail); });
  }

 private:
  class Failing final : public Kernel {
   public:
    explicit Failing(std::function<void()> fail) : fail_(std::move(fail)) {}
    void forward(const KernelArgs&) override {}
    void backward(const KernelArgs&) override { fail_(); }

   private:
    std::function<void()> fail_;
  };
};

}  // namespace

TEST_CASE("a kernel's library error during a step names its layer; typed errors pass as they are") {
  FailingBackend failing(
      [] { throw std::runtime_error("cudnnConvolutionBackwardData: CUDNN_STATUS_NOT_SUPPORTED"); });
  auto program = compile_on(failing, false);
  try {
    program->train_step(1, -1);
    FAIL("the step ran");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.find(": layer 'drop' (dropout), backward: cudnnConvolutionBackwardData: "
                    "CUDNN_STATUS_NOT_SUPPORTED") != std::string::npos);
  }
  FailingBackend out_of_memory([] { throw OutOfMemoryError("no room"); });
  auto other = compile_on(out_of_memory, false);
  CHECK_THROWS_MATCHES(other->train_step(1, -1), OutOfMemoryError,
                       Catch::Matchers::Message("no room"));
}
