// The training step's whole-model vector work, done by each backend over all
// parameters at once: optimizer updates (one call for every parameter, with
// gradient clipping and fp16 loss scaling decided inside it), the global
// gradient norm with a non-finite check, scaling and accumulation.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/loss_scale_rule.h"
#include "ops/tensor.h"

namespace trainer {

enum class OptimizerKind { sgd, adam, adamw };

// One parameter with its gradient and optimizer state, all float32 of the same size.
struct ParamSlot {
  float* param = nullptr;
  float* grad = nullptr;
  float* state0 = nullptr;  // sgd: momentum buffer; adam: first moment
  float* state1 = nullptr;  // adam: second moment (null for sgd)
  std::int64_t size = 0;
  bool weight_decay = true;  // false for biases and normalization parameters
  // The parameter's bf16 copy that bf16 kernels read (null: none), rewritten
  // from the updated float32 values in the same pass.
  std::uint16_t* bf16_copy = nullptr;
  float lr_scale = 1.0f;  // its learning rate is the step's times this (model.lr_scale)
};

struct OptimizerStep {
  OptimizerKind kind = OptimizerKind::sgd;
  float lr = 0.1f;
  float momentum = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;  // sgd/adam: L2 added to the gradient; adamw: decoupled
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  std::int64_t step = 1;    // 1-based optimizer step, for Adam bias correction
  float grad_scale = 1.0f;  // gradients are multiplied by this first (unscale, clip, average)
  // > 0: the update first measures the global norm of the gradients times
  // grad_scale on the backend and, when it exceeds this, scales them down to
  // it (clipped_scale), so clipping needs nothing read back. 0: no clipping.
  double clip_norm = 0;
};

// The gradient scale after clipping to `clip`, where `scaled_norm` is the norm
// of the gradients times `grad_scale`. constexpr, so CUDA kernels call it on
// the device too (--expt-relaxed-constexpr).
constexpr double clipped_scale(double grad_scale, double scaled_norm, double clip) {
  return scaled_norm > clip ? grad_scale * clip / (scaled_norm + 1e-6) : grad_scale;
}

// What the schedule sets for one update: the learning rate, and the momentum
// a one-cycle schedule cycles (SGD's momentum, Adam's beta1).
struct ScheduledUpdate {
  float lr = 0.0f;
  float momentum = 0.0f;
};

// The momentum an optimizer step applies: SGD's momentum or Adam's beta1.
constexpr float momentum_of(const OptimizerStep& o) {
  return o.kind == OptimizerKind::sgd ? o.momentum : o.beta1;
}
constexpr void set_momentum(OptimizerStep& o, float momentum) {
  (o.kind == OptimizerKind::sgd ? o.momentum : o.beta1) = momentum;
}

// The schedule by applied update for a window of updates: `values[i]` is
// what update `first + i` (0-based) applies; updates outside the window take
// the nearest end's.
struct ScheduleWindow {
  std::int64_t first = 0;
  std::int64_t count = 0;
  const ScheduledUpdate* values = nullptr;
  constexpr ScheduledUpdate at(std::int64_t update) const {
    const std::int64_t i = update - first;
    return values[i < 0 ? 0 : (i >= count ? count - 1 : i)];
  }
};

// What one update applies.
struct UpdateDecision {
  bool apply = true;
  double grad_scale = 1.0;
  float lr = 0.0f;
  float momentum = 0.0f;  // momentum_of the step applied
  std::int64_t step = 1;
};

// The decision of an update that measures nothing: the step as set.
constexpr UpdateDecision as_set(const OptimizerStep& o) {
  return {true, o.grad_scale, o.lr, momentum_of(o), o.step};
}

// `o` with what `d` decided: the values the update kernels apply.
constexpr OptimizerStep applied(OptimizerStep o, const UpdateDecision& d) {
  o.grad_scale = static_cast<float>(d.grad_scale);
  o.lr = d.lr;
  set_momentum(o, d.momentum);
  o.step = d.step;
  return o;
}

// Decides one update from the gradients it is about to apply (`grad_norm`:
// their norm as computed, before grad_scale; `finite`: none is inf or NaN).
// Under loss scaling (`scaling` non-null) the scaler's rule says whether the
// update is applied and moves the scale on, the gradients are divided by the
// scale they were computed at, and the learning rate and momentum (from
// `schedule`, by the count of updates applied so far) and Adam's step follow
// the applied updates, so that a skipped step holds the schedule. Then
// clipping. constexpr: the CUDA update decides on the device with it.
constexpr UpdateDecision decide_update(const OptimizerStep& o, double grad_norm, bool finite,
                                       const LossScaleRule& rule, LossScaleState* scaling,
                                       const ScheduleWindow* schedule) {
  UpdateDecision d = as_set(o);
  if (scaling) {
    const std::int64_t applied_updates = scaling->steps - scaling->skipped;
    d.grad_scale = o.grad_scale / scaling->scale;
    if (schedule && schedule->count > 0) {
      const ScheduledUpdate next = schedule->at(applied_updates);
      d.lr = next.lr;
      d.momentum = next.momentum;
    }
    d.step = applied_updates + 1;
    d.apply = advance_loss_scale(rule, *scaling, finite);
  }
  if (o.clip_norm > 0)
    d.grad_scale = clipped_scale(d.grad_scale, d.grad_scale * grad_norm, o.clip_norm);
  return d;
}

// The most updates' schedule a backend holds ahead under loss scaling
// (VectorOps::set_schedule): the host reads the scaler's state at most this
// many updates apart.
inline constexpr std::int64_t kMaxScheduledUpdates = 4096;

inline void check_schedule_size(std::size_t count) {
  if (count > static_cast<std::size_t>(kMaxScheduledUpdates))
    throw std::invalid_argument("set_schedule: " + std::to_string(count) +
                                " updates, more than the " + std::to_string(kMaxScheduledUpdates) +
                                " a backend holds");
}

class VectorOps {
 public:
  virtual ~VectorOps() = default;
  // One update of every slot: set_optimizer_step, then optimizer_update.
  void optimizer_step(const std::vector<ParamSlot>& slots, const OptimizerStep& step) {
    set_optimizer_step(step);
    optimizer_update(slots);
  }
  // The hyperparameters later updates use. They are kept in backend memory, so
  // an update recorded with the step (a CUDA graph) reads the current ones.
  virtual void set_optimizer_step(const OptimizerStep& step) = 0;
  // Updates every slot (all in one launch on a GPU, after the norm's launches
  // when clipping) with the hyperparameters set last.
  virtual void optimizer_update(const std::vector<ParamSlot>& slots) = 0;
  // Whether an update without loss scaling left a weight (or Adam's second
  // moment) inf or NaN since the last call (inf or NaN gradients, or a step
  // that overflowed: the run is lost); resets the flag. A read-back on a GPU: for log points and
  // checkpoints, not every step.
  virtual bool nonfinite_weights_seen() = 0;
  // fp16 loss scaling done by the updates themselves (decide_update), from
  // `state` on: each update checks the gradients for inf and NaN, skips itself
  // or divides the scale out, and moves the scale on by `rule`; its learning
  // rate and momentum are the ones set_schedule gave for the count of updates
  // applied so far, and Adam's step that count plus one. The state stays in backend
  // memory, so nothing is read back per step and an update recorded with the
  // step (a CUDA graph) scales too.
  virtual void start_loss_scaling(const LossScaleRule& rule, const LossScaleState& state) = 0;
  // Under loss scaling: the learning rates and momenta of applied updates
  // `first_update`, `first_update` + 1, ... (the host sends the window that
  // the updates until its next read of the state can reach), at most
  // kMaxScheduledUpdates of them (std::invalid_argument beyond): a GPU holds
  // them in a table of that size, allocated once, so that a recorded update
  // always reads where they are.
  virtual void set_schedule(std::int64_t first_update,
                            const std::vector<ScheduledUpdate>& updates) = 0;
  // Back to updates that apply every step with the hyperparameters set.
  virtual void stop_loss_scaling() = 0;
  // The scaler's state after the updates queued so far (a read-back on a GPU).
  virtual LossScaleState loss_scale_state() = 0;
  // dst = factor x the current loss scale (1 without loss scaling): the seed
  // gradient backward starts from, read from backend memory.
  virtual void fill_loss_seed(const TensorRef& dst, double factor) = 0;
  // Sum of squares of all tensors (float32) in double precision; `finite` is set
  // to false when any element is inf or NaN.
  virtual double sum_squares(const std::vector<TensorRef>& tensors, bool& finite) = 0;
  // dst[i] += src[i] (float32, same size).
  virtual void accumulate(const TensorRef& dst, const TensorRef& src) = 0;
  // The weight later calls of `average` move by, kept in backend memory so
  // that an average recorded with the step reads the current one.
  virtual void set_average_weight(float weight) = 0;
  // dst[i] += w * (src[i] - dst[i]) with the weight w set last (float32, same
  // size): one step of an exponential moving average of src.
  virtual void average(const TensorRef& dst, const TensorRef& src) = 0;
  // Exchanges the contents of a and b (float32, same size).
  virtual void swap(const TensorRef& a, const TensorRef& b) = 0;
  virtual void fill(const TensorRef& dst, float value) = 0;
  // dst (bf16) = src (float32) rounded to nearest even, element by element.
  virtual void round_to_bf16(const TensorRef& src, const TensorRef& dst);
};

inline void VectorOps::round_to_bf16(const TensorRef&, const TensorRef&) {
  throw std::logic_error("this backend keeps no bf16 copies of parameters");
}

}  // namespace trainer
