// The model.blocks section's own checks, made when the config is read: each
// definition's keys, and definitions no layer uses (the graph builder checks
// a block's layers only where an instance expands them).
#pragma once

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"
#include "runner/config/node.h"

namespace trainer::config {

// Errors for a definition with a key other than `layers` and `params`, with
// `params` not a map, or with no layers; a warning in config.warnings for
// each block that no layer of the model (or of a block it uses) names.
void check_model_blocks(const Node& model, Config& config, Diagnostics& diags);

}  // namespace trainer::config
