// YAML printing of config trees.
#include "runner/config/emit.h"

#include <algorithm>

#include "runner/config/scalar.h"

namespace trainer::config {
namespace {

std::string double_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
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
      case '\t':
        out += "\\t";
        break;
      default:
        out += c;
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

// A plain scalar that reads back as the same text and kind.
bool safe_plain(const std::string& s) {
  return !s.empty() && plain_first_char(s.front()) &&
         std::all_of(s.begin() + 1, s.end(), plain_char) && s.back() != ' ';
}

std::string scalar_text(const Node& n) {
  if (n.is_null()) return "null";
  if (n.quoted()) {
    if (classify_plain(n.text()) == ScalarKind::string && safe_plain(n.text())) return n.text();
    return double_quoted(n.text());
  }
  return safe_plain(n.text()) ? n.text() : double_quoted(n.text());
}

std::string key_text(const std::string& key) {
  return safe_plain(key) && classify_plain(key) == ScalarKind::string ? key : double_quoted(key);
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

void emit_map(const Node& n, int indent, std::string& out, bool first_inline) {
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (!(first_inline && i == 0)) out += std::string(static_cast<std::size_t>(indent), ' ');
    out += key_text(n.key_at(i)) + ":";
    const Node& v = n.value_at(i);
    if (is_inline(v)) {
      out += " " + inline_value(v) + "\n";
    } else {
      out += "\n";
      emit(v, indent + 2, out);
    }
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

std::string to_yaml(const Node& root) {
  std::string out;
  emit(root, 0, out);
  return out;
}

}  // namespace trainer::config
