// The `trainer` command line.
#include "runner/checkpoint/stop_signal.h"
#include "runner/cli.h"

int main(int argc, char** argv) {
  // Before any thread exists, so that all of them inherit SIGINT / SIGTERM blocked.
  trainer::checkpoint::start_stop_signal_watcher();
  return trainer::run_cli(argc, argv);
}
