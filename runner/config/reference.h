// The configuration reference (docs/config-reference.md), generated from the
// same registries as the JSON Schema: every section and field with its type,
// default, constraint and doc; the layer ops; the data sources and transforms.
#pragma once

#include <string>

namespace trainer::config {

std::string config_reference_markdown();

}  // namespace trainer::config
