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
  const std::string text =
      config::resolved_from_comment(args.config_path) + config::to_yaml(config.resolved);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace trainer
