// Program: a TrainingGraph lowered onto one backend. Kernels are compiled once,
// every buffer has its place in the arena (memory_plan.h) or in the persistent
// parameter storage, and each call's arguments are fixed: a training step is a
// walk over a flat list of kernel calls with no allocation. What changes per
// step (seed, valid rows) is in backend memory, so from the second step on a
// backend that records (CUDA graphs) replays one recording of the walk.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/device_buffer.h"
#include "ops/kernel.h"
#include "runner/graph/autodiff.h"
#include "runner/graph/memory_plan.h"

namespace trainer::graph {

struct ParamStorage {
  const Param* param = nullptr;
  TensorRef value;
  TensorRef grad;            // what the optimizer reads (null for state such as running stats)
  TensorRef grad_micro;      // accumulation > 1: what backward writes, added into `grad`
  TensorRef state0, state1;  // optimizer state (momentum / Adam moments)
  TensorRef bf16_copy;       // the weights as bf16 kernels read them (precision.h)
  TensorRef ema;             // its exponential moving average (CompileOptions::ema)
};

struct Call {
  int node = -1;
  bool backward = false;
  Kernel* kernel = nullptr;
  KernelArgs args;
};

struct CompileOptions {
  int optimizer_state_tensors = 1;    // sgd with momentum: 1; adam: 2; plain sgd: 0
  bool accumulate_gradients = false;  // accumulation > 1
  bool deterministic = false;         // only run-to-run bit-identical algorithms
  bool autotune = false;              // time candidate algorithms once per shape
  bool allow_tf32 = false;            // precision: tf32
  bool record_steps = false;          // replay each step from one recording (CUDA graphs)
                                      // where the backend records
  Collective* collective = nullptr;   // the ranks synchronised batchnorm reduces over
  bool short_batches = false;         // training meets batches with padding rows
  bool ema = false;                   // keep an average of every parameter (train.ema_decay)
};

// Kernels compiled for every scheduled node, with the memory each asks for.
struct CompiledKernels {
  std::vector<std::unique_ptr<Kernel>> kernels;  // per node (null: not scheduled)
  std::vector<std::vector<std::size_t>> saved_bytes;
  std::vector<std::size_t> workspace_bytes;
};
CompiledKernels compile_kernels(const TrainingGraph& tg, Backend& backend,
                                const CompileOptions& options);

class Program {
 public:
  Program(TrainingGraph tg, Backend& backend, const CompileOptions& options);

  const TrainingGraph& training_graph() const { return tg_; }
  const Graph& graph() const { return tg_.graph; }
  const MemoryPlan& memory_plan() const { return plan_; }
  Backend& backend() const { return backend_; }

  // Buffers fed before and read after a step (in backend memory).
  const TensorRef& input() const { return input_; }
  const TensorRef& labels() const { return labels_; }
  const TensorRef& loss() const { return loss_; }
  const TensorRef& logits() const { return logits_; }
  const TensorRef& loss_seed() const { return loss_seed_; }
  // Writable access: the bf16 weight copies are refreshed from the float32
  // values before the next step (whatever was written through it).
  std::vector<ParamStorage>& params() {
    bf16_copies_stale_ = true;
    return params_;
  }
  const std::vector<ParamStorage>& params() const { return params_; }
  // The float32 weights were written through their TensorRefs (a checkpoint
  // loaded): the bf16 copies are refreshed before the next step.
  void weights_written() { bf16_copies_stale_ = true; }
  // The optimizer's view of every trainable parameter; the update rewrites
  // the bf16 weight copies too, so they stay current step to step.
  std::vector<ParamSlot> optimizer_slots();

  // The exponential moving average of every parameter (CompileOptions::ema):
  // it starts as the parameters (reset_ema), moves the weight last given to
  // VectorOps::set_average_weight of the way towards them after each update
  // (update_ema: queued on the backend, so a recorded update records it too),
  // and trades places with them around an evaluation (swap_ema, twice).
  void reset_ema();
  void update_ema();
  void swap_ema();

