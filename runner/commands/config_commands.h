// The configuration subcommands: validate, print-config, schema, version.
// Each returns the exit code (0 ok, 1 runtime failure, 2 usage or config error).
#pragma once

#include <string>

#include "runner/commands.h"

namespace trainer {

int command_validate(const CommandArgs& args);
int command_print_config(const CommandArgs& args);
int command_schema(const std::string& out_dir);
int command_version();

}  // namespace trainer
