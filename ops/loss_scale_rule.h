// The loss-scaling rule of fp16 mixed precision as plain data and one
// constexpr function, so the host (runner/train/loss_scale.h) and the
// backends' optimizer updates (which apply it on the device, with nothing read
// back) follow the same rule. A step whose gradients hold inf or NaN is
// skipped; a dynamic scale backs off after `hysteresis` consecutive overflows
// and grows after `growth_interval` clean steps.
#pragma once

#include <cstdint>

namespace trainer {

// Above this the scaled loss itself risks overflowing float32 gradients.
inline constexpr double kMaxLossScale = 16777216.0;  // 2^24

// The largest loss scale a config may set (init_scale, min_scale,
// static_scale): a power of two (backing off by halves stays exact), far
// above what fp16 gradients survive, yet finite in float32, where the loss is
// scaled, with room for the loss it multiplies. A scale that float32 holds as
// infinity would never back off, and every step would be skipped.
inline constexpr double kLargestConfiguredLossScale = 18446744073709551616.0;  // 2^64

struct LossScaleRule {
  bool dynamic = true;  // false: static scaling, the scale never changes
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  double min_scale = 1.0;
  std::int64_t growth_interval = 2000;
  std::int64_t hysteresis = 1;
  std::int64_t collapse_patience = 10;  // consecutive overflows at the minimum that collapse it
};

// Plain data of fixed layout: the CUDA backend keeps it in device memory.
struct LossScaleState {
  double scale = 1.0;
  std::int64_t clean_steps = 0;         // since the last overflow or growth
  std::int64_t hysteresis_left = 1;     // overflows still tolerated before backing off
  std::int64_t steps = 0;               // optimizer steps taken, applied or skipped
  std::int64_t skipped = 0;             // steps skipped so far
  std::int64_t overflows_at_min = 0;    // consecutive overflows at the minimum scale
  std::int64_t last_overflow_step = 0;  // the last skipped step (1-based; 0: none yet)
  double last_overflow_scale = 0.0;     // the scale that step ran at
  // The step at which overflows_at_min first reached collapse_patience (0:
  // never). It stays set, so a host that reads the state later still sees it.
  std::int64_t collapsed_at_step = 0;
};

// Advances `state` by one step whose gradients were `finite` or not; returns
// whether that step's update is applied.
constexpr bool advance_loss_scale(const LossScaleRule& rule, LossScaleState& state, bool finite) {
  ++state.steps;
  if (finite) {
    state.overflows_at_min = 0;
    state.hysteresis_left = rule.hysteresis;
    if (rule.dynamic && ++state.clean_steps >= rule.growth_interval) {
      const double grown = state.scale * rule.growth_factor;
      state.scale = grown < kMaxLossScale ? grown : kMaxLossScale;
      state.clean_steps = 0;
    }
    return true;
  }
  ++state.skipped;
  state.clean_steps = 0;
  state.last_overflow_step = state.steps;
  state.last_overflow_scale = state.scale;
  const double floor = rule.dynamic ? rule.min_scale : state.scale;
  if (state.scale <= floor && ++state.overflows_at_min >= rule.collapse_patience &&
      state.collapsed_at_step == 0)
    state.collapsed_at_step = state.steps;
  if (rule.dynamic && --state.hysteresis_left <= 0) {
    const double backed_off = state.scale * rule.backoff_factor;
    state.scale = backed_off > rule.min_scale ? backed_off : rule.min_scale;
    state.hysteresis_left = rule.hysteresis;
  }
  return false;
}

}  // namespace trainer
