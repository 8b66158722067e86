// float32 <-> bf16 / fp16 conversion kernels (low_precision.h).
#include "ops/cuda/low_precision.h"

#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/launch.cuh"

namespace trainer::cuda {
namespace {

__global__ void narrow_bf16(const float* src, unsigned short* dst, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = bf16_bits(src[i]);
}

__global__ void narrow_f16(const float* src, __half* dst, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = __float2half_rn(src[i]);
}

__global__ void widen_bf16(const unsigned short* src, float* dst, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = __uint_as_float(static_cast<unsigned>(src[i]) << 16);
}

__global__ void widen_f16(const __half* src, float* dst, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = __half2float(src[i]);
}

[[noreturn]] void not_low(DType t) {
  throw std::logic_error("not a 16-bit compute type: " + std::string(dtype_name(t)));
}

}  // namespace

cudaDataType_t cuda_type(DType low) {
  if (low == DType::bf16) return CUDA_R_16BF;
  if (low == DType::f16) return CUDA_R_16F;
  not_low(low);
}

cudnnDataType_t cudnn_type(DType low) {
  if (low == DType::bf16) return CUDNN_DATA_BFLOAT16;
  if (low == DType::f16) return CUDNN_DATA_HALF;
  not_low(low);
}

void narrow(const float* src, void* dst, std::int64_t n, DType low, cudaStream_t stream) {
  if (n == 0) return;
  if (low == DType::bf16)
    narrow_bf16<<<grid_for(n), kBlock, 0, stream>>>(src, static_cast<unsigned short*>(dst), n);
  else if (low == DType::f16)
    narrow_f16<<<grid_for(n), kBlock, 0, stream>>>(src, static_cast<__half*>(dst), n);
  else
    not_low(low);
  check_launch("narrow");
}

const void* operand(const TensorRef& t, DType low, void* slot, cudaStream_t stream) {
  if (low == DType::f32) return t.data;
  narrow(t.f32(), slot, t.numel(), low, stream);
  return slot;
}

void widen(const void* src, float* dst, std::int64_t n, DType low, cudaStream_t stream) {
  if (n == 0) return;
  if (low == DType::bf16)
    widen_bf16<<<grid_for(n), kBlock, 0, stream>>>(static_cast<const unsigned short*>(src), dst, n);
  else if (low == DType::f16)
    widen_f16<<<grid_for(n), kBlock, 0, stream>>>(static_cast<const __half*>(src), dst, n);
  else
    not_low(low);
  check_launch("widen");
}

}  // namespace trainer::cuda
