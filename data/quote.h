// Data values quoted in error messages: control bytes escaped (a NUL would end
// the message) and a long value cut to its first characters with its length,
// so that a 50 MB cell gives a one-line error, not a 50 MB one.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace trainer::data {

// How many bytes of a value an error quotes.
inline constexpr std::size_t kQuotedBytes = 60;

// `text` with control bytes written as \xNN.
std::string escaped(std::string_view text);

// `text` escaped, cut to its first kQuotedBytes bytes (at a UTF-8 character
// boundary) followed by "..." when longer.
std::string excerpt(std::string_view text);

// excerpt(text) in single quotes, with the full length when it was cut:
// "'abc'", "'abcd...' (50000000 bytes)".
std::string quote(std::string_view text);

}  // namespace trainer::data
