// labels: cpu
// `trainer doctor`: exits 0 on a machine where CPU training works, reports the
// CPU and oneDNN, and in a CUDA build without a driver says so in plain words.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "runner/commands.h"

namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome run_command(const std::string& command) {
  Outcome out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    out.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

bool machine_has_nvidia_driver() {
  FILE* f = std::fopen("/proc/driver/nvidia/version", "r");
  if (!f) return false;
  std::fclose(f);
  return true;
}

}  // namespace

TEST_CASE("trainer doctor reports the CPU and exits 0 when CPU training works") {
  const Outcome out = run_command(std::string(TRAINER_BINARY) + " doctor");
  INFO(out.output);
  CHECK(out.exit_code == 0);
  CHECK(out.output.find("oneDNN:") != std::string::npos);
  CHECK(out.output.find("CPU training works") != std::string::npos);
  CHECK(out.output.find("ISA:") != std::string::npos);
}

TEST_CASE("trainer doctor names a missing NVIDIA driver plainly") {
  if (machine_has_nvidia_driver()) {
    WARN("this machine has an NVIDIA driver: the no-driver wording is not exercised");
    return;
  }
  const Outcome out = run_command(std::string(TRAINER_BINARY) + " doctor");
  INFO(out.output);
  CHECK(out.exit_code == 0);
#ifdef TRAINER_WITH_CUDA
  CHECK(out.output.find("CUDA driver version is insufficient for CUDA runtime version: no NVIDIA "
                        "driver is installed on this machine (driver version 0)") !=
        std::string::npos);
  CHECK(out.output.find("no GPU") != std::string::npos);
  CHECK(out.output.find("cuDNN:    compiled 9.") != std::string::npos);
#else
  CHECK(out.output.find("not built") != std::string::npos);
#endif
}

TEST_CASE("command_doctor in process: exit 0 and the plain no-driver wording") {
  // Redirect stdout to a file while the command prints.
  std::fflush(stdout);
  char path[] = "/tmp/trainer_doctor_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = dup(1);
  dup2(fd, 1);
  const int code = trainer::command_doctor();
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  close(fd);
  std::ifstream in(path);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path);
  INFO(output);
  CHECK(code == 0);
  CHECK(output.find("CPU training works") != std::string::npos);
#ifdef TRAINER_WITH_CUDA
  if (!machine_has_nvidia_driver())
    CHECK(output.find("no NVIDIA driver is installed on this machine (driver version 0)") !=
          std::string::npos);
#endif
}
