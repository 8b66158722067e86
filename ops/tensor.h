// TensorRef: a non-owning view of typed memory with a shape (row-major, dense,
// unless its TensorFormat says the channels are blocked). Tensors in a compiled
// program live in an arena; kernels only ever see views. TensorFormat: how an
// activation lies in memory.
#pragma once

#include <cstddef>

#include "ops/dtype.h"
#include "ops/shape.h"

namespace trainer {

// How an activation (and its gradient) lies in memory: its element type, and
// for images [N, C, H, W] with C a multiple of `channel_block`, the blocked
// layout [N, C / b, H, W, b] the backend's kernels run fastest on (0: plain
// row-major). Blocked and plain hold the same elements in the same number of
// bytes, so element-wise loops and the memory plan need not tell them apart.
struct TensorFormat {
  DType dtype = DType::f32;
  int channel_block = 0;
  bool operator==(const TensorFormat&) const = default;
};

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
