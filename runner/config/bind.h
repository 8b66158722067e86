// Checks a merged config tree against the field registry and fills the typed
// Config. The tree is completed in place (defaults filled, data paths resolved)
// so it becomes Config::resolved. Every problem goes to `diags`.
#pragma once

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"

namespace trainer::config {

Config bind_config(Node& root, Diagnostics& diags);

}  // namespace trainer::config
