// The `trainer` command line.
#include <fcntl.h>
#include <unistd.h>

#include "runner/checkpoint/stop_signal.h"
#include "runner/cli.h"

namespace {

// Standard input, output and error that the parent closed are opened on
// /dev/null: otherwise the first files the run opens (its run directory's
// lock, train.log, metrics.jsonl) would take their numbers, and the console's
// lines would be written into them.
void keep_standard_streams_open() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) continue;
    const int null_fd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (null_fd != -1 && null_fd != fd) {  // the lowest free number: fd itself
      dup2(null_fd, fd);
      close(null_fd);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  keep_standard_streams_open();
  // Before any thread exists, so that all of them inherit SIGINT / SIGTERM blocked.
  trainer::checkpoint::start_stop_signal_watcher();
  return trainer::run_cli(argc, argv);
}
