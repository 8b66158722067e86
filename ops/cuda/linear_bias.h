// Bias kernels of linear when cuBLASLt offers no fused epilogue for a shape:
// y[r, j] += b[j], and db[j] = sum over rows of dy[r, j] (in a fixed order: deterministic).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainer::cuda {

void add_bias_rows(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                   cudaStream_t stream);
void bias_grad_rows(const float* dy, float* db, std::int64_t rows, std::int64_t cols,
                    cudaStream_t stream);

}  // namespace trainer::cuda
