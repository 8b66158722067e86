// SHA-256 of a byte string, as lowercase hex (config hashes, checkpoint checksums).
#pragma once

#include <string>
#include <string_view>

namespace trainer::train {

std::string sha256_hex(std::string_view bytes);

}  // namespace trainer::train
