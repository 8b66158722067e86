// Writes a config::Node tree back as YAML (block maps, flow lists of scalars),
// quoting strings that would otherwise read as another type. Used by
// `print-config`; the output loads back to the same tree.
#pragma once

#include <string>

#include "runner/config/node.h"

namespace trainer::config {

std::string to_yaml(const Node& root);

}  // namespace trainer::config
