// PinnedUploads: the small host-to-device copies of every step (the step's
// values, the optimizer's hyperparameters, the loss scale, a window of the
// schedule) queued from pinned memory. From pageable memory
// cudaMemcpyAsync "may synchronize with the stream" to stage the bytes, which
// would hold the host back until the GPU had caught up, once per upload; from
// pinned memory it returns at once. Each upload copies its bytes into the next
// slot of a pinned ring and queues the transfer from there; an event behind
// each transfer says when its slot may be written again (long before the ring
// comes round: the host runs a step or two ahead).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <vector>

#include "ops/cuda/event.h"
#include "ops/cuda/unique_handle.h"

namespace trainer::cuda {

class PinnedUploads {
 public:
  static constexpr std::size_t kSlotBytes = 64 * 1024;  // above a full schedule window
  static constexpr std::size_t kSlots = 32;

  PinnedUploads();

  // Queues dst <- src (`bytes` of host memory) on `stream` and returns once
  // src has been read. Larger copies than a slot go from src directly. An
  // upload into a stream being recorded is refused (std::logic_error): the
  // recording would read the slot again at every replay, long after it was
  // rewritten.
  void upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream, const char* what);

 private:
  using PinnedMemory = UniqueHandle<void*, cudaFreeHost>;
  PinnedMemory memory_;
  std::vector<Event> read_;  // per slot: recorded behind the transfer out of it
  std::size_t next_ = 0;
  std::mutex mutex_;
};

}  // namespace trainer::cuda
