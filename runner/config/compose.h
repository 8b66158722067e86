// Composition of config files: `extends: base.yaml` (relative to the including
// file, deep merge where maps merge and lists replace, cycles detected), and
// the shorthand forms expanded to their map form (`precision: bf16`,
// `devices: cpu`, `devices: [0, 1]`) so merging and overrides see one shape.
#pragma once

#include <string>

#include "runner/config/diagnostics.h"
#include "runner/config/node.h"

namespace trainer::config {

// Reads `path` and everything it extends, merged, without the `extends` keys.
// Returns false when a file could not be read or parsed, or on a cycle (the
// tree is then unusable and the diagnostics say why).
bool load_composed(const std::string& path, Diagnostics& diags, Node& out);

// `over` deep-merged onto the top-level map `base`: maps merge key by key,
// anything else replaces, and so does a map that names another `type` than
// its base's, outside a section (a data source switched from idx to csv).
Node merge_nodes(Node base, const Node& over);

// Expands section shorthands in a top-level map, in place (in each file
// before `extends` merges them: `precision: fp16` keeps a base's loss_scale).
void expand_shorthands(Node& root);

// `loss: cross_entropy` in a model map -> `loss: {type: cross_entropy}`.
// After the merge only: a loss named in a file replaces its base's loss.
void expand_loss_shorthand(Node& model);

}  // namespace trainer::config
