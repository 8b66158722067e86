// One optimizer step of the training loop (train_loop.h): the optimizer and
// its schedule set up, the step's micro-batches fed, run and their losses
// recorded, the end of a step outside the recorded work (the reduction over
// ranks, the update), and fp16 loss scaling's state read back from the backend.
#include "runner/train/train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ops/step_values.h"
#include "runner/config/diagnostics.h"
#include "runner/train/loss_scale.h"
#include "runner/train/schedule.h"

namespace trainer::train::loop {
namespace {

// Why fp16 loss scaling collapsed, and what to change.
std::string collapse_diagnosis(const LossScaler& scaler, double loss,
                               const std::vector<std::string>& overflowing) {
  const std::int64_t step = scaler.collapsed_at_step();
  const std::string names = config::join(std::vector<std::string>(
      overflowing.begin(),
      overflowing.begin() + std::min<std::ptrdiff_t>(3, std::ssize(overflowing))));
  const bool dynamic = scaler.rule().dynamic;
  std::string text = "fp16 loss scaling collapsed at step " + std::to_string(step) + ": " +
                     std::to_string(scaler.rule().collapse_patience) +
                     " consecutive steps overflowed at the " + (dynamic ? "minimum" : "static") +
                     " loss scale " + fmt::format("{:g}", scaler.scale()) + " (" +
                     std::to_string(scaler.skipped_steps()) + " steps skipped up to step " +
                     std::to_string(scaler.state().steps) + "). ";
  if (!std::isfinite(loss))
    return text + "The forward pass itself overflows fp16 (the loss is " +
           fmt::format("{:g}", loss) +
           "): activations exceed fp16's largest value, 65504, which no loss scale can fix. "
           "Likely cause: inputs that are not normalised, a missing normalisation layer, or "
           "weights grown by too high a learning rate. Use precision: bf16 (float32's range), "
           "normalise the inputs, or lower optimizer.lr.";
  const std::string cause =
      "cause: a learning rate that makes the weights diverge, exploding gradients, or a forward "
      "pass that overflows fp16 where a relu hides it from the loss (it turns the NaN into 0): "
      "inputs or activations beyond 65504. Lower optimizer.lr, set train.clip_grad_norm, "
      "normalise the inputs, or use precision: bf16.";
  return text + "The loss is finite (" + fmt::format("{:.4g}", loss) + ") but the gradients" +
         (names.empty() ? std::string() : " of " + names) + " overflow fp16 even at that scale. " +
         (dynamic ? "Likely " + cause
                  : "Lower precision.loss_scale.static_scale (or set it to 0 for the dynamic "
                    "scale); otherwise the likely " +
                        cause);
}

// The names of the parameters whose gradients hold inf or NaN.
std::vector<std::string> overflowing_parameters(graph::Program& program) {
  std::vector<std::string> names;
  for (auto& p : program.params()) {
    if (!p.grad) continue;
    bool finite = true;
    program.backend().vector_ops().sum_squares({p.grad}, finite);
    if (!finite) names.push_back(p.param->name);
  }
  return names;
}

}  // namespace

void TrainLoop::prepare_optimizer() {
  // The backend outlives runs (one per process): a flag an earlier run left
  // set is not this run's.
  backend_.vector_ops().nonfinite_weights_seen();
  // Optimizer slots over every trainable parameter.
  slots_ = program_.optimizer_slots();
  for (const auto& p : std::as_const(program_).params())
    if (p.grad) grads_.push_back(p.grad);
  opt_ = configured_optimizer(cfg_);
  configured_momentum_ = momentum_of(opt_);
  opt_.lr = static_cast<float>(resumed_.lr);
  // fp16: the loss is scaled before backward; the update checks the gradients,
  // divides the scale out or skips, and moves the scale on, all on the backend.
  // Its learning rate and momentum follow the updates applied (skipped steps
  // hold the schedule), from a window of the schedule the host sends at each
  // read of the state: at most log_every (and never more than
  // kMaxScheduledUpdates) updates ahead.
  scaler_.restore(resumed_.loss_scale, resumed_.step);
  if (scaler_.enabled()) {
    schedule_window_ = std::min(log_every_, kMaxScheduledUpdates);
    synced_at_step_ = resumed_.step;
    backend_.vector_ops().start_loss_scaling(scaler_.rule(), scaler_.state());
    send_schedule();
  }
  // The update joins the training step (and its recording, a CUDA graph) when
  // nothing is done on the host between backward and the update: one
  // micro-batch and one rank, no injected overflow. Clipping and loss scaling
  // are decided inside the update.
  update_in_step_ = accumulation_ == 1 && world_ == 1 && inject_overflow_.empty();
  update_placement_ =
      update_in_step_     ? "in the step"
      : accumulation_ > 1 ? "after the step: gradients accumulate over micro-batches first"
      : world_ > 1        ? "after the step: gradients are reduced across ranks first"
                          : "after the step: an overflow is injected (TRAINER_INJECT_OVERFLOW)";
  if (update_in_step_)
    program_.set_update([this] {
      backend_.vector_ops().optimizer_update(slots_);
      if (averaging_) program_.update_ema();
    });
}

void TrainLoop::schedule_update(std::int64_t at_step) {
  if (scaler_.enabled()) return;  // the backend knows the applied updates
  const ScheduledUpdate update = scheduled_update(at_step);
  opt_.lr = update.lr;
  set_momentum(opt_, update.momentum);
  opt_.step = at_step + 1;
}

ScheduledUpdate TrainLoop::scheduled_update(std::int64_t update) const {
  return {static_cast<float>(learning_rate(cfg_.schedule, cfg_.optimizer.lr, update, total_steps_)),
          static_cast<float>(
              scheduled_momentum(cfg_.schedule, configured_momentum_, update, total_steps_))};
}

void TrainLoop::train_micro_batches() {
  if (accumulation_ > 1) program_.zero_gradients();
  // The step's gradient is the mean over the step's counted rows (real, and
  // not ignored), as one batch of them would give, even when a micro-batch is
  // short or the epoch's last step has fewer micro-batches (drop_last:
  // false). Each micro-batch's loss is a mean over its own counted rows, so
  // it counts by their number over the step's; the total is known only once
  // every micro-batch is in, so the seeds divide by the count as far as known
  // at the first (its counted rows and the real rows still to come) and
  // count_correction_ makes up the difference (1 when no row is ignored, and
  // whenever the step is one micro-batch). The ranks' shards are equal, so
  // each rank's step holds as many micro-batches and rows.
  const std::int64_t first_batch = loader_.cursor().position;
  const std::int64_t micro_batches =
      std::min(accumulation_, loader_.batches_per_epoch() - first_batch);
  std::int64_t rows_to_come = 0;
  for (std::int64_t micro = 0; micro < micro_batches; ++micro)
    rows_to_come += loader_.rows_of_batch(first_batch + micro);
  double seed_divisor = 0;
  std::int64_t step_counted = 0;
  const std::size_t first_weight = loss_weights_.size();
  for (std::int64_t micro = 0; micro < micro_batches; ++micro) {
    const data::Batch& batch = next_micro_batch();
    feed(program_, batch, s_.num_classes, ignored_);
    const std::int64_t counted = counted_rows(batch, ignored_);
    rows_to_come -= batch.rows;
    if (micro == 0) seed_divisor = static_cast<double>(counted + rows_to_come);
    step_counted += counted;
    run_micro_batch(batch, micro,
                    seed_divisor > 0 ? static_cast<double>(counted) / seed_divisor : 0.0);
    loss_weights_.push_back(static_cast<double>(counted));
  }
  // The step's loss: its micro-batches' losses by their share of its counted rows.
  for (std::size_t i = first_weight; i < loss_weights_.size(); ++i)
    loss_weights_[i] = step_counted > 0 ? loss_weights_[i] / static_cast<double>(step_counted) : 0;
  count_correction_ = step_counted > 0 ? seed_divisor / static_cast<double>(step_counted) : 1.0;
  if (step_counted > 0) window_.loss_steps += 1;
}

const data::Batch& TrainLoop::next_micro_batch() {
  const auto wait_start = Clock::now();
  const data::Batch* batch = loader_.next();
  const double waited = seconds_since(wait_start);
  window_.wait += waited;
  total_wait_ += waited;
  collective_.note_data_wait(waited);
  if (!batch) throw std::logic_error("the loader ran out of batches inside an epoch");
  return *batch;
}

void TrainLoop::run_micro_batch(const data::Batch& batch, std::int64_t micro, double weight) {
  // The loss scale, read on the backend: it may have moved in the last update.
  backend_.vector_ops().fill_loss_seed(program_.loss_seed(), weight);
  if (update_in_step_) {     // the values the step's own update reads
    opt_.grad_scale = 1.0f;  // one rank and one micro-batch: nothing to average or correct
    schedule_update(step_);
    backend_.vector_ops().set_optimizer_step(opt_);
    set_average_weight();
  }
  // One seed for the whole step; row j of this rank's micro-batch is sample
  // rank + world * (micro * micro_size + j) of the step's global batch (the
  // loader's sharding), so dropout draws follow the sample.
  StepValues values;
  values.seed = splitmix64(static_cast<std::uint64_t>(cfg_.seed) ^
                           splitmix64(static_cast<std::uint64_t>(step_)));
  values.valid_rows = batch.rows;
  values.first_position = collective_.rank() + world_ * micro * s_.batch.micro;
  values.position_stride = world_;
  program_.train_step(values);
  if (world_ > 1) collective_.watch_queued_work();  // before any read-back may wait on it
  losses_.record(program_.loss());
  window_.samples += batch.rows;
  window_.timed_samples += batch.rows;
  total_samples_ += batch.rows;
  const bool log_step = (step_ + 1) % log_every_ == 0;
  if (s_.num_classes > 0 && (log_step || step_ + 1 == total_steps_)) {
    backend_.copy_to_host(logits_.data(), program_.logits().data, logits_.size() * sizeof(float));
    const Hits h = count_counted_hits(logits_.data(), batch, s_.num_classes, ignored_);
    Hits& hits = log_step ? window_.hits : window_.last_step_hits;
    hits.top1 += h.top1;
    hits.rows += h.rows;
  }
}

void TrainLoop::finish_step() {
  // Each rank's gradients become the mean over its own counted rows; the
  // ranks then count alike (as PyTorch's DDP averages them), so with several
  // ranks the correction comes before the sum.
  float own_scale = static_cast<float>(count_correction_);
  if (world_ > 1 && own_scale != 1.0f) {
    scale_gradients_on_host(own_scale);
    own_scale = 1.0f;
  }
  // Gradients are means over this rank's micro-batches; average them over ranks.
  if (world_ > 1) collective_.all_reduce_sum(grads_);
  if (inject_overflow_.count(step_ + 1) && !grads_.empty()) {
    const float inf = std::numeric_limits<float>::infinity();
    backend_.copy_to_device(grads_.front().data, &inf, sizeof inf);
  }
  // The update averages over ranks; under loss scaling it also divides the
  // scale out, or skips the step when the gradients overflowed.
  opt_.grad_scale = rank_average_ * own_scale;
  schedule_update(step_);
  backend_.vector_ops().optimizer_step(slots_, opt_);
  set_average_weight();
  if (averaging_) program_.update_ema();
  if (rank_buffers_each_step_) average_rank_buffers();
}

void TrainLoop::set_average_weight() {
  if (!averaging_) return;
  const double t = static_cast<double>(step_);  // the updates before this one
  const double decay = cfg_.train.ema_warmup ? std::min(cfg_.train.ema_decay, (1 + t) / (10 + t))
                                             : cfg_.train.ema_decay;
  const float weight = static_cast<float>(1.0 - decay);
  if (weight == average_weight_) return;  // constant once warmed up: nothing to upload
  backend_.vector_ops().set_average_weight(weight);
  average_weight_ = weight;
}

// A round trip through host memory, taken only by steps with ignored rows on
// several ranks with accumulation (the backend has no scaling of its own).
void TrainLoop::scale_gradients_on_host(float factor) {
  std::vector<float> values;
  for (const TensorRef& grad : grads_) {
    if (grad.dtype != DType::f32) throw std::logic_error("gradients are not float32");
    values.resize(static_cast<std::size_t>(grad.numel()));
    backend_.copy_to_host(values.data(), grad.data, grad.bytes());
    for (float& v : values) v *= factor;
    backend_.copy_to_device(grad.data, values.data(), grad.bytes());
  }
}

void TrainLoop::sync_loss_scale() {
  if (!scaler_.enabled()) return;
  const LossScaleState known = scaler_.state();
  scaler_.sync(backend_.vector_ops().loss_scale_state());
  const LossScaleState& now = scaler_.state();
  synced_at_step_ = step_;
  send_schedule();
  // The learning rate and momentum shown are the ones the last applied
  // update used (before any, the ones the first will use).
  const std::int64_t applied = now.steps - now.skipped;
  const ScheduledUpdate last = scheduled_update(std::max<std::int64_t>(applied - 1, 0));
  opt_.lr = last.lr;
  set_momentum(opt_, last.momentum);
  // Every rank decided alike, from the same reduced gradients: the root reports.
  const std::int64_t skipped = collective_.is_root() ? now.skipped - known.skipped : 0;
  if (skipped > 0) progress_.clear();
  if (skipped == 1)
    log_->warn("step {}: gradients overflow at loss scale {:g}: step skipped, scale now {:g}",
               now.last_overflow_step, now.last_overflow_scale, now.scale);
  else if (skipped > 1)
    log_->warn(
        "steps {} to {}: {} steps' gradients overflowed and were skipped, the last (step {}) "
        "at loss scale {:g}; scale now {:g}",
        known.steps + 1, now.steps, skipped, now.last_overflow_step, now.last_overflow_scale,
        now.scale);
  if (scaler_.collapsed())
    throw DivergedError(collapse_diagnosis(scaler_, last_loss_, overflowing_parameters(program_)));
}

void TrainLoop::send_schedule() {
  const LossScaleState& s = scaler_.state();
  const std::int64_t applied = s.steps - s.skipped;
  std::vector<ScheduledUpdate> updates(static_cast<std::size_t>(schedule_window_));
  for (std::size_t i = 0; i < updates.size(); ++i)
    updates[i] = scheduled_update(applied + static_cast<std::int64_t>(i));
  backend_.vector_ops().set_schedule(applied, updates);
}

}  // namespace trainer::train::loop
