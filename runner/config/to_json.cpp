// Node to JSON conversion.
#include "runner/config/to_json.h"

#include "runner/config/scalar.h"

namespace trainer::config {

nlohmann::ordered_json to_json(const Node& node) {
  switch (node.kind()) {
    case Node::Kind::null:
      return nullptr;
    case Node::Kind::sequence: {
      auto out = nlohmann::ordered_json::array();
      for (const auto& item : node.items()) out.push_back(to_json(item));
      return out;
    }
    case Node::Kind::map: {
      auto out = nlohmann::ordered_json::object();
      for (std::size_t i = 0; i < node.size(); ++i) out[node.key_at(i)] = to_json(node.value_at(i));
      return out;
    }
    case Node::Kind::scalar:
      break;
  }
  switch (classify(node)) {
    case ScalarKind::null:
      return nullptr;
    case ScalarKind::boolean:
      return *as_bool(node);
    case ScalarKind::integer:
      if (auto i = as_int(node)) return *i;
      return *as_number(node);
    case ScalarKind::number:
      return *as_number(node);
    case ScalarKind::string:
      return node.text();
  }
  return node.text();
}

}  // namespace trainer::config
