// How a YAML scalar reads under the YAML 1.2 core schema: null, boolean,
// integer, number or string. Field parsing, the JSON conversion used by the
// schema tests and the YAML printer all classify scalars the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runner/config/node.h"

namespace trainer::config {

enum class ScalarKind { null, boolean, integer, number, string };

// A quoted scalar is always a string; a plain one is classified by its text.
ScalarKind classify(const Node& node);
ScalarKind classify_plain(const std::string& text);

std::optional<bool> as_bool(const Node& node);
std::optional<std::int64_t> as_int(const Node& node);  // integers only (no overflow)
std::optional<double> as_number(const Node& node);     // integers and numbers

// The block parameter a text "$p" or "${p}" names ("p"), or "" when it names none.
std::string block_parameter_name(const std::string& text);

// A short description of what a node holds, for "found ..." in messages:
// "'abc'", "-1", "a list", "a map", "nothing".
std::string describe(const Node& node);

}  // namespace trainer::config
