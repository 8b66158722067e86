// Writes a config::Node tree back as YAML (block maps, flow lists of scalars),
// quoting strings that would otherwise read as another type. Used by
// `print-config`; the output loads back to the same tree.
#pragma once

#include <string>

#include "runner/config/node.h"

namespace trainer::config {

std::string to_yaml(const Node& root);

// One scalar (or null) as YAML text that reads back as the same text and kind:
// plain where that is safe, else double-quoted ("x #y", a quoted "1"). A sweep's
// values become KEY=VALUE overrides this way.
std::string scalar_to_yaml(const Node& scalar);

}  // namespace trainer::config
