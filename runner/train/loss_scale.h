// LossScaler: loss scaling for fp16 mixed precision. The loss is multiplied by
// the scale before backward so that small gradients survive fp16; the optimizer
// divides it out. A step whose gradients overflow (inf/NaN) is skipped: the
// dynamic scale backs off (after `hysteresis` consecutive overflows) and grows
// again after `growth_interval` clean steps (ops/loss_scale_rule.h). When steps
// keep overflowing at `min_scale` the scaler reports a collapse, and the run
// stops with a diagnosis instead of training on with every step skipped.
//
// In training the backend's update applies the rule itself, step by step, and
// this object holds the host's copy of the state, brought up to date (sync) at
// log points and checkpoints.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "ops/loss_scale_rule.h"
#include "runner/config/config.h"

namespace trainer::train {

class LossScaler {
 public:
  // Disabled (scale 1, never skips) unless `enabled`.
  LossScaler(const config::LossScaleConfig& config, bool enabled);

  bool enabled() const { return enabled_; }
  double scale() const { return state_.scale; }
  std::int64_t skipped_steps() const { return state_.skipped; }
  // Consecutive overflowing steps at min_scale reached collapse_patience.
  // It stays collapsed, so a state read later still shows it.
  bool collapsed() const { return state_.collapsed_at_step > 0; }
  // The step (1-based) at which the run of overflows reached collapse_patience.
  std::int64_t collapsed_at_step() const { return state_.collapsed_at_step; }

  // The outcome of one step's gradients; returns whether to apply them.
  bool update(bool gradients_finite);

  const LossScaleRule& rule() const { return rule_; }
  const LossScaleState& state() const { return state_; }
  // Takes the state the backend's updates reached.
  void sync(const LossScaleState& state) { state_ = state; }

  // The scaler's state, for checkpoints; restore() takes what to_json() gave
  // (or nothing, from a run without loss scaling) and the step it was saved at.
  nlohmann::json to_json() const;
  void restore(const nlohmann::json& state, std::int64_t step);

 private:
  bool enabled_ = false;
  LossScaleRule rule_;
  LossScaleState state_;
};

}  // namespace trainer::train
