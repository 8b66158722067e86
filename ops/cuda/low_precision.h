// The 16-bit types (bf16, fp16) that matmul-like CUDA kernels compute in under
// mixed precision: their cuBLAS and cuDNN names, and the conversions between
// them and float32 that the kernels queue around the library calls
// (activations and gradients stay float32 in memory).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>

#include "ops/dtype.h"
#include "ops/tensor.h"

namespace trainer::cuda {

// bf16 or f16; anything else is a logic error.
cudaDataType_t cuda_type(DType low);
cudnnDataType_t cudnn_type(DType low);

// dst (`low`, 2 bytes per element) = src rounded to nearest even; NaN stays a
// quiet NaN (the CPU rule of ops/cpu/vector_ops.cpp for bf16).
void narrow(const float* src, void* dst, std::int64_t n, DType low, cudaStream_t stream);
// dst (float32) = src (`low`), exactly.
void widen(const void* src, float* dst, std::int64_t n, DType low, cudaStream_t stream);

// `t` (float32) as a library operand of type `low`: its own data when `low` is
// f32, else narrowed into `slot` (queued on `stream`) and `slot` returned.
const void* operand(const TensorRef& t, DType low, void* slot, cudaStream_t stream);

// Bytes of n elements of a 16-bit type, rounded up to 256 (workspace slices).
constexpr std::size_t low_bytes(std::int64_t n) {
  return (static_cast<std::size_t>(n) * 2 + 255) / 256 * 256;
}

}  // namespace trainer::cuda