  // Forward and backward of one micro-batch; with accumulate_gradients the
  // parameter gradients are added into ParamStorage::grad (zero them with
  // zero_gradients() before the first micro-batch).
  // `values` (seed, valid rows, the rows' positions in the step's global
  // batch) are what the step's kernels read (ops/step_values.h).
  void train_step(const StepValues& values);
  void train_step(std::uint64_t step_seed, std::int64_t valid_rows = -1) {
    train_step(StepValues{step_seed, valid_rows});
  }
  // The forward pass in evaluation mode (running statistics, no dropout).
  void eval_step(std::int64_t valid_rows);
  void zero_gradients();
  // Called by train_step after each backward call (null: none). Data-parallel
  // runs use it to start reducing gradients that are final while the rest of
  // backward runs.
  // A step with a hook runs directly (the hook's host work cannot be recorded).
  void set_after_backward(std::function<void(const Call&)> hook);
  // Work queued at the end of every training step and recorded with it: the
  // optimizer update, when nothing is decided on the host between backward and
  // the update (null: none).
  void set_update(std::function<void()> update);

  // How the latest training steps ran: "recorded" (replayed from one
  // recording of the calls) or "eager: <why>" (also while only the first step
  // ran: it always runs directly, and the second is recorded). A new update
  // (set_update, which starts the recording over) leaves it as it was until
  // steps run again.
  std::string step_execution() const;

  // Runs the training calls one at a time, reporting each call's duration
  // (Backend::time_work_ms: on a GPU its device time, without the launch).
  void train_step_timed(std::uint64_t step_seed,
                        const std::function<void(const Call&, double ms)>& on_call);

  const std::vector<Call>& train_calls() const { return train_calls_; }
  std::size_t persistent_bytes() const { return persistent_.bytes(); }
  std::size_t params_bytes() const { return params_bytes_; }  // with the bf16 weight copies
  std::size_t grads_bytes() const { return grads_bytes_; }
  std::size_t optimizer_bytes() const { return optimizer_bytes_; }
  std::string implementation_of(int node) const;

 private:
  // One list of calls (training or evaluation) and its recording.
  struct Recording {
    int direct_runs = 0;
    std::unique_ptr<RecordedWork> work;
    std::string why_not;  // set once recording is off for good
  };
  TensorRef value_ref(ValueId v) const;
  void set_step_values(const StepValues& values);
  void run(Recording& recording, const std::function<void()>& queue_calls);
  void run_call(Call& c);               // its kernel's forward or backward
  std::string recording_state() const;  // what the training recording is now
  void refresh_bf16_copies();

  TrainingGraph tg_;
  Backend& backend_;
  CompileOptions options_;
  std::vector<std::unique_ptr<Kernel>> kernels_;  // per node (null: no kernel)
  MemoryPlan plan_;
  DeviceBuffer arena_;
  DeviceBuffer workspace_;
  DeviceBuffer persistent_;   // params, grads, optimizer state
  DeviceBuffer step_values_;  // the StepValues every call reads
  std::size_t params_bytes_ = 0, grads_bytes_ = 0, optimizer_bytes_ = 0;
  bool bf16_copies_stale_ = true;
  std::vector<ParamStorage> params_;
  // Every parameter's value, gradient, micro-batch gradient and average as one
  // tensor each (null when there is none), padding included.
  TensorRef values_span_, grads_span_, grads_micro_span_, ema_span_;
  std::vector<Call> train_calls_;
  std::vector<Call> eval_calls_;
  TensorRef input_, labels_, loss_, logits_, loss_seed_;
  std::function<void(const Call&)> after_backward_;
  std::function<void()> update_;
  Recording train_recording_, eval_recording_;
  std::string last_step_execution_;  // how the latest training step ran ("" before one)
};

}  // namespace trainer::graph
