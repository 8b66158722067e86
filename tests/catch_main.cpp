// The Catch2 main shared by every test executable. A test binary may define
// trainer_test_skip_reason() to skip itself (exit 77) before running, e.g. GPU
// tests on a machine without a GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

// Weak default: run. GPU test files override it.
__attribute__((weak)) std::string trainer_test_skip_reason() {
  return {};
}

int main(int argc, char** argv) {
  if (const std::string reason = trainer_test_skip_reason(); !reason.empty()) {
    std::printf("SKIPPED: %s\n", reason.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
