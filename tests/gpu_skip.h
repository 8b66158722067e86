// The skip rule of the GPU tests: skipped (exit 77) with the reason when the
// build has no CUDA backend or this machine has no usable GPU.
#pragma once

#include <string>

#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/device_report.h"
#endif

inline std::string gpu_skip_reason() {
#ifdef TRAINER_WITH_CUDA
  const std::string why = trainer::cuda::gpu_unavailable_reason(0);
  return why.empty() ? std::string() : "no usable GPU: " + why;
#else
  return "this build has no CUDA backend (configure with -DTRAINER_CUDA=ON)";
#endif
}
