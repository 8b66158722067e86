// A JSON value as an error message shows it (json_shown.h).
#include "runner/json_shown.h"

namespace trainer {

std::string shown_json(const nlohmann::json& value) {
  if (value.is_array()) return "a list of " + std::to_string(value.size());
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " members";
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text + " (" + value.type_name() + ")";
}

}  // namespace trainer
