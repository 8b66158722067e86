// The configuration subcommands: validate, print-config, schema, version.
// Each returns the exit code (0 ok, 1 runtime failure, 2 usage or config error).
#pragma once

#include <string>

#include "runner/commands.h"
#include "runner/config/config.h"

namespace trainer {

int command_validate(const CommandArgs& args);
// Prints the config's warnings (settings without effect) on stderr.
void print_config_warnings(const config::Config& config);
int command_print_config(const CommandArgs& args);
int command_schema(const std::string& out_dir);
int command_version();

}  // namespace trainer
