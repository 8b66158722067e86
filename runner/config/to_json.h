// config::Node -> JSON, typing scalars by the YAML 1.2 core schema (the same
// reading the config loader uses). Used to feed YAML configs to a JSON Schema
// validator and to put defaults into the generated schema.
#pragma once

#include <nlohmann/json.hpp>

#include "runner/config/node.h"

namespace trainer::config {

nlohmann::ordered_json to_json(const Node& node);

}  // namespace trainer::config
