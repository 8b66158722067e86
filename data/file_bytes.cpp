// Whole-file reads: the raw bytes, inflated with zlib when they start with the
// gzip magic (concatenated members are read one after another; anything else
// after the last member is an error).
#include "data/file_bytes.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace trainer::data {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FileHandle = std::unique_ptr<std::FILE, FileCloser>;

// inflateEnd on every way out.
class Inflater {
 public:
  Inflater() {
    // 16 + MAX_WBITS: a gzip wrapper (header and CRC-32/size trailer) only.
    if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
  }
  ~Inflater() { inflateEnd(&stream_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  z_stream& stream() { return stream_; }

 private:
  z_stream stream_{};
};

bool gzip_magic(const std::vector<std::uint8_t>& bytes, std::size_t at) {
  return bytes.size() >= at + 2 && bytes[at] == 0x1F && bytes[at + 1] == 0x8B;
}

// What zlib's message means, in the words of the file's damage.
std::string gzip_damage(const char* message) {
  const std::string m = message ? message : "";
  if (m == "incorrect data check")
    return "the CRC-32 in its trailer does not match the decompressed data";
  if (m == "incorrect length check")
    return "the length in its trailer does not match the decompressed data";
  if (m.empty()) return "invalid compressed data";
  return "invalid compressed data (" + m + ")";
}

constexpr const char* kCopyAgain = "copy or download it again";

std::vector<std::uint8_t> gunzip(const std::string& path, const std::vector<std::uint8_t>& in) {
  Inflater inflater;
  z_stream& z = inflater.stream();
  std::vector<std::uint8_t> out;
  // The last member's trailer holds its size modulo 2^32: a hint, capped at
  // deflate's largest ratio so a damaged trailer cannot reserve gigabytes.
  if (in.size() >= 18) {
    const std::size_t tail = in.size() - 4;
    const std::size_t hint = std::size_t{in[tail]} | (std::size_t{in[tail + 1]} << 8) |
                             (std::size_t{in[tail + 2]} << 16) | (std::size_t{in[tail + 3]} << 24);
    out.reserve(std::min(hint, in.size() * 1032));
  }
  std::size_t in_pos = 0, out_pos = 0, member_start = 0;
  for (;;) {
    if (out_pos == out.size())
      out.resize(std::max<std::size_t>({out.size() * 2, out.capacity(), 1 << 16}));
    const std::size_t in_chunk = std::min<std::size_t>(in.size() - in_pos, UINT_MAX);
    const std::size_t out_chunk = std::min<std::size_t>(out.size() - out_pos, UINT_MAX);
    z.next_in = const_cast<Bytef*>(in.data() + in_pos);
    z.avail_in = static_cast<uInt>(in_chunk);
    z.next_out = out.data() + out_pos;
    z.avail_out = static_cast<uInt>(out_chunk);
    const int status = inflate(&z, Z_NO_FLUSH);
    in_pos += in_chunk - z.avail_in;
    out_pos += out_chunk - z.avail_out;
    if (status == Z_STREAM_END) {
      if (in_pos == in.size()) break;
      if (!gzip_magic(in, in_pos)) {
        throw std::runtime_error(
            "data file '" + path + "' has " + std::to_string(in.size() - in_pos) +
            " bytes after the end of its gzip stream, from byte offset " + std::to_string(in_pos) +
            " (" + std::to_string(out_pos) +
            " bytes decompressed): the file is damaged or had bytes appended; " + kCopyAgain);
      }
      member_start = in_pos;  // a concatenated member
      inflateReset(&z);
      continue;
    }
    if (status == Z_OK) continue;
    if (status == Z_BUF_ERROR && z.avail_out == 0) continue;  // more room, then again
    if (status == Z_MEM_ERROR) throw std::bad_alloc();
    if (status == Z_BUF_ERROR) {  // all input used, the stream unfinished
      throw std::runtime_error(
          "data file '" + path + "' is a truncated gzip stream: the data ends at byte offset " +
          std::to_string(in.size()) + " before the end of the stream, after " +
          std::to_string(out_pos) + " decompressed bytes: the file was cut short; " + kCopyAgain);
    }
    throw std::runtime_error(
        "data file '" + path + "' is a corrupt gzip stream: " + gzip_damage(z.msg) +
        ", detected at compressed byte offset " + std::to_string(in_pos) +
        " (the stream starts at byte offset " + std::to_string(member_start) + ") after " +
        std::to_string(out_pos) + " decompressed bytes: the file is damaged; " + kCopyAgain);
  }
  out.resize(out_pos);
  out.shrink_to_fit();
  return out;
}

}  // namespace

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw std::runtime_error("data file '" + path + "' does not exist");
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw std::runtime_error("data file '" + path + "' is a directory, expected a file");
  }
  FileHandle file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    throw std::runtime_error("cannot open data file '" + path + "': " + std::strerror(errno));
  }
  // One read of the size the file has, then on to its end (a file that grew,
  // or one without a size, like a pipe).
  const auto size_hint = std::filesystem::file_size(path, ec);
  std::vector<std::uint8_t> bytes(ec ? 0 : static_cast<std::size_t>(size_hint));
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), file.get()));
  std::uint8_t more[1 << 13];
  for (std::size_t got; (got = std::fread(more, 1, sizeof more, file.get())) > 0;)
    bytes.insert(bytes.end(), more, more + got);
  if (std::ferror(file.get())) {
    throw std::runtime_error("cannot read data file '" + path + "' after " +
                             std::to_string(bytes.size()) + " bytes: " + std::strerror(errno));
  }
  if (gzip_magic(bytes, 0)) return gunzip(path, bytes);
  return bytes;
}

}  // namespace trainer::data
