// Finding NaN and infinity in the float32 arrays the sources load: one
// branch-free pass over the bits, which the compiler vectorises; the position
// is searched for only when there is one.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace trainer::data {

// The index of the first NaN or infinity in values[0, count), or nullopt.
inline std::optional<std::size_t> first_non_finite(const float* values, std::size_t count) {
  std::uint32_t any = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, values + i, sizeof bits);
    any |= static_cast<std::uint32_t>((bits & 0x7F800000u) == 0x7F800000u);  // exponent all ones
  }
  if (!any) return std::nullopt;
  for (std::size_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i])) return i;
  return std::nullopt;
}

// "NaN", "inf" or "-inf", for errors.
inline std::string non_finite_name(double value) {
  return std::isnan(value) ? "NaN" : value > 0 ? "inf" : "-inf";
}

}  // namespace trainer::data
