// Command-line parsing (CLI11) and dispatch to the subcommands.
#include "runner/cli.h"

#include <CLI/CLI.hpp>

namespace trainer {

int run_cli(int argc, char** argv) {
  CLI::App app{"trainer: declarative deep-learning training"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}

}  // namespace trainer
