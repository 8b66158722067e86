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
// 1e4): the learning rate goes up from max_lr/25 at step 0 to max_lr at step
// pct_start * total - 1, then down to max_lr/25/1e4 at the last step,
// total - 1; with cycle_momentum the momentum goes the other way, from
// max_momentum down to base_momentum at the peak and back.
struct OneCyclePhases {
  double peak_step, last_step;
};

OneCyclePhases phases_of(const config::ScheduleConfig& s, std::int64_t total_steps) {
  return {s.pct_start * static_cast<double>(total_steps) - 1, static_cast<double>(total_steps) - 1};
}

// The value at `step` of a cycle from `start` to `peak` (rising phase) and
// on to `end`.
double one_cycle(const OneCyclePhases& p, double start, double peak, double end,
                 std::int64_t step) {
  const double t = static_cast<double>(step);
  if (t <= p.peak_step && p.peak_step > 0) return cosine_between(start, peak, t / p.peak_step);
  if (p.last_step <= p.peak_step) return peak;
  return cosine_between(peak, end, std::min(1.0, (t - p.peak_step) / (p.last_step - p.peak_step)));
}

double one_cycle_lr(const config::ScheduleConfig& s, double base_lr, std::int64_t step,
                    std::int64_t total_steps) {
  const double peak = s.max_lr > 0 ? s.max_lr : base_lr;
  const double start = peak / 25.0, end = start / 1e4;
  return one_cycle(phases_of(s, total_steps), start, peak, end, step);
}

}  // namespace

double learning_rate(const config::ScheduleConfig& s, double base_lr, std::int64_t step,
                     std::int64_t total_steps) {
  if (s.type == "onecycle") return one_cycle_lr(s, base_lr, step, total_steps);
  if (s.type == "range_test") {  // base_lr at the first step, max_lr at the last
    const double fraction = total_steps > 1 ? static_cast<double>(std::min(step, total_steps - 1)) /
                                                  static_cast<double>(total_steps - 1)
                                            : 0.0;
    return base_lr * std::pow(s.max_lr / base_lr, fraction);
  }
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

bool cycles_momentum(const config::ScheduleConfig& s) {
  return s.type == "onecycle" && s.cycle_momentum;
}

double scheduled_momentum(const config::ScheduleConfig& s, double optimizer_momentum,
                          std::int64_t step, std::int64_t total_steps) {
  if (!cycles_momentum(s)) return optimizer_momentum;
  return one_cycle(phases_of(s, total_steps), s.max_momentum, s.base_momentum, s.max_momentum,
                   step);
}

}  // namespace trainer::train
