// CudnnHandle: an owned cuDNN handle bound to one stream.
#pragma once

#include <cudnn.h>

#include "ops/cuda/check.h"
#include "ops/cuda/unique_handle.h"

namespace trainer::cuda {

class CudnnHandle {
 public:
  explicit CudnnHandle(cudaStream_t stream) {
    cudnnHandle_t h = nullptr;
    check(cudnnCreate(&h), "cudnnCreate");
    handle_ = Owned(h);
    check(cudnnSetStream(h, stream), "cudnnSetStream");
  }
  cudnnHandle_t get() const { return handle_.get(); }

 private:
  using Owned = UniqueHandle<cudnnHandle_t, cudnnDestroy>;
  Owned handle_;
};

}  // namespace trainer::cuda
