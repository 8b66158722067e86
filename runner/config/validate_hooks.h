// Extra checks run by `trainer validate` (and run/plan before they start) after
// the field validation succeeded: the graph builder registers one that builds
// the model graph and reports layer and shape errors at their YAML position.
//
// Registration: call add_validation_hook() from code the CLI reaches (e.g. in
// the translation unit of the graph builder, with a static registrar object).
// The runner is a static library, so a registrar in a file nothing references
// is dropped by the linker.
#pragma once

#include <functional>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"

namespace trainer::config {

// Adds the config's errors to the first list, and to the second what it
// accepts but cannot act on.
using ValidationHook = std::function<void(const Config&, Diagnostics&, Diagnostics&)>;

void add_validation_hook(ValidationHook hook);

// Runs every hook; throws ConfigError with every error they reported (a hook
// that throws ConfigError has its diagnostics collected too). Returns their
// warnings otherwise.
std::vector<Diagnostic> run_validation_hooks(const Config& config);

// load_config() followed by run_validation_hooks().
Config load_and_check(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace trainer::config
