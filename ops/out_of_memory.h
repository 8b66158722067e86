// OutOfMemoryError: thrown by Backend::allocate when the device has no room;
// the run command answers it with the memory plan and what would make the job fit.
#pragma once

#include <stdexcept>

namespace trainer {

class OutOfMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace trainer
