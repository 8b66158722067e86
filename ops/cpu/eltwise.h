// Eltwise: one element-wise oneDNN operation over n contiguous elements of one
// type, forward and (for training) backward. The activation kernels are one
// each; linear runs one after its GEMM for an epilogue oneDNN cannot fuse.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <string>

#include "ops/cpu/onednn.h"
#include "ops/dtype.h"
#include "ops/epilogue.h"

namespace trainer::cpu {

struct EltwiseSpec {
  dnnl::algorithm algorithm;
  float alpha = 0;
  bool uses_output = false;  // the backward reads y instead of x
};

// The oneDNN operation of a matmul epilogue (not none).
EltwiseSpec eltwise_spec(Epilogue epilogue);

class Eltwise {
 public:
  Eltwise() = default;
  Eltwise(EltwiseSpec spec, std::int64_t n, DType type, bool training);

  bool uses_output() const { return uses_output_; }
  std::string implementation() const { return impl_; }

  void forward(const void* x, void* y);
  // dx from dy and x, or y when uses_output().
  void backward(const void* x_or_y, const void* dy, void* dx);

 private:
  bool uses_output_ = false;
  std::string impl_;
  PrimitiveCall fwd_, bwd_;
};

}  // namespace trainer::cpu
