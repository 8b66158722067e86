// labels: cpu
// `trainer doctor`: exits 0 on a machine where CPU training works, reports the
// CPU and oneDNN, and in a CUDA build without a driver says so in plain words.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "ops/version_code.h"
#include "run_command.h"
#include "runner/commands.h"
#include "runner/commands/library_version.h"

namespace {

using trainer::testing::run_command;

bool machine_has_nvidia_driver() {
  FILE* f = std::fopen("/proc/driver/nvidia/version", "r");
  if (!f) return false;
  std::fclose(f);
  return true;
}

}  // namespace

TEST_CASE("trainer doctor reports the CPU and exits 0 when CPU training works") {
  const auto out = run_command(std::string(TRAINER_BINARY) + " doctor");
  INFO(out.out);
  CHECK(out.code == 0);
  CHECK(out.out.find("oneDNN:") != std::string::npos);
  CHECK(out.out.find("CPU training works") != std::string::npos);
  CHECK(out.out.find("ISA:") != std::string::npos);
  CHECK(out.out.find("compute:  fp32, ") != std::string::npos);
  // Where oneDNN runs below AVX-512 (here by its own limit), bf16 is not offered, and why.
  const auto avx2 = run_command("DNNL_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 " +
                                std::string(TRAINER_BINARY) + " doctor");
  CHECK(avx2.code == 0);
  CHECK(avx2.out.find("; no bf16: oneDNN's bf16 kernels need AVX-512, and oneDNN runs at AVX2") !=
        std::string::npos);
}

TEST_CASE("trainer doctor names a missing NVIDIA driver plainly") {
  if (machine_has_nvidia_driver()) {
    WARN("this machine has an NVIDIA driver: the no-driver wording is not exercised");
    return;
  }
  const auto out = run_command(std::string(TRAINER_BINARY) + " doctor");
  INFO(out.out);
  CHECK(out.code == 0);
#ifdef TRAINER_WITH_CUDA
  CHECK(out.out.find("status:   no GPU: no NVIDIA driver is installed on this machine (driver "
                     "version 0; the CUDA runtime's \"CUDA driver version is insufficient for "
                     "CUDA runtime version\" means no driver at all here") != std::string::npos);
  CHECK(out.out.find("no GPU") != std::string::npos);
  CHECK(out.out.find("cuDNN:    compiled 9.") != std::string::npos);
  // Which files the loader picked, for each library.
  for (const char* file : {"libcudart.so", "libcudnn.so", "libcublasLt.so", "libnccl.so"}) {
    INFO(file);
    CHECK(out.out.find(std::string("/") + file) != std::string::npos);
  }
#else
  CHECK(out.out.find("not built") != std::string::npos);
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
    CHECK(output.find("no NVIDIA driver is installed on this machine (driver version 0;") !=
          std::string::npos);
#endif
}

TEST_CASE("a CUDA library found at run time is judged against the version compiled against") {
  using trainer::check_library_version;
  // The same or a newer release of the major version: fine, nothing said.
  for (const char* loaded : {"9.19.0", "9.19.1", "9.21.0"}) {
    INFO(loaded);
    const auto check = check_library_version("cuDNN", "9.19.0", loaded);
    CHECK_FALSE(check.broken);
    CHECK(check.note.empty());
  }
  // An older release: a warning naming the version to use, not a failure.
  for (const char* loaded : {"9.13.0", "9.19.0"}) {
    const auto check = check_library_version("cuBLAS", "9.19.2", loaded);
    CHECK_FALSE(check.broken);
    CHECK(check.note ==
          "older than compiled: not guaranteed to work; use cuBLAS 9.19.2 or newer "
          "if a GPU kernel fails");
  }
  // Another major version: broken, with what to put on the library path.
  const auto other_major = check_library_version("NCCL", "2.28.9", "3.0.1");
  CHECK(other_major.broken);
  CHECK(other_major.note.find("put NCCL 2.x on the library path") != std::string::npos);
  // Unknown or unparsable versions give no verdict.
  for (const char* loaded : {"", "unknown", "0.0.0", "9.19", "9.19.0-rc1"}) {
    INFO(loaded);
    const auto check = check_library_version("cuDNN", "9.19.0", loaded);
    CHECK_FALSE(check.broken);
    CHECK(check.note.empty());
  }
}

TEST_CASE("library version codes of both packings read as major.minor.patch") {
  CHECK(trainer::version_from_code(91900) == "9.19.0");   // cuDNN 9
  CHECK(trainer::version_from_code(130100) == "13.1.0");  // cuBLAS 13
  CHECK(trainer::version_from_code(22809) == "2.28.9");   // NCCL 2.28
  CHECK(trainer::version_from_code(2804) == "2.8.4");     // NCCL before 2.9
  CHECK(trainer::version_from_code(8907) == "8.9.7");     // cuDNN 8
}
