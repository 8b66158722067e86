// Vectorisable float reductions for own loops: sums kept in 16 independent lanes
// (the compiler turns them into SIMD adds without -ffast-math), combined at the end.
#pragma once

#include <cstdint>

namespace trainer::cpu {

inline float sum_floats(const float* x, std::int64_t n) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  std::int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += x[k + j];
  float tail = 0;
  for (; k < n; ++k) tail += x[k];
  for (int j = 0; j < kLanes; ++j) tail += lanes[j];
  return tail;
}

}  // namespace trainer::cpu
