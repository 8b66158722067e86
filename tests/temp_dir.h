// TempDir: a fresh folder under the system's temporary one for a test's
// files, removed with everything in it when the test leaves its scope
// (passed or failed).
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace trainer::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    std::random_device rd;
    path_ =
        std::filesystem::temp_directory_path() / ("trainer-" + tag + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace trainer::testing
