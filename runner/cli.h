// The command line: subcommands run, validate, print-config, plan, time, sweep,
// doctor, schema, version. Returns the process exit code (0 ok, 1 runtime
// failure, 2 usage or configuration error).
#pragma once

namespace trainer {

int run_cli(int argc, char** argv);

}  // namespace trainer
