// load_config: YAML file(s) + command-line overrides -> a validated Config.
#pragma once

#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"
#include "runner/config/overrides.h"

namespace trainer::config {

// Reads `path` (resolving `extends`), applies `overrides` ("a.b=value") last,
// validates every value against the field registry and fills defaults.
// Throws ConfigError carrying every problem found (syntax errors, unknown keys,
// bad values, bad overrides), each pointing at its file:line:col.
// `origins`: where overrides not from the command line were written.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                   const OverrideOrigins& origins = {});

// The same from YAML text (tests, generated configs); `name` appears in marks.
Config load_config_text(const std::string& text, const std::string& name,
                        const std::vector<std::string>& overrides = {});

// The merged tree (extends resolved, overrides applied) before validation and
// defaults; throws ConfigError only when the files cannot be read or parsed.
Node load_merged_tree(const std::string& path, const std::vector<std::string>& overrides = {});

}  // namespace trainer::config
