// Shape helpers and dtype names.
#include <sstream>

#include "ops/dtype.h"
#include "ops/shape.h"

namespace trainer {

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string to_string(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8})
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

}  // namespace trainer
