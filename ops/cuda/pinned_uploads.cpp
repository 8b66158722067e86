// PinnedUploads (pinned_uploads.h): a ring of pinned slots for per-step uploads.
#include "ops/cuda/pinned_uploads.h"

#include <cstring>
#include <string>

#include "ops/cuda/check.h"

namespace trainer::cuda {
namespace {

void* pinned(std::size_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc(upload ring)");
  return p;
}

}  // namespace

PinnedUploads::PinnedUploads() : memory_(pinned(kSlots * kSlotBytes)) {
  read_.reserve(kSlots);
  for (std::size_t i = 0; i < kSlots; ++i) read_.emplace_back();
}

void PinnedUploads::upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream,
                           const char* what) {
  if (bytes == 0) return;
  refuse_inside_recording(stream, std::string("an upload (") + what + ")");
  // Rare and large: straight from `src`, and waited for (from pinned memory
  // the copy returns before it has read `src`).
  if (bytes > kSlotBytes) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), what);
    check(cudaStreamSynchronize(stream), what);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t slot = next_;
  next_ = (next_ + 1) % kSlots;
  // Its last transfer has left it (an event never recorded is complete).
  read_[slot].synchronize();
  char* staged = static_cast<char*>(memory_.get()) + slot * kSlotBytes;
  std::memcpy(staged, src, bytes);
  check(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream), what);
  read_[slot].record(stream);
}

}  // namespace trainer::cuda
