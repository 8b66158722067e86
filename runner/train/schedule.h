// Learning-rate schedules: constant, step, multistep, cosine, linear (each
// after an optional linear warm-up) and one-cycle (PyTorch's OneCycleLR).
#pragma once

#include <cstdint>

#include "runner/config/config.h"

namespace trainer::train {

// The learning rate for optimizer step `step` (0-based) of `total_steps`.
double learning_rate(const config::ScheduleConfig& schedule, double base_lr, std::int64_t step,
                     std::int64_t total_steps);

}  // namespace trainer::train
