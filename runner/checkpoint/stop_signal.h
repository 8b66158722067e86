// SIGINT / SIGTERM as a request to stop: the handler only records the signal;
// the training loop finishes its step, writes a checkpoint and exits with
// 128 + signal (130 / 143). A second signal of either kind ends the process at once.
#pragma once

namespace trainer::checkpoint {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// The signal received since the handlers were installed (0: none).
int stop_requested();

}  // namespace trainer::checkpoint
