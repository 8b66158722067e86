// The config a command works from, loaded and checked as far as every command
// checks it.
#pragma once

#include <string>
#include <vector>

#include "runner/config/config.h"

namespace trainer {

// config::load_config's config, with its `sweep:` section (which only
// `trainer sweep` acts on) read as `trainer sweep` reads it: its keys,
// distributions, trial count and objective. A typo there is a config error
// (exit 2) whatever the command, as an unknown key anywhere else is, not a
// section silently carried along until a sweep meets it.
config::Config load_command_config(const std::string& path,
                                   const std::vector<std::string>& overrides);

}  // namespace trainer
