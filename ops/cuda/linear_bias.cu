// Bias add and bias gradient over the rows of a row-major matrix.
#include "ops/cuda/launch.cuh"
#include "ops/cuda/linear_bias.h"

namespace trainer::cuda {
namespace {

__global__ void add_bias_kernel(float* y, const float* bias, long long total, long long cols) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    y[i] += bias[i % cols];
}

// One thread per column (striding past the grid cap); columns are adjacent in
// memory, so each row read is coalesced.
__global__ void bias_grad_kernel(const float* dy, float* db, long long rows, long long cols) {
  for (long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
       j += static_cast<long long>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (long long r = 0; r < rows; ++r) sum += dy[r * cols + j];
    db[j] = sum;
  }
}

}  // namespace

void add_bias_rows(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                   cudaStream_t stream) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<grid_for(rows * cols), kBlock, 0, stream>>>(y, bias, rows * cols, cols);
  check_launch("add_bias_kernel");
}

void bias_grad_rows(const float* dy, float* db, std::int64_t rows, std::int64_t cols,
                    cudaStream_t stream) {
  if (cols == 0) return;
  bias_grad_kernel<<<grid_for(cols), kBlock, 0, stream>>>(dy, db, rows, cols);
  check_launch("bias_grad_kernel");
}

}  // namespace trainer::cuda
