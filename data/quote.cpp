// Escaping and shortening data values for error messages.
#include "data/quote.h"

#include <cstdio>

namespace trainer::data {

std::string escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", byte);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

std::string excerpt(std::string_view text) {
  if (text.size() <= kQuotedBytes) return escaped(text);
  std::size_t end = kQuotedBytes;
  // Not inside a UTF-8 sequence: back up over up to 3 continuation bytes (10xxxxxx).
  for (int k = 0; k < 3 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80; ++k) --end;
  return escaped(text.substr(0, end)) + "...";
}

std::string quote(std::string_view text) {
  const std::string shown = "'" + excerpt(text) + "'";
  if (text.size() <= kQuotedBytes) return shown;
  return shown + " (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace trainer::data
