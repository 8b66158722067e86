// Reading whole files into memory: raw or gzip-compressed (detected by the
// gzip magic, not the file name), with errors that name the file. Also the
// small helpers the binary formats need: byte order, and element counts
// checked against the data present.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::data {

// A format's reading of the first bytes of a file's (decompressed) contents:
// the file's whole size as its header declares it (SIZE_MAX when more than
// can be counted), or nullopt while the bytes do not yet hold the header. It
// throws the format's own error when the header is wrong. Lets a gzip stream
// be checked before it is inflated in full: a 26 MB file of 6 GB of zeros
// stops at its header, not at the end of memory.
using DeclaredSize = std::function<std::optional<std::size_t>(std::span<const std::uint8_t>)>;

// The whole (decompressed) contents of `path`. Throws std::runtime_error naming
// the file when it is missing, not a regular file (a device or pipe, which has
// no end or blocks), unreadable, larger than the memory left ("not enough
// memory to read ..."), or a gzip stream that is truncated, corrupt (the
// compressed byte offset and the bytes decompressed before it), followed by
// bytes that are no further gzip member, or (with `declared`) inflating to more
// bytes than its header declares. With `declared`, the header of an
// uncompressed file is checked before the file is read whole.
std::vector<std::uint8_t> read_file_bytes(const std::string& path,
                                          const DeclaredSize& declared = {});

// The bytes of `path` as they are on disk, never decompressed (image files,
// whose formats compress on their own). Throws like read_file_bytes.
std::vector<std::uint8_t> read_raw_file_bytes(const std::string& path);

// A data file held open, for a reader that checks its header and then takes
// its data straight into the array it keeps: both reads are of the same open
// file, so a file replaced on disk in between is not half one, half the other.
class OpenDataFile {
 public:
  // Throws like read_file_bytes (missing, not a regular file, unreadable).
  explicit OpenDataFile(const std::string& path);
  ~OpenDataFile();
  OpenDataFile(OpenDataFile&& other) noexcept;
  OpenDataFile& operator=(OpenDataFile&&) = delete;
  OpenDataFile(const OpenDataFile&) = delete;
  OpenDataFile& operator=(const OpenDataFile&) = delete;

  std::uint64_t size() const { return size_; }
  // The first `size` bytes as they are on disk (fewer when the file is shorter).
  std::vector<std::uint8_t> prefix(std::size_t size) const;
  bool gzip() const;
  // Reads the `size` bytes from byte `offset` into `out`. Throws naming the
  // file when they cannot all be read (a read error, or a file cut short since
  // it was opened).
  void read_at(std::uint64_t offset, void* out, std::size_t size) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Refuses an uncompressed file of `file_size` bytes that is longer than the
// `declared` bytes its header gives (a wrong extent, or bytes appended).
void check_declared_size(const std::string& path, std::uint64_t file_size, std::size_t declared);

// The error for data file `path` that does not fit in memory (`bytes` of it).
std::runtime_error not_enough_memory_for(const std::string& path, std::size_t bytes);

// A big-endian 32-bit unsigned integer at `offset` (IDX headers).
inline std::uint32_t read_be32(std::span<const std::uint8_t> bytes, std::size_t offset) {
  return (std::uint32_t{bytes[offset]} << 24) | (std::uint32_t{bytes[offset + 1]} << 16) |
         (std::uint32_t{bytes[offset + 2]} << 8) | std::uint32_t{bytes[offset + 3]};
}

// The number of elements of an array of `shape` (extents >= 0, from a file's
// header), or nullopt when it is more than `limit` (the elements the file
// holds): compared before each product, so corrupt extents cannot overflow it
// into a small number.
inline std::optional<std::size_t> element_count_within(const std::vector<std::int64_t>& shape,
                                                       std::size_t limit) {
  for (const std::int64_t extent : shape)
    if (extent == 0) return 0;
  std::size_t count = 1;
  for (const std::int64_t extent : shape) {
    const auto e = static_cast<std::size_t>(extent);
    if (count > limit / e) return std::nullopt;
    count *= e;
  }
  return count;
}

// What an array of `shape` of `element_bytes`-byte values after a header of
// `header` bytes needs, for errors: "60 bytes", or "more bytes than can be
// counted" when the product overflows.
inline std::string bytes_needed(const std::vector<std::int64_t>& shape, std::size_t element_bytes,
                                std::size_t header) {
  const std::optional<std::size_t> count =
      element_count_within(shape, (SIZE_MAX - header) / element_bytes);
  return count ? std::to_string(header + *count * element_bytes) + " bytes"
               : "more bytes than can be counted";
}

}  // namespace trainer::data
