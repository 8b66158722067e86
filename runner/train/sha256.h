// SHA-256 as lowercase hex (config hashes, checkpoint checksums): of a byte
// string at once, or of bytes given in pieces (a file written as it is hashed).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace trainer::train {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  // The digest of everything given; the object is spent afterwards.
  std::string hex();

 private:
  std::array<std::uint32_t, 8> h_;
  std::array<unsigned char, 64> block_{};
  std::size_t pending_ = 0;  // bytes waiting in block_
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view bytes);
// The SHA-256 of a file's bytes, read a piece at a time; "" when it cannot be read.
std::string sha256_of_file(const std::string& path);

}  // namespace trainer::train
