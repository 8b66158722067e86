// Checks a merged config tree against the field registry and fills the typed
// Config. The tree is completed in place (defaults filled, data paths resolved)
// so it becomes Config::resolved. Every problem goes to `diags`.
#pragma once

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"

namespace trainer::config {

Config bind_config(Node& root, Diagnostics& diags);

// Before overrides, in a resolved config a run or sweep wrote: a
// data.eval_transforms that is exactly the list derived from data.transforms
// (older versions wrote it out as a value) is marked derived, so that it
// follows data.transforms as changed by overrides, as it would have in the
// config it was resolved from. (In a config a person wrote, a list given is
// theirs, whatever it holds.)
void mark_derived_values(Node& root);

}  // namespace trainer::config
