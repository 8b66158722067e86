// The version codes NVIDIA's libraries report (cudnnGetVersion,
// cublasLtGetVersion, ncclGetVersion and their headers' macros) as
// "major.minor.patch". Current releases pack major * 10000 + minor * 100 +
// patch; cuDNN before 9 and NCCL before 2.9 packed major * 1000 + minor * 100
// + patch, which gives a code below 10000.
#pragma once

#include <string>

namespace trainer {

inline std::string version_from_code(long long code) {
  const long long major_unit = code < 10000 ? 1000 : 10000;
  return std::to_string(code / major_unit) + "." + std::to_string(code % major_unit / 100) + "." +
         std::to_string(code % 100);
}

}  // namespace trainer
