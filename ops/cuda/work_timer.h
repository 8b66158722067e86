// WorkTimer: the device time of the work a function queues on a stream, with
// the host's time queuing it left out. Events recorded around work queued on
// an idle stream would count the launches between them: a kernel that holds
// the stream comes first, spinning until the host has queued the work and
// the closing event (or, as a bound, for a second), then the timed work runs
// back to back as in a recorded step. Every kernel the work launches must
// have been loaded before (a warm-up run): loading one while the stream is
// held waits for the hold to end.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "ops/cuda/event.h"
#include "ops/cuda/unique_handle.h"

namespace trainer::cuda {

class WorkTimer {
 public:
  WorkTimer();

  // Milliseconds on `stream` from the first to the last of what `queue_work`
  // queues there. Waits for the stream.
  double time_ms(cudaStream_t stream, const std::function<void()>& queue_work);

 private:
  using PinnedMemory = UniqueHandle<void*, cudaFreeHost>;
  PinnedMemory release_;  // a host-mapped flag: the host sets it once the work is queued
  Event start_{true}, end_{true};
};

}  // namespace trainer::cuda
