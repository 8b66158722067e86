// `trainer print-config CONFIG [KEY=VALUE ...]`: the resolved YAML (extends
// merged, overrides applied, defaults filled, data paths resolved) on stdout,
// once every field and every layer's type, keys and values check out (the
// model's shapes and the data are `trainer validate`'s).
#include <cstdio>

#include "runner/commands/command_config.h"
#include "runner/commands/config_commands.h"
#include "runner/config/emit.h"
#include "runner/config/load.h"
#include "runner/config/overrides.h"
#include "runner/graph/builder.h"

namespace trainer {

int command_print_config(const CommandArgs& args) {
  const config::Config config = load_command_config(args.config_path, args.overrides);
  {  // the layers as far as they can be checked without the data (validate does the rest)
    config::Diagnostics diags;
    graph::check_model_fields(config.model.node, diags);
    config::annotate_overrides(diags, args.overrides).throw_if_any();
  }
  print_config_warnings(config);
  const std::string text =
      config::resolved_from_comment(args.config_path) + config::to_yaml(config.resolved);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace trainer
