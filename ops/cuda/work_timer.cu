// WorkTimer: a stream held by a spinning kernel while the host queues the
// work to time between two events.
#include "ops/cuda/work_timer.h"

#include <atomic>

#include "ops/cuda/check.h"
#include "ops/cuda/launch.cuh"

namespace trainer::cuda {
namespace {

// Spins until the host sets *release or `limit_ns` of the GPU's clock have passed.
__global__ void hold_stream(const volatile int* release, unsigned long long limit_ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    if (*release) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < limit_ns);
}

constexpr unsigned long long kHoldLimitNs = 1000ull * 1000 * 1000;

}  // namespace

WorkTimer::WorkTimer() {
  void* p = nullptr;
  check(cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc(timing flag)");
  release_ = PinnedMemory(p);
}

double WorkTimer::time_ms(cudaStream_t stream, const std::function<void()>& queue_work) {
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::atomic_ref<int> release(*static_cast<int*>(release_.get()));
  release.store(0);
  int* device_flag = nullptr;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag), release_.get(), 0),
        "cudaHostGetDevicePointer(timing flag)");
  hold_stream<<<1, 1, 0, stream>>>(device_flag, kHoldLimitNs);
  check_launch("hold_stream");
  struct LetGo {  // the stream goes on, also when queuing the work throws
    std::atomic_ref<int>& flag;
    ~LetGo() { flag.store(1); }
  } let_go{release};
  start_.record(stream);
  queue_work();
  end_.record(stream);
  release.store(1);
  end_.synchronize();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start_.get(), end_.get()), "cudaEventElapsedTime");
  return ms;
}

}  // namespace trainer::cuda
