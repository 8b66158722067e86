// A JSON value as an error message shows it: a value's text, cut short, and
// its type; a list or an object by its size alone, since a damaged file may
// nest it deeper than printing it recursively could go.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace trainer {

std::string shown_json(const nlohmann::json& value);

}  // namespace trainer
