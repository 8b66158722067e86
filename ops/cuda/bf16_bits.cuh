// bf16_bits: float32 -> bf16 bits on the device, rounded to nearest even with
// NaN kept a quiet NaN: the CPU rule (ops/cpu/vector_ops.cpp), bit for bit.
#pragma once

namespace trainer::cuda {

__device__ __forceinline__ unsigned short bf16_bits(float x) {
  const unsigned bits = __float_as_uint(x);
  const unsigned rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return static_cast<unsigned short>(nan ? (bits >> 16) | 0x40u : rounded);
}

}  // namespace trainer::cuda
