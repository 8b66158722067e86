// `trainer validate CONFIG [KEY=VALUE ...]`: every field checked, then the
// registered model checks; prints `ok` or every error (the CLI exits 2).
#include <cstdio>

#include "runner/commands/config_commands.h"
#include "runner/config/validate_hooks.h"

namespace trainer {

int command_validate(const CommandArgs& args) {
  config::load_and_check(args.config_path, args.overrides);  // throws ConfigError
  std::printf("ok\n");
  return 0;
}

}  // namespace trainer
