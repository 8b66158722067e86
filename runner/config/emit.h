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

// "# resolved from <path>\n", the line print-config and a run's config.yaml
// begin with. A path holding a control character (a line break) is written
// double-quoted with it escaped, so the comment is always one line.
std::string resolved_from_comment(const std::string& config_path);

}  // namespace trainer::config
