// TensorRef: a non-owning view of typed memory with a shape (row-major, dense).
// Tensors in a compiled program live in an arena; kernels only ever see views.
#pragma once

#include <cstddef>

#include "ops/dtype.h"
#include "ops/shape.h"

namespace trainer {

struct TensorRef {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::f32;

  std::int64_t numel() const { return trainer::numel(shape); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  float* f32() const { return static_cast<float*>(data); }
  std::int64_t* i64() const { return static_cast<std::int64_t*>(data); }
  explicit operator bool() const { return data != nullptr; }
};

}  // namespace trainer
