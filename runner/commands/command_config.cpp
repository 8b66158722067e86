// load_command_config: the config file and overrides, with the sweep section
// read as `trainer sweep` reads it.
#include "runner/commands/command_config.h"

#include <cstdint>

#include "runner/config/load.h"
#include "runner/config/overrides.h"
#include "runner/sweep/sweep_spec.h"

namespace trainer {

config::Config load_command_config(const std::string& path,
                                   const std::vector<std::string>& overrides) {
  config::Config config = config::load_config(path, overrides);
  if (config.sweep.is_null()) return config;
  try {
    sweep::parse_sweep(config.sweep, {}, static_cast<std::uint64_t>(config.seed));
  } catch (const config::ConfigError& e) {
    config::annotate_overrides(e.diagnostics(), overrides).throw_if_any();
  }
  return config;
}

}  // namespace trainer
