// LossLog: the training loss of each micro-batch, kept in backend memory until
// the loop needs the values (a log line, a checkpoint, a diagnosis), then read
// back in one copy. Reading the loss every step would synchronise a GPU with
// the host once per step; this keeps the step asynchronous.
#pragma once

#include <cstddef>
#include <vector>

#include "ops/device_buffer.h"
#include "ops/kernel.h"

namespace trainer::train {

class LossLog {
 public:
  // The most losses the log holds in backend memory (4 MiB); a window of more
  // is read back in parts as it fills.
  static constexpr std::size_t kMaxCapacity = std::size_t{1} << 20;

  // Room for `capacity` losses (a logging window's micro-batches), at least
  // 1 and at most kMaxCapacity.
  LossLog(Backend& backend, std::size_t capacity);

  // Copies the scalar `loss` (in backend memory) into the next slot, on the
  // device. When the log is full its losses are read back first (kept for
  // the next read()).
  void record(const TensorRef& loss);
  // The losses recorded since the last read, in order; empties the log.
  std::vector<float> read();

 private:
  void read_back();

  Backend& backend_;
  DeviceBuffer slots_;
  std::size_t capacity_ = 0, used_ = 0;
  std::vector<float> pending_;  // read back early because the log was full
};

}  // namespace trainer::train
