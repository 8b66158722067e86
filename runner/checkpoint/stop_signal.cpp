// Signal handlers that set a flag the training loop polls between steps.
#include "runner/checkpoint/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace trainer::checkpoint {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_previous_int, g_previous_term;

void on_signal(int sig) {
  if (g_signal.exchange(sig) != 0) _exit(128 + sig);  // asked twice: stop now
}

}  // namespace

StopSignals::StopSignals() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

int stop_requested() {
  return g_signal.load();
}

}  // namespace trainer::checkpoint
