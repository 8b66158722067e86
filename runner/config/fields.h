// Generic validation of a YAML map against a list of FieldSpecs: the one
// mechanism behind the fixed config sections, model layers (OpDef::attrs) and
// data sources/transforms (data/registry.h). Every problem is added to `diags`
// at the offending value's mark; nothing throws.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ops/field.h"
#include "runner/config/diagnostics.h"
#include "runner/config/node.h"

namespace trainer::config {

// Validates `map` against `specs`: unknown keys (with "did you mean"), wrong
// types, out-of-range values, bad enum values (with the nearest choice), list
// lengths, and required keys missing (reported at the map's mark). Returns the
// parsed values with defaults (FieldSpec::default_yaml) filled in. Keys listed
// in `extra_allowed_keys` are accepted and left to the caller. A null `map`
// counts as an empty map. `key_path` prefixes every reported key ("optimizer",
// "model.layers[2]"); it may be empty. `key_elsewhere`, when given, names the
// full key an unknown key with no near match here belongs to ("lr" at the top
// level -> "optimizer.lr"), or "".
Attrs read_fields(const Node& map, const std::vector<FieldSpec>& specs, const std::string& key_path,
                  Diagnostics& diags, const std::vector<std::string>& extra_allowed_keys = {},
                  const std::function<std::string(const std::string&)>& key_elsewhere = {});

// Parses one value against its spec. Returns false (and reports) when invalid.
bool parse_field(const Node& value, const FieldSpec& spec, const std::string& key_path,
                 Diagnostics& diags, FieldValue& out);
// Same, throwing-free convenience that returns a default-constructed value on error.
FieldValue parse_field(const Node& value, const FieldSpec& spec, const std::string& key_path,
                       Diagnostics& diags);

// The default of a spec as a Node (marked "<default>"); null when it has none.
Node default_node(const FieldSpec& spec);

// Adds every missing field that has a default to `map` (creating the map when
// null), so a resolved tree shows the values actually used.
void fill_defaults(Node& map, const std::vector<FieldSpec>& specs);

// A number as messages write it: 0.05, 1e-07, 1000000000 (whole numbers up to
// 2^64 in full).
std::string format_number(double v);

// "optimizer" + "lr" -> "optimizer.lr"; "" + "seed" -> "seed".
std::string join_key(const std::string& parent, const std::string& key);

// A human description of a spec's constraint: "> 0", ">= 0, <= 1", "one of a, b",
// and "acts only with type: sgd" for a field that depends on another.
std::string describe_constraint(const FieldSpec& spec);

}  // namespace trainer::config
