// LossScaler: loss scaling for fp16 mixed precision. The loss is multiplied by
// the scale before backward so that small gradients survive fp16; the optimizer
// divides it out. A step whose gradients overflow (inf/NaN) is skipped: the
// dynamic scale backs off (after `hysteresis` consecutive overflows) and grows
// again after `growth_interval` clean steps. When steps keep overflowing at
// `min_scale` the scaler reports a collapse, and the run stops with a diagnosis
// instead of training on with every step skipped.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "runner/config/config.h"

namespace trainer::train {

class LossScaler {
 public:
  // Disabled (scale 1, never skips) unless `enabled`.
  LossScaler(const config::LossScaleConfig& config, bool enabled);

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  std::int64_t skipped_steps() const { return skipped_; }
  // Consecutive overflowing steps at min_scale reached collapse_patience.
  bool collapsed() const { return overflows_at_min_ >= config_.collapse_patience; }

  // The outcome of one step's gradients; returns whether to apply them.
  bool update(bool gradients_finite);

  // The scaler's state, for checkpoints; restore() takes what to_json() gave.
  nlohmann::json to_json() const;
  void restore(const nlohmann::json& state);

 private:
  config::LossScaleConfig config_;
  bool enabled_ = false;
  bool dynamic_ = false;
  double scale_ = 1;
  std::int64_t clean_steps_ = 0;       // since the last overflow or growth
  std::int64_t hysteresis_left_ = 1;   // overflows still tolerated before backing off
  std::int64_t skipped_ = 0;           // steps skipped so far
  std::int64_t overflows_at_min_ = 0;  // consecutive overflows at min_scale
};

}  // namespace trainer::train
