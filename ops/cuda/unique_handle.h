// UniqueHandle: move-only owner of one library handle, destroyed by a given function.
// Every RAII wrapper of ops/cuda (streams, events, cuDNN and cuBLASLt objects) uses it.
#pragma once

#include <utility>

#include "ops/cuda/check.h"

namespace trainer::cuda {

template <typename T, auto Destroy>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(T handle) : handle_(handle) {}
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  UniqueHandle(UniqueHandle&& other) noexcept : handle_(std::exchange(other.handle_, T{})) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, T{});
    }
    return *this;
  }
  ~UniqueHandle() { reset(); }

  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != T{}; }
  void reset() {
    if (handle_ != T{}) ignore_status(Destroy(handle_));  // nothing to do about a failure
    handle_ = T{};
  }

 private:
  T handle_{};
};

}  // namespace trainer::cuda
