// Whole-file reads, raw or gzip, via zlib's transparent gz reader.
#include "data/file_bytes.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace trainer::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

}  // namespace

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw std::runtime_error("data file '" + path + "' does not exist");
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw std::runtime_error("data file '" + path + "' is a directory, expected a file");
  }
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (!file) {
    throw std::runtime_error("cannot open data file '" + path + "': " + std::strerror(errno));
  }
  // Buffers sized to the file (8 KiB to 1 MiB): a small file (one image of an
  // image folder, read on every sample) need not page in megabytes.
  const auto size_hint = std::filesystem::file_size(path, ec);
  const std::size_t file_size = ec ? 0 : static_cast<std::size_t>(size_hint);
  const unsigned chunk =
      static_cast<unsigned>(std::clamp<std::size_t>(file_size + 1, 1 << 13, 1 << 20));
  gzbuffer(file.get(), chunk);
  std::vector<std::uint8_t> bytes;
  bytes.reserve(file_size);
  for (;;) {
    const std::size_t old = bytes.size();
    bytes.resize(old + chunk);
    const int got = gzread(file.get(), bytes.data() + old, chunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      throw std::runtime_error("cannot read data file '" + path + "' after " + std::to_string(old) +
                               " bytes: " + message);
    }
    bytes.resize(old + static_cast<std::size_t>(got));
    if (got == 0) break;
  }
  // gzread reports a gzip stream that ends early only through gzerror.
  int code = 0;
  const char* message = gzerror(file.get(), &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    throw std::runtime_error("data file '" + path + "' is a truncated or corrupt gzip stream (" +
                             message + ") after " + std::to_string(bytes.size()) +
                             " decompressed bytes");
  }
  bytes.shrink_to_fit();
  return bytes;
}

}  // namespace trainer::data
