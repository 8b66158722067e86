// parallel_chunks: our own element-wise loops spread over the backend's OpenMP
// threads (the runtime oneDNN runs on, with the thread count backend.threads
// set), for the loops long enough to pay for a parallel region.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "ops/cpu/onednn.h"

namespace trainer::cpu {

// Loops shorter than this run on the calling thread: a parallel region costs
// a few microseconds, more than a bias or a batchnorm scale takes to update.
constexpr std::int64_t kParallelMin = 1 << 15;

// Runs body(begin, end) over [0, n): on the calling thread when n is short,
// else in one chunk per OpenMP thread (whole cache lines). Each thread first
// clears the upper AVX state oneDNN's kernels may have left on it (onednn.h).
template <class Body>
void parallel_chunks(std::int64_t n, const Body& body) {
  if (n < kParallelMin) return body(0, n);
#pragma omp parallel
  {
    clear_upper_vector_state();
    const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t chunk = ((n + threads - 1) / threads + 15) / 16 * 16;
    const std::int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    body(begin, end);
  }
}

}  // namespace trainer::cpu
