// AllocationCounter: the bytes a backend has allocated and not released, and
// the most at once, for the memory figures of the logs and the check of the
// memory plan against what a run really allocates.
#pragma once

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <unordered_map>

#include "ops/kernel.h"

namespace trainer {

class AllocationCounter {
 public:
  void added(void* ptr, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    sizes_[ptr] = bytes;
    stats_.allocated += bytes;
    stats_.peak = std::max(stats_.peak, stats_.allocated);
  }
  // The bytes `ptr` held; 0 for a pointer it does not know.
  std::size_t removed(void* ptr) {
    std::lock_guard lock(mutex_);
    const auto it = sizes_.find(ptr);
    if (it == sizes_.end()) return 0;
    const std::size_t bytes = it->second;
    stats_.allocated -= bytes;
    sizes_.erase(it);
    return bytes;
  }
  MemoryStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<void*, std::size_t> sizes_;
  MemoryStats stats_;
};

}  // namespace trainer
