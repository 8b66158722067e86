// Learning-rate schedules: constant, step, multistep, cosine, linear (each
// after an optional linear warm-up) and one-cycle (PyTorch's OneCycleLR, with
// its momentum cycle when asked).
#pragma once

#include <cstdint>

#include "runner/config/config.h"

namespace trainer::train {

// The learning rate for optimizer step `step` (0-based) of `total_steps`.
double learning_rate(const config::ScheduleConfig& schedule, double base_lr, std::int64_t step,
                     std::int64_t total_steps);

// Whether the schedule sets the momentum (SGD's momentum, Adam's beta1).
bool cycles_momentum(const config::ScheduleConfig& schedule);

// The momentum for optimizer step `step` (0-based) of `total_steps`:
// `optimizer_momentum` unless the schedule cycles it.
double scheduled_momentum(const config::ScheduleConfig& schedule, double optimizer_momentum,
                          std::int64_t step, std::int64_t total_steps);

}  // namespace trainer::train
