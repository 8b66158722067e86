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
  void removed(void* ptr) {
    std::lock_guard lock(mutex_);
    const auto it = sizes_.find(ptr);
    if (it == sizes_.end()) return;
    stats_.allocated -= it->second;
    sizes_.erase(it);
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
