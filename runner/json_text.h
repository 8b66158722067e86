// JSON text for the files a run writes and the lines it prints. A string may
// hold bytes that are not UTF-8 (a path given on the command line, a working
// directory named in another encoding), which JSON cannot hold: such bytes
// become U+FFFD rather than failing the write after the work was done.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace trainer {

// `value` as JSON text, on one line, or indented by `indent` spaces per level.
inline std::string json_text(const nlohmann::json& value, int indent = -1) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace trainer
