// Learning-rate schedule arithmetic.
#include "runner/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace trainer::train {

double learning_rate(const config::ScheduleConfig& s, double base_lr, std::int64_t step,
                     std::int64_t total_steps) {
  const double pi = std::acos(-1.0);
  if (s.type == "onecycle") {
    // Cosine up from max_lr/25 to max_lr over pct_start, then cosine down to max_lr/1e4.
    const double peak = s.max_lr > 0 ? s.max_lr : base_lr;
    const double start = peak / 25.0, end = peak / 1e4;
    const double up = std::max(1.0, s.pct_start * static_cast<double>(total_steps));
    const double t = static_cast<double>(step);
    if (t < up) return start + (peak - start) * (1 - std::cos(pi * t / up)) / 2;
    const double down = std::max(1.0, static_cast<double>(total_steps) - up);
    const double f = std::min(1.0, (t - up) / down);
    return end + (peak - end) * (1 + std::cos(pi * f)) / 2;
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
  if (s.type == "cosine")
    return s.min_lr + (base_lr - s.min_lr) * (1 + std::cos(pi * progress)) / 2;
  if (s.type == "linear") return base_lr + (s.min_lr - base_lr) * progress;
  return base_lr;  // constant
}

}  // namespace trainer::train
