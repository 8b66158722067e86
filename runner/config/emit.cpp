// YAML printing of config trees.
#include "runner/config/emit.h"

#include <algorithm>
#include <regex>
#include <set>

#include "data/utf8.h"
#include "runner/config/scalar.h"

namespace trainer::config {
namespace {

// A double-quoted scalar: quotes, backslashes and every control character
// escaped, so the text reads back byte for byte whatever it holds.
std::string double_quoted(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (byte < 0x20 || byte == 0x7f) {
          out += "\\x";
          out += hex[byte >> 4];
          out += hex[byte & 15];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

bool is_ascii_alnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// The characters a plain scalar may begin with, and those it may go on with;
// checked one by one, so a scalar of any length is checked in one pass.
bool plain_first_char(char c) {
  return is_ascii_alnum(c) || c == '_' || c == '.' || c == '/' || c == '+' || c == '$' || c == '-';
}
bool plain_char(char c) {
  return is_ascii_alnum(c) || c == '_' || c == '.' || c == '/' || c == '+' || c == '-' || c == ' ';
}

// A '-' alone or before a space starts a list item, and '---' or '...' at the
// start of a line marks a document.
bool starts_as_indicator(const std::string& s) {
  if (s.front() == '-' && (s.size() == 1 || s[1] == ' ')) return true;
  return s.rfind("---", 0) == 0 || s.rfind("...", 0) == 0;
}

// A plain scalar that reads back as the same text and kind.
bool safe_plain(const std::string& s) {
  return !s.empty() && plain_first_char(s.front()) &&
         std::all_of(s.begin() + 1, s.end(), plain_char) && s.back() != ' ' &&
         !starts_as_indicator(s);
}

bool all_of_from(const std::string& s, std::size_t from, bool (*accepted)(char)) {
  return s.size() > from && std::all_of(s.begin() + static_cast<long>(from), s.end(), accepted);
}

// Strings that the YAML 1.2 core schema reads as numbers, though the config
// reads them as strings: 0x1f, 0o17, .nan. Quoted, so that other YAML tools
// reading a printed config see strings too.
bool core_schema_number(const std::string& s) {
  const auto hex_digit = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  };
  const auto octal_digit = [](char c) { return c >= '0' && c <= '7'; };
  if (s.rfind("0x", 0) == 0) return all_of_from(s, 2, hex_digit);
  if (s.rfind("0o", 0) == 0) return all_of_from(s, 2, octal_digit);
  return s == ".nan" || s == ".NaN" || s == ".NAN";
}

// Strings that YAML 1.1 readers (PyYAML) read as booleans: yes, no, on,
// off, y, n in their three cases. Quoted, as core_schema_number's are.
bool yaml11_boolean(const std::string& s) {
  static const std::set<std::string> words = {"y",  "Y",  "yes", "Yes", "YES", "n",   "N",   "no",
                                              "No", "NO", "on",  "On",  "ON",  "off", "Off", "OFF"};
  return words.count(s) != 0;
}

// Strings that YAML 1.1 readers (PyYAML) read as numbers or dates, though
// the config reads them as strings: 1_000, 0b101, 0o17's older 017, 190:20:30,
// 2024-01-01. Quoted too.
bool yaml11_number_or_date(const std::string& s) {
  static const std::regex pattern(
      "[-+]?(0b[01_]+|0[0-7_]+|[0-9][0-9_]*_[0-9_]*|[0-9][0-9_]*(:[0-5]?[0-9])+(\\.[0-9_]*)?|"
      "[0-9_]*\\.[0-9_]*_[0-9_]*([eE][-+][0-9]+)?)|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?");
  return std::regex_match(s, pattern);
}

// A string written plain reads back as the same string ("$x" plain would
// read back as a block parameter), in other YAML tools too.
bool plain_string(const std::string& s) {
  return safe_plain(s) && classify_plain(s) == ScalarKind::string && !core_schema_number(s) &&
         !yaml11_boolean(s) && !yaml11_number_or_date(s) && s.front() != '$';
}

// An integer written with leading zeros ("010", which the config reads as
// 10) without them: YAML 1.1 readers take "010" for octal 8.
std::string integer_text(const std::string& s) {
  const std::size_t digits = s.front() == '-' || s.front() == '+' ? 1 : 0;
  std::size_t first = digits;
  while (first + 1 < s.size() && s[first] == '0' &&
         std::all_of(s.begin() + static_cast<long>(first), s.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
    ++first;
  return s.substr(0, digits) + s.substr(first);
}

std::string scalar_text(const Node& n) {
  if (n.is_null()) return "null";
  if (n.quoted()) return plain_string(n.text()) ? n.text() : double_quoted(n.text());
  switch (classify_plain(n.text())) {
    case ScalarKind::integer:
      return integer_text(n.text());
    case ScalarKind::string:  // written plain, read as a string: quoted where others read more
      if (safe_plain(n.text()) && !plain_string(n.text()) && n.text().front() != '$')
        return double_quoted(n.text());
      break;
    default:
      break;
  }
  // A block parameter, "${p}" written "$p": the same reference, and one that
  // a flow map {...} reads too.
  if (const std::string p = block_parameter_name(n.text()); !p.empty() && safe_plain("$" + p))
    return "$" + p;
  return safe_plain(n.text()) ? n.text() : double_quoted(n.text());
}

std::string key_text(const std::string& key) {
  return plain_string(key) ? key : double_quoted(key);
}

bool is_flat_list(const Node& n) {
  for (const auto& item : n.items())
    if (item.is_map() || item.is_sequence()) return false;
  return true;
}

std::string inline_value(const Node& n) {
  if (n.is_map() && n.size() == 0) return "{}";
  if (n.is_sequence() && is_flat_list(n)) {
    std::string out = "[";
    for (std::size_t i = 0; i < n.items().size(); ++i)
      out += (i ? ", " : "") + scalar_text(n.items()[i]);
    return out + "]";
  }
  return scalar_text(n);
}

bool is_inline(const Node& n) {
  return !(n.is_map() && n.size() > 0) && !(n.is_sequence() && !is_flat_list(n));
}

void emit(const Node& n, int indent, std::string& out);

// `key: value` lines of a derived value as comments ("# " after the
// indentation), under a line that says so.
void emit_derived(const std::string& lines, int indent, std::string& out) {
  const std::string margin(static_cast<std::size_t>(indent), ' ');
  out += margin + "# derived from the values above (uncomment to set it yourself):\n";
  std::size_t start = 0;
  while (start < lines.size()) {
    const std::size_t end = lines.find('\n', start);
    const std::string line = lines.substr(start, end - start);
    out += margin + "# " + line.substr(std::min(line.size(), margin.size())) + "\n";
    start = end == std::string::npos ? lines.size() : end + 1;
  }
}

void emit_map(const Node& n, int indent, std::string& out, bool first_inline) {
  for (std::size_t i = 0; i < n.size(); ++i) {
    const bool derived = n.key_mark_at(i).is_derived();
    std::string entry;
    if (!(first_inline && i == 0) || derived)
      entry += std::string(static_cast<std::size_t>(indent), ' ');
    entry += key_text(n.key_at(i)) + ":";
    const Node& v = n.value_at(i);
    if (is_inline(v)) {
      entry += " " + inline_value(v) + "\n";
    } else {
      entry += "\n";
      emit(v, indent + 2, entry);
    }
    if (derived)
      emit_derived(entry, indent, out);
    else
      out += entry;
  }
}

void emit(const Node& n, int indent, std::string& out) {
  if (n.is_map()) {
    emit_map(n, indent, out, false);
    return;
  }
  if (n.is_sequence()) {
    for (const auto& item : n.items()) {
      out += std::string(static_cast<std::size_t>(indent), ' ') + "- ";
      if (item.is_map() && item.size() > 0) {
        emit_map(item, indent + 2, out, true);
      } else if (is_inline(item)) {
        out += inline_value(item) + "\n";
      } else {
        out += "\n";
        emit(item, indent + 2, out);
      }
    }
    return;
  }
  out += std::string(static_cast<std::size_t>(indent), ' ') + inline_value(n) + "\n";
}

}  // namespace

std::string scalar_to_yaml(const Node& scalar) {
  return scalar_text(scalar);
}

std::string resolved_from_comment(const std::string& config_path) {
  // A path named in another encoding keeps its bytes as \xNN: the file
  // written is UTF-8, as a config must be.
  const std::string path = data::with_invalid_utf8_escaped(config_path);
  const bool has_control = std::any_of(path.begin(), path.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  return "# resolved from " + (has_control ? double_quoted(path) : path) + "\n";
}

std::string to_yaml(const Node& root) {
  std::string out;
  emit(root, 0, out);
  return out;
}

}  // namespace trainer::config
