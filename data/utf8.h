// UTF-8 checks for text that comes from outside: config files, command-line
// arguments, and names on disk (class folders), which JSON records and error
// messages must hold as valid UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace trainer::data {

// The offset of the first byte of `text` that does not begin a well-formed
// UTF-8 character (a stray continuation byte, a sequence cut short, an
// overlong form, a surrogate or a code point past U+10FFFF); npos when every
// byte belongs to one.
std::size_t invalid_utf8_at(std::string_view text);

// `text` with every byte that invalid_utf8_at would stop at written as \xNN,
// so that a name on disk in another encoding ("caf\xE9" in Latin-1) stays
// readable, distinct from other names, and valid UTF-8.
std::string with_invalid_utf8_escaped(std::string_view text);

}  // namespace trainer::data
