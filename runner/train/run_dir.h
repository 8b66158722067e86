// The run directory: where a run keeps everything it did. Created up front with
// the resolved config (re-runnable as is), its hash and a manifest.
#pragma once

#include <string>

#include "runner/commands.h"
#include "runner/config/config.h"

namespace trainer::train {

// Creates `out` (or runs/<name>/<YYYYmmdd-HHMMSS>) and writes config.yaml,
// config.sha256 and manifest.json. Returns the directory.
std::string create_run_dir(const config::Config& config, const CommandArgs& args,
                           const std::string& backend_name);

}  // namespace trainer::train
