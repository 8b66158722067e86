// Stream: an owned non-blocking CUDA stream.
#pragma once

#include <cuda_runtime_api.h>

#include "ops/cuda/check.h"
#include "ops/cuda/unique_handle.h"

namespace trainer::cuda {

class Stream {
 public:
  Stream() {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    handle_ = Owned(s);
  }
  cudaStream_t get() const { return handle_.get(); }
  void synchronize() const { check(cudaStreamSynchronize(get()), "cudaStreamSynchronize"); }

 private:
  using Owned = UniqueHandle<cudaStream_t, cudaStreamDestroy>;
  Owned handle_;
};

}  // namespace trainer::cuda
