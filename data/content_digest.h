// ContentDigest: a 64-bit digest of a sequence of byte blocks, to notice that
// a dataset changed between the start of a run and its resume. It guards
// against accidents (a file replaced, a label edited), not an adversary: it is
// not a cryptographic hash, and it runs at memory speed over in-memory data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace trainer::data {

class ContentDigest {
 public:
  // Mixes in one block: its length, then its bytes. Blocks are delimited, so
  // "ab" + "c" and "a" + "bc" digest differently.
  void add(const void* bytes, std::size_t size);
  void add(std::string_view text) { add(text.data(), text.size()); }
  void add(std::uint64_t value);
  std::uint64_t value() const;

 private:
  void mix(std::uint64_t word);
  std::uint64_t state_ = 0x243F6A8885A308D3ull;
  std::uint64_t words_ = 0;
};

// A digest computed once, on first use, by whichever thread asks first: what
// a dataset that is costly to digest keeps.
class CachedDigest {
 public:
  template <class Compute>
  std::uint64_t get(Compute&& compute) const {
    std::call_once(once_, [&] { value_ = compute(); });
    return value_;
  }

 private:
  mutable std::once_flag once_;
  mutable std::uint64_t value_ = 0;
};

// A digest as 16 lowercase hex digits, as manifests and checkpoints record it.
std::string digest_text(std::uint64_t digest);

}  // namespace trainer::data
