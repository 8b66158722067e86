// The JSON Schema (draft 2020-12) of an experiment file, generated from the
// field registry, the op registry (layer items) and the data registry (source
// and transform items). `trainer schema` writes it to schemas/trainer.schema.json;
// editors use it through `# yaml-language-server: $schema=...`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ops/field.h"

namespace trainer::config {

nlohmann::ordered_json config_json_schema();
std::string config_json_schema_text();  // pretty-printed, newline-terminated

// The schema of one field's value.
nlohmann::ordered_json field_json_schema(const FieldSpec& spec);

}  // namespace trainer::config
