// UsageError: a mistake in what the user asked for that no position in the
// config can point at (a run directory in use, a checkpoint that does not fit
// the config). Reported as "error: ..." with exit code 2, like a config error.
#pragma once

#include <stdexcept>

namespace trainer {

// The exit code of a usage or configuration error (1: a runtime failure).
inline constexpr int kUsageError = 2;

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace trainer
