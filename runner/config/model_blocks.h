// The model.blocks section's own checks, made when the config is read: each
// definition's keys, and definitions no layer uses (the graph builder checks
// a block's layers only where an instance expands them).
#pragma once

#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"
#include "runner/config/node.h"

namespace trainer::config {

// Keys a block instance has besides the block's parameters (which may not
// take these names: an instance could never set them).
inline const std::vector<std::string> kBlockInstanceKeys = {"block", "name", "inputs", "repeat",
                                                            "first"};

// Whether `node` (a block's layers) refers to parameter `name` anywhere: an
// unquoted `$name` or `${name}` value, which the block's instances replace.
bool refers_to_parameter(const Node& node, const std::string& name);

// Errors for a definition with a key other than `layers` and `params`, with `params` not a map or
// naming a parameter as an instance key, or with no layers; a warning in config.warnings for each
// block that no layer of the model (or of a block it uses) names.
void check_model_blocks(const Node& model, Config& config, Diagnostics& diags);

}  // namespace trainer::config
