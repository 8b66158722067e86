// labels: cpu
// SHA-256 (checkpoint checksums, config hashes): the standard test vectors,
// and the same digest whether the bytes come at once or in pieces of any
// size (a checkpoint file is hashed as it is written, tensor by tensor).
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "runner/train/sha256.h"

using trainer::train::Sha256;
using trainer::train::sha256_hex;

TEST_CASE("SHA-256 of the standard test vectors") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("SHA-256 of bytes given in pieces equals that of the whole") {
  std::mt19937 rng(5);
  std::string bytes(3000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  // Lengths around the 64-byte block and the 55/56-byte padding boundary.
  for (const std::size_t length : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000, 3000}) {
    const std::string whole = bytes.substr(0, length);
    for (const std::size_t piece : {1, 7, 63, 64, 65, 500}) {
      INFO("length " << length << " in pieces of " << piece);
      Sha256 sha;
      for (std::size_t at = 0; at < length; at += piece) sha.update(whole.substr(at, piece));
      CHECK(sha.hex() == sha256_hex(whole));
    }
  }
}
