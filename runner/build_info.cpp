// The build's commit, written by the build (cmake/GitCommit.cmake).
#include "runner/build_info.h"

#if __has_include("trainer_git_commit.h")
#include "trainer_git_commit.h"
#endif
#ifndef TRAINER_GIT_COMMIT
#define TRAINER_GIT_COMMIT "unknown"
#endif

namespace trainer {

const char* trainer_commit() {
  return TRAINER_GIT_COMMIT;
}

}  // namespace trainer
