// Event: an owned CUDA event (timing disabled: used to order streams).
#pragma once

#include <cuda_runtime_api.h>

#include "ops/cuda/check.h"
#include "ops/cuda/unique_handle.h"

namespace trainer::cuda {

class Event {
 public:
  explicit Event(bool timing = false) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
          "cudaEventCreateWithFlags");
    handle_ = Owned(e);
  }
  cudaEvent_t get() const { return handle_.get(); }
  void record(cudaStream_t stream) const {
    check(cudaEventRecord(get(), stream), "cudaEventRecord");
  }
  // Blocks the host until the recorded point is reached.
  void synchronize() const { check(cudaEventSynchronize(get()), "cudaEventSynchronize"); }
  // Work queued on `stream` after this call waits for the recorded point.
  void make_wait(cudaStream_t stream) const {
    check(cudaStreamWaitEvent(stream, get(), 0), "cudaStreamWaitEvent");
  }

 private:
  using Owned = UniqueHandle<cudaEvent_t, cudaEventDestroy>;
  Owned handle_;
};

}  // namespace trainer::cuda
