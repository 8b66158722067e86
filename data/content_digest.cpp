// ContentDigest (content_digest.h): one multiply-rotate round per 8-byte word,
// finished with splitmix64.
#include "data/content_digest.h"

#include <bit>
#include <cstdio>
#include <cstring>

#include "data/rng.h"

namespace trainer::data {

void ContentDigest::mix(std::uint64_t word) {
  state_ = std::rotl(state_ ^ (word * 0xC2B2AE3D27D4EB4Full), 31) * 0x9E3779B185EBCA87ull;
  ++words_;
}

void ContentDigest::add(std::uint64_t value) {
  mix(value);
}

void ContentDigest::add(const void* bytes, std::size_t size) {
  mix(size);
  const auto* p = static_cast<const unsigned char*>(bytes);
  std::size_t at = 0;
  for (; at + sizeof(std::uint64_t) <= size; at += sizeof(std::uint64_t)) {
    std::uint64_t word;
    std::memcpy(&word, p + at, sizeof word);
    mix(word);
  }
  if (at < size) {  // the last bytes, zero-padded (the length above tells them apart)
    std::uint64_t word = 0;
    std::memcpy(&word, p + at, size - at);
    mix(word);
  }
}

std::uint64_t ContentDigest::value() const {
  return splitmix64(state_ ^ splitmix64(words_));
}

std::string digest_text(std::uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

}  // namespace trainer::data
