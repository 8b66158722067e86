// Whether a CUDA library found at run time (cuDNN, cuBLAS, NCCL) can serve a
// build compiled against another version of it: a newer release of the same
// major version can; an older one is not guaranteed to (its vendor promises
// compatibility forward only); another major version cannot.
#pragma once

#include <string>

namespace trainer {

struct LibraryVersionCheck {
  bool broken = false;  // another major version
  std::string note;     // why it is not plainly fine; empty when it is
};

// `compiled` and `loaded` as "major.minor.patch"; an unknown or unparsable
// version gives no verdict.
LibraryVersionCheck check_library_version(const std::string& name, const std::string& compiled,
                                          const std::string& loaded);

}  // namespace trainer
