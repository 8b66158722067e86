// `trainer version`: version, git commit, build type and the backends built in.
#include <cstdio>

#include "runner/build_info.h"
#include "runner/commands/config_commands.h"

namespace trainer {

int command_version() {
#ifdef TRAINER_BUILD_TYPE
  const char* build_type = TRAINER_BUILD_TYPE;
#elif defined(NDEBUG)
  const char* build_type = "optimized (NDEBUG)";
#else
  const char* build_type = "debug";
#endif
#ifdef TRAINER_WITH_CUDA
  const char* cuda = "built";
#else
  const char* cuda = "not built";
#endif
  std::printf("trainer %s\ncommit: %s\nbuild type: %s\nCPU backend: oneDNN\nCUDA backend: %s\n",
              TRAINER_VERSION, trainer_commit(), build_type, cuda);
  return 0;
}

}  // namespace trainer
