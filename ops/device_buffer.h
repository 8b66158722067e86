// DeviceBuffer: memory of one backend, released when the buffer goes away.
#pragma once

#include <cstddef>
#include <utility>

#include "ops/kernel.h"

namespace trainer {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, std::size_t bytes)
      : backend_(&backend), bytes_(bytes), data_(bytes ? backend.allocate(bytes) : nullptr) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = std::exchange(o.backend_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  char* at(std::size_t offset) const { return static_cast<char*>(data_) + offset; }

 private:
  void reset() {
    if (data_) backend_->release(data_);
    data_ = nullptr;
  }
  Backend* backend_ = nullptr;
  std::size_t bytes_ = 0;
  void* data_ = nullptr;
};

}  // namespace trainer
