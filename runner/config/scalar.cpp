// YAML 1.2 core-schema scalar classification and conversion.
#include "runner/config/scalar.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <regex>

namespace trainer::config {

ScalarKind classify_plain(const std::string& t) {
  static const std::regex integer(R"([-+]?[0-9]+)");
  static const std::regex number(
      R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF))");
  if (t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL") return ScalarKind::null;
  if (t == "true" || t == "True" || t == "TRUE" || t == "false" || t == "False" || t == "FALSE")
    return ScalarKind::boolean;
  if (std::regex_match(t, integer)) return ScalarKind::integer;
  if (std::regex_match(t, number)) return ScalarKind::number;
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
