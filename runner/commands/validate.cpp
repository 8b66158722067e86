// `trainer validate CONFIG [KEY=VALUE ...]`: every field checked, then the
// registered model checks; prints `ok` or every error (the CLI exits 2), and
// the warnings about settings without effect either way.
#include <cstdio>

#include "runner/commands/config_commands.h"
#include "runner/config/validate_hooks.h"

namespace trainer {

void print_config_warnings(const config::Config& config) {
  for (const auto& warning : config.warnings)
    std::fprintf(stderr, "%s\n", config::format(warning, "warning").c_str());
}

int command_validate(const CommandArgs& args) {
  const config::Config config =
      config::load_and_check(args.config_path, args.overrides);  // throws ConfigError
  print_config_warnings(config);
  std::printf("ok\n");
  return 0;
}

}  // namespace trainer
