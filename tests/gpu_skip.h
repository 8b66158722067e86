// The skip rule of the GPU tests: skipped (exit 77) with the reason when the
// build has no CUDA backend or this machine has no usable GPU. A test file
// that includes this header is a GPU test: it defines the
// trainer_test_skip_reason() that catch_main.cpp asks before running.
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

std::string trainer_test_skip_reason() {
  return gpu_skip_reason();
}
