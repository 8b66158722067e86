// Launch helpers shared by the .cu files: block size, grid size, the check
// that a launch was accepted, and the rows of a warp-per-row kernel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/check.h"

namespace trainer::cuda {

constexpr int kBlock = 256;

inline unsigned grid_for(std::int64_t n, int per_thread = 1) {
  const std::int64_t threads = (n + per_thread - 1) / per_thread;
  const std::int64_t blocks = (threads + kBlock - 1) / kBlock;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 65535 * 8));
}

inline void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

// This thread's warp's first row, and the stride between a warp's rows, for
// kernels with one warp per row that stride over rows (grid_for caps the grid).
__device__ __forceinline__ long long first_warp_row() {
  return (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
}
__device__ __forceinline__ long long warp_row_stride() {
  return static_cast<long long>(gridDim.x) * blockDim.x / 32;
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0;
}

}  // namespace trainer::cuda
