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

// A block takes 32 adjacent columns (each row's read is coalesced) with 32
// row lanes: lane y sums rows y, y + 32, ... of its column, then the lanes'
// sums are added in lane order. One fixed order for every run: deterministic.
constexpr int kBiasColumns = 32, kBiasRowLanes = 32;

__global__ void bias_grad_kernel(const float* dy, float* db, long long rows, long long cols) {
  __shared__ float partial[kBiasRowLanes][kBiasColumns + 1];  // +1: no bank conflicts
  const long long j = static_cast<long long>(blockIdx.x) * kBiasColumns + threadIdx.x;
  float sum = 0.0f;
  if (j < cols)
    for (long long r = threadIdx.y; r < rows; r += kBiasRowLanes) sum += dy[r * cols + j];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kBiasRowLanes; ++lane) total += partial[lane][threadIdx.x];
    db[j] = total;
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
  const auto blocks = static_cast<unsigned>((cols + kBiasColumns - 1) / kBiasColumns);
  bias_grad_kernel<<<blocks, dim3(kBiasColumns, kBiasRowLanes), 0, stream>>>(dy, db, rows, cols);
  check_launch("bias_grad_kernel");
}

}  // namespace trainer::cuda
