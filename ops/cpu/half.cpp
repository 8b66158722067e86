// fp16 rounding of float32 values: bit arithmetic on the float encoding.
#include "ops/cpu/half.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace trainer::cpu {
namespace {

constexpr std::uint32_t kSign = 0x80000000u;
constexpr std::uint32_t kInfinity = 0x7f800000u;
constexpr std::uint32_t kHalfOverflow =
    0x477ff000u;  // 65520: rounds up past 65504, the largest fp16
constexpr std::uint32_t kHalfMinNormal = 0x38800000u;  // 2^-14
constexpr float kSubnormalQuantum = 16777216.0f;       // 2^24: fp16 subnormals are k * 2^-24

}  // namespace

float round_to_half(float v) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t sign = bits & kSign;
  std::uint32_t magnitude = bits & ~kSign;
  if (magnitude >= kInfinity) return v;  // inf, NaN
  if (magnitude >= kHalfOverflow) return std::bit_cast<float>(sign | kInfinity);
  if (magnitude < kHalfMinNormal) {  // fp16 subnormal range: a multiple of 2^-24, ties to even
    const float q = std::nearbyint(std::bit_cast<float>(magnitude) * kSubnormalQuantum);
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(q / kSubnormalQuantum));
  }
  // Normal range: keep 10 of float's 23 mantissa bits, rounding to nearest even.
  const std::uint32_t lowest_kept = (magnitude >> 13) & 1u;
  magnitude += 0x0fffu + lowest_kept;
  magnitude &= ~0x1fffu;
  return std::bit_cast<float>(sign | magnitude);
}

void round_to_half(float* data, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) data[i] = round_to_half(data[i]);
}

}  // namespace trainer::cpu
