// The `trainer` command line.
#include "runner/cli.h"

int main(int argc, char** argv) {
  return trainer::run_cli(argc, argv);
}
