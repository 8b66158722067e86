// Runs a shell command (or the built `trainer` executable with arguments) and
// collects its exit code and output, for tests of the command line.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace trainer::testing {

struct CommandResult {
  int code = -1;
  std::string out;  // stdout, and stderr too when merged
};

// `command` runs under /bin/sh; stderr is merged into `out` or discarded.
inline CommandResult run_command(const std::string& command, bool merge_stderr = true) {
  CommandResult r;
  FILE* pipe = popen((command + (merge_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The trainer executable run_trainer runs: $TRAINER_TEST_BINARY when set (the
// bundle a GPU machine runs, built elsewhere), else the one this build made.
inline std::string trainer_binary() {
  const char* chosen = std::getenv("TRAINER_TEST_BINARY");
  return chosen && *chosen ? std::string(chosen) : std::string(TRAINER_BINARY);
}

inline CommandResult run_trainer(const std::string& args, bool merge_stderr = false) {
  return run_command(trainer_binary() + " " + args, merge_stderr);
}

}  // namespace trainer::testing
