// YAML 1.2 core-schema scalar classification and conversion.
#include "runner/config/scalar.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace trainer::config {
namespace {

// The forms below are checked character by character, so that a scalar of
// any length is classified in one pass (a regular expression engine recurses
// per character and runs out of stack on a long one).

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Where the text starts after an optional sign.
std::size_t after_sign(const std::string& t) {
  return !t.empty() && (t[0] == '-' || t[0] == '+') ? 1 : 0;
}

// Where the run of digits starting at `at` ends.
std::size_t skip_digits(const std::string& t, std::size_t at) {
  while (at < t.size() && is_digit(t[at])) ++at;
  return at;
}

// [-+]?[0-9]+
bool is_integer_text(const std::string& t) {
  const std::size_t start = after_sign(t);
  return start < t.size() && skip_digits(t, start) == t.size();
}

// [-+]?\.(inf|Inf|INF)
bool is_infinity_text(const std::string& t) {
  const std::string rest = t.substr(after_sign(t));
  return rest == ".inf" || rest == ".Inf" || rest == ".INF";
}

// Where the mantissa (\.[0-9]+|[0-9]+(\.[0-9]*)?) starting at `at` ends, or
// npos when there is none.
std::size_t mantissa_end(const std::string& t, std::size_t at) {
  const std::size_t whole_end = skip_digits(t, at);
  if (whole_end > at)
    return whole_end < t.size() && t[whole_end] == '.' ? skip_digits(t, whole_end + 1) : whole_end;
  if (at >= t.size() || t[at] != '.') return std::string::npos;
  const std::size_t fraction_end = skip_digits(t, at + 1);
  return fraction_end > at + 1 ? fraction_end : std::string::npos;
}

// Whether an exponent ([eE][-+]?[0-9]+) starting at `at` runs to the end.
bool exponent_to_end(const std::string& t, std::size_t at) {
  if (at >= t.size() || (t[at] != 'e' && t[at] != 'E')) return false;
  ++at;
  if (at < t.size() && (t[at] == '-' || t[at] == '+')) ++at;
  return at < t.size() && skip_digits(t, at) == t.size();
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_decimal_text(const std::string& t) {
  const std::size_t end = mantissa_end(t, after_sign(t));
  return end != std::string::npos && (end == t.size() || exponent_to_end(t, end));
}

}  // namespace

ScalarKind classify_plain(const std::string& t) {
  if (t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL") return ScalarKind::null;
  if (t == "true" || t == "True" || t == "TRUE" || t == "false" || t == "False" || t == "FALSE")
    return ScalarKind::boolean;
  if (is_integer_text(t)) return ScalarKind::integer;
  if (is_decimal_text(t) || is_infinity_text(t)) return ScalarKind::number;
  return ScalarKind::string;
}

ScalarKind classify(const Node& node) {
  if (node.is_null()) return ScalarKind::null;
  if (node.quoted()) return ScalarKind::string;
  return classify_plain(node.text());
}

std::optional<bool> as_bool(const Node& node) {
  if (!node.is_scalar() || classify(node) != ScalarKind::boolean) return std::nullopt;
  return node.text()[0] == 't' || node.text()[0] == 'T';
}

std::optional<std::int64_t> as_int(const Node& node) {
  if (!node.is_scalar() || classify(node) != ScalarKind::integer) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(node.text().c_str(), &end, 10);
  if (errno == ERANGE) return std::nullopt;
  return static_cast<std::int64_t>(v);
}

std::optional<double> as_number(const Node& node) {
  if (!node.is_scalar()) return std::nullopt;
  const ScalarKind kind = classify(node);
  if (kind != ScalarKind::integer && kind != ScalarKind::number) return std::nullopt;
  std::string t = node.text();
  const bool negative = !t.empty() && t[0] == '-';
  if (t.find("inf") != std::string::npos || t.find("Inf") != std::string::npos ||
      t.find("INF") != std::string::npos)
    return negative ? -HUGE_VAL : HUGE_VAL;
  return std::strtod(t.c_str(), nullptr);
}

std::string block_parameter_name(const std::string& text) {
  if (text.empty() || text[0] != '$') return {};
  std::string name = text.substr(1);
  if (name.size() >= 2 && name.front() == '{' && name.back() == '}')
    name = name.substr(1, name.size() - 2);
  return name;
}

std::string describe(const Node& node) {
  switch (node.kind()) {
    case Node::Kind::null:
      return "nothing";
    case Node::Kind::sequence:
      return "a list";
    case Node::Kind::map:
      return "a map";
    case Node::Kind::scalar:
      break;
  }
  switch (classify(node)) {
    case ScalarKind::null:
      return "nothing (null)";
    case ScalarKind::boolean:
      return "boolean " + node.text();
    case ScalarKind::integer:
      return "integer " + node.text();
    case ScalarKind::number:
      return "number " + node.text();
    case ScalarKind::string:
      return "'" + node.text() + "'";
  }
  return node.text();
}

}  // namespace trainer::config
