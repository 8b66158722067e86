// Tensor shapes: a list of extents, with element counts and printing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

using Shape = std::vector<std::int64_t>;

// The most dimensions a tensor has, the batch's included: the most the
// backends' plain layouts take (oneDNN's, plain_md in ops/cpu/onednn.cpp).
inline constexpr std::size_t kMaxTensorRank = 6;

std::int64_t numel(const Shape& shape);
std::string to_string(const Shape& shape);  // "[128, 1, 28, 28]"

}  // namespace trainer
