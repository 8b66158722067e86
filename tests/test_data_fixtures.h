// Helpers shared by the data tests: a temporary directory removed on exit, and
// writers for the small fixture files (raw, gzip, IDX, NPY) the tests create
// themselves.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace trainer::data::testing {

// A temporary folder (temp_dir.h) whose files the data tests name with file().
class TempDir : public trainer::testing::TempDir {
 public:
  TempDir() : trainer::testing::TempDir("data-test") {}
  std::string file(const std::string& name) const { return *this / name; }
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

// An .npy file: version 1.0 header padded to a multiple of 64 bytes.
inline std::vector<std::uint8_t> npy_bytes(const std::string& descr, const std::string& shape,
                                           const void* data, std::size_t bytes,
                                           const std::string& fortran = "False") {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<std::uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.push_back(static_cast<std::uint8_t>(header.size() & 0xFF));
  out.push_back(static_cast<std::uint8_t>(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  const auto* p = static_cast<const std::uint8_t*>(data);
  if (bytes) out.insert(out.end(), p, p + bytes);
  return out;
}

}  // namespace trainer::data::testing
