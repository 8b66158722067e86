// Helpers shared by the data tests: a temporary directory removed on exit, and
// writers for the small fixture files (raw, gzip) the tests create themselves.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::data::testing {

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("trainer-data-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("test fixture: cannot write " + path);
}

inline void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<std::uint8_t>(text.begin(), text.end()));
}

inline void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("test fixture: cannot write " + path);
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

inline void append_be32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

// An IDX file of unsigned bytes with the given extents and data.
inline std::vector<std::uint8_t> idx_bytes(const std::vector<std::uint32_t>& dims,
                                           const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out;
  append_be32(out, 0x0800u | static_cast<std::uint32_t>(dims.size()));
  for (auto d : dims) append_be32(out, d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

}  // namespace trainer::data::testing
