// `trainer print-config CONFIG [KEY=VALUE ...]`: the resolved YAML (extends
// merged, overrides applied, defaults filled, data paths resolved) on stdout.
#include <cstdio>

#include "runner/commands/config_commands.h"
#include "runner/config/emit.h"
#include "runner/config/load.h"

namespace trainer {

int command_print_config(const CommandArgs& args) {
  const config::Config config = config::load_config(args.config_path, args.overrides);
  print_config_warnings(config);
  std::printf("# resolved from %s\n%s", args.config_path.c_str(),
              config::to_yaml(config.resolved).c_str());
  return 0;
}

}  // namespace trainer
