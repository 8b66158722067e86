// Element-wise maps over float arrays: y[i] = f(a[i], b[i]) with a
// grid-stride loop, four elements at a time (float4) when every pointer is
// 16-byte aligned, then the tail one by one. The functor sees float values,
// so each element-wise kernel is only its arithmetic (activations, add,
// accumulate, fill).
#pragma once

#include <cstdint>

#include "ops/cuda/launch.cuh"

namespace trainer::cuda {

template <typename F>
__global__ void map_kernel(const float* a, const float* b, float* y, long long n, int vec, F f) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  long long done = 0;
  if (vec) {
    const long long n4 = n / 4;
    for (long long i = first; i < n4; i += stride) {
      const float4 u = a ? reinterpret_cast<const float4*>(a)[i] : float4{};
      const float4 v = b ? reinterpret_cast<const float4*>(b)[i] : float4{};
      reinterpret_cast<float4*>(y)[i] = float4{f(u.x, v.x), f(u.y, v.y), f(u.z, v.z), f(u.w, v.w)};
    }
    done = n4 * 4;
  }
  for (long long i = done + first; i < n; i += stride) y[i] = f(a ? a[i] : 0.0f, b ? b[i] : 0.0f);
}

// Queues y[i] = f(a[i], b[i]) for i < n on `stream`. `a` or `b` may be null
// (f then gets 0 for it); y may be a or b.
template <typename F>
void map(const float* a, const float* b, float* y, std::int64_t n, F f, cudaStream_t stream,
         const char* what) {
  if (n == 0) return;
  const int vec = (!a || aligned16(a)) && (!b || aligned16(b)) && aligned16(y);
  map_kernel<<<grid_for(n, 4), kBlock, 0, stream>>>(a, b, y, n, vec, f);
  check_launch(what);
}

}  // namespace trainer::cuda
