// Tensor shapes: a list of extents, with element counts and printing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

using Shape = std::vector<std::int64_t>;

std::int64_t numel(const Shape& shape);
std::string to_string(const Shape& shape);  // "[128, 1, 28, 28]"

}  // namespace trainer
