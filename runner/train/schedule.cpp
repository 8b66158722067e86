// Learning-rate schedule arithmetic.
#include "runner/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace trainer::train {
namespace {

const double pi = std::acos(-1.0);

// Cosine from `from` (fraction 0) to `to` (fraction 1).
double cosine_between(double from, double to, double fraction) {
  return to + (from - to) * (1 + std::cos(pi * fraction)) / 2;
}

// PyTorch's OneCycleLR (cosine, two phases, div_factor 25, final_div_factor
// 1e4): up from max_lr/25 at step 0 to max_lr at step pct_start * total - 1,
// then down to max_lr/25/1e4 at the last step, total - 1. Momentum is not
// cycled (OneCycleLR's cycle_momentum=False).
double one_cycle(const config::ScheduleConfig& s, double base_lr, std::int64_t step,
                 std::int64_t total_steps) {
  const double peak = s.max_lr > 0 ? s.max_lr : base_lr;
  const double start = peak / 25.0, end = start / 1e4;
  const double peak_step = s.pct_start * static_cast<double>(total_steps) - 1;
  const double last_step = static_cast<double>(total_steps) - 1;
  const double t = static_cast<double>(step);
  if (t <= peak_step && peak_step > 0) return cosine_between(start, peak, t / peak_step);
  if (last_step <= peak_step) return peak;
  return cosine_between(peak, end, std::min(1.0, (t - peak_step) / (last_step - peak_step)));
}

}  // namespace

double learning_rate(const config::ScheduleConfig& s, double base_lr, std::int64_t step,
                     std::int64_t total_steps) {
  if (s.type == "onecycle") return one_cycle(s, base_lr, step, total_steps);
  if (s.warmup_steps > 0 && step < s.warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const std::int64_t after = step - s.warmup_steps;
  const std::int64_t span = std::max<std::int64_t>(1, total_steps - s.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(after) / static_cast<double>(span));
  if (s.type == "step")
    return base_lr *
           std::pow(s.gamma, static_cast<double>(after / std::max<std::int64_t>(1, s.step_size)));
  if (s.type == "multistep") {
    const auto passed = std::count_if(s.milestones.begin(), s.milestones.end(),
                                      [&](std::int64_t m) { return step >= m; });
    return base_lr * std::pow(s.gamma, static_cast<double>(passed));
  }
  if (s.type == "cosine") return cosine_between(base_lr, s.min_lr, progress);
  if (s.type == "linear") return base_lr + (s.min_lr - base_lr) * progress;
  return base_lr;  // constant
}

}  // namespace trainer::train
