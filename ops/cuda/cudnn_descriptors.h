// Owned cuDNN descriptors: tensor, filter and convolution, each set up in one call.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "ops/cuda/check.h"
#include "ops/cuda/unique_handle.h"

namespace trainer::cuda {

// cuDNN's 4-d descriptors take int extents and strides: a tensor of 2^31
// elements or more is refused here, in words, rather than by a status.
inline void require_int_extents(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                                const char* what) {
  const std::int64_t most = std::numeric_limits<int>::max();
  const auto extent_fits = [&](std::int64_t e) { return e > 0 && e <= most; };
  const bool fits = extent_fits(n) && extent_fits(c) && extent_fits(h) && extent_fits(w) &&
                    c <= most / (h * w) && n <= most / (c * h * w);
  if (fits) return;
  const std::string extents = std::string(what) + " [" + std::to_string(n) + ", " +
                              std::to_string(c) + ", " + std::to_string(h) + ", " +
                              std::to_string(w) + "]";
  if (n < 1 || c < 1 || h < 1 || w < 1)
    throw std::runtime_error(extents + " has an empty extent, which cuDNN's 4-d tensors refuse");
  // A batch of one still too large: the layer itself is.
  const bool one_fits = c <= most && h <= most && w <= most && c <= most / (h * w);
  throw std::runtime_error(
      extents + " is more than cuDNN's 4-d tensors hold (2^31 - 1 elements); " +
      (std::string(what) == "tensor" && one_fits
           ? "make the batch smaller (train.micro_batch_size or train.batch_size)"
           : "make the layer smaller (its channels, or the image size)"));
}

// A dense NCHW tensor (float unless told).
class TensorDescriptor {
 public:
  TensorDescriptor(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                   cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    require_int_extents(n, c, h, w, "tensor");
    cudnnTensorDescriptor_t d = nullptr;
    check(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
    handle_ = Owned(d);
    check(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type, static_cast<int>(n),
                                     static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)),
          "cudnnSetTensor4dDescriptor");
  }
  cudnnTensorDescriptor_t get() const { return handle_.get(); }

 private:
  using Owned = UniqueHandle<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
  Owned handle_;
};

// Convolution weights [out, in/groups, kh, kw].
class FilterDescriptor {
 public:
  FilterDescriptor(std::int64_t k, std::int64_t c, std::int64_t h, std::int64_t w,
                   cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    require_int_extents(k, c, h, w, "filter");
    cudnnFilterDescriptor_t d = nullptr;
    check(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor");
    handle_ = Owned(d);
    check(cudnnSetFilter4dDescriptor(d, type, CUDNN_TENSOR_NCHW, static_cast<int>(k),
                                     static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)),
          "cudnnSetFilter4dDescriptor");
  }
  cudnnFilterDescriptor_t get() const { return handle_.get(); }

 private:
  using Owned = UniqueHandle<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
  Owned handle_;
};

struct Conv2dGeometry {
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int groups = 1;
};

// A 2-D cross-correlation (what frameworks call convolution) with float accumulation.
class ConvolutionDescriptor {
 public:
  // `low`: 16-bit operands (tensor-core math, float accumulation).
  ConvolutionDescriptor(const Conv2dGeometry& g, bool allow_tf32, bool low = false) {
    cudnnConvolutionDescriptor_t d = nullptr;
    check(cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor");
    handle_ = Owned(d);
    check(cudnnSetConvolution2dDescriptor(d, g.pad_h, g.pad_w, g.stride_h, g.stride_w, g.dilation_h,
                                          g.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor");
    check(cudnnSetConvolutionGroupCount(d, g.groups), "cudnnSetConvolutionGroupCount");
    // FMA math keeps float32 exact; default math lets cuDNN use TF32 tensor cores.
    math_ = low ? CUDNN_TENSOR_OP_MATH : (allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
    check(cudnnSetConvolutionMathType(d, math_), "cudnnSetConvolutionMathType");
  }
  cudnnConvolutionDescriptor_t get() const { return handle_.get(); }
  cudnnMathType_t math() const { return math_; }

 private:
  using Owned = UniqueHandle<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
  Owned handle_;
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
};

}  // namespace trainer::cuda
