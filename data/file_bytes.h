// Reading whole files into memory: raw or gzip-compressed (detected by the
// gzip magic, not the file name), with errors that name the file. Also the
// small helpers the binary formats need: byte order, and element counts
// checked against the data present.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainer::data {

// The whole (decompressed) contents of `path`. Throws std::runtime_error naming
// the file when it is missing or unreadable, or a gzip stream that is truncated,
// corrupt (the compressed byte offset and the bytes decompressed before it) or
// followed by bytes that are no further gzip member.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);

// A big-endian 32-bit unsigned integer at `offset` (IDX headers).
inline std::uint32_t read_be32(const std::vector<std::uint8_t>& bytes, std::size_t offset) {
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
