// Reading whole files into memory: raw or gzip-compressed (detected by the
// gzip magic, not the file name), with errors that name the file. Also the
// small byte-order helpers the binary formats need.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer::data {

// The whole (decompressed) contents of `path`. Throws std::runtime_error naming
// the file when it is missing, unreadable or a truncated/corrupt gzip stream.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);

// A big-endian 32-bit unsigned integer at `offset` (IDX headers).
inline std::uint32_t read_be32(const std::vector<std::uint8_t>& bytes, std::size_t offset) {
  return (std::uint32_t{bytes[offset]} << 24) | (std::uint32_t{bytes[offset + 1]} << 16) |
         (std::uint32_t{bytes[offset + 2]} << 8) | std::uint32_t{bytes[offset + 3]};
}

}  // namespace trainer::data
