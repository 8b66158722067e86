// Warnings for layers whose output nothing reads: neither the next layer
// (one that names its own `inputs:`) nor any later layer's `inputs:`, nor the
// loss. Such a layer is left out of the steps (the loss does not depend on
// it) and its parameters never train, which is almost always a wiring
// mistake in `inputs:`.
#pragma once

#include "runner/config/config.h"
#include "runner/config/node.h"

namespace trainer::config {

// Adds a warning to config.warnings for each such layer or block instance of
// model.layers and of each block definition's layers (a block's last layer
// is its output). A list whose `inputs:` are block parameters ($name) is
// left alone: what they name is known per instance only.
void warn_unused_layers(const Node& model, Config& config);

}  // namespace trainer::config
