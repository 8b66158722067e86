// One watcher thread takes SIGINT, SIGTERM and SIGHUP with sigwaitinfo; every other
// thread blocks them, so no signal handler ever runs on a thread that executes
// kernels (see stop_signal.h).
#include "runner/checkpoint/stop_signal.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iterator>
#include <mutex>
#include <thread>

namespace trainer::checkpoint {
namespace {

std::atomic<StopSignalMode> g_mode{StopSignalMode::default_action};
std::mutex g_forward_mutex;
std::function<void(int)> g_forward;  // ForwardStopSignals' sender, under g_forward_mutex
std::atomic<int> g_signal{0};        // the first one of the current scope
std::atomic<bool> g_started{false};
sigset_t g_mask_before;  // written once, before g_started is set

// Signals ignored from the watcher's start, with the dispositions they had
// (written once, likewise): a console that goes away (SIGPIPE) and a file
// size limit reached (SIGXFSZ, `ulimit -f`) make writes fail with an error
// the run records, rather than end it unrecorded.
constexpr int kIgnored[] = {SIGPIPE, SIGXFSZ};
void (*g_ignored_before[std::size(kIgnored)])(int) = {};

// SIGTERM, SIGINT and SIGHUP (a closed terminal or SSH session), but not
// SIGINT or SIGHUP when ignored as the process started (`nohup` ignores
// SIGHUP; a shell script ignores SIGINT for the jobs it starts in the
// background, so that Ctrl-C stops the script alone): a blocked signal is
// queued even when ignored, and the watcher would take it.
sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  for (const int sig : {SIGINT, SIGHUP}) {
    struct sigaction inherited {};
    if (sigaction(sig, nullptr, &inherited) == 0 && inherited.sa_handler != SIG_IGN)
      sigaddset(&set, sig);
  }
  return set;
}

// When the current scope's first signal came (the watcher thread's alone).
std::chrono::steady_clock::time_point g_first_signal_at;

// At a terminal the first stop signal is answered at once: a long step,
// evaluation or data read would otherwise leave the key press unanswered
// until it ends. (Run on the watcher thread, never in a handler.)
void acknowledge_stop(int sig) {
  if (!isatty(STDERR_FILENO)) return;
  const char* text = sig == SIGINT ? "\nstopping at the next safe point (Ctrl-C again, a second "
                                     "or more later, quits at once)\n"
                                   : "\nstopping at the next safe point\n";
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, text, std::strlen(text));
}

// StopSignals: the first asks the training loop to stop; one within
// kSameStopWindow of it is the same request delivered again (a kill of the
// process group reaches this process and the launcher, mpirun or `timeout`
// that forwards it too), and a signal after that ends the process now.
void record_stop(int sig) {
  const auto now = std::chrono::steady_clock::now();
  if (g_signal.load() == 0) {
    g_first_signal_at = now;
    g_signal = sig;
    acknowledge_stop(sig);
    return;
  }
  if (now - g_first_signal_at >= kSameStopWindow) _exit(128 + sig);
}

// ForwardStopSignals: whoever it sends to stops the job.
void forward(int sig) {
  int none = 0;
  const bool first = g_signal.compare_exchange_strong(none, sig);
  {
    const std::lock_guard<std::mutex> lock(g_forward_mutex);
    if (g_forward) g_forward(sig);
  }
  // After the forwarding: a paused terminal blocks the write, not the stop.
  if (first) acknowledge_stop(sig);
}

// No scope: the signal does what this process's disposition says (SIG_DFL:
// the process ends as if killed by it), delivered to this thread alone. Sent
// while blocked, it stays pending even when ignored, and arrives on unblocking.
void act_on_disposition(int sig) {
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  pthread_kill(pthread_self(), sig);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  pthread_sigmask(SIG_BLOCK, &only, nullptr);
}

void dispatch(const siginfo_t& info) {
  switch (g_mode.load()) {
    case StopSignalMode::stop:
      record_stop(info.si_signo);
      return;
    case StopSignalMode::forward:
      forward(info.si_signo);
      return;
    case StopSignalMode::default_action:
      act_on_disposition(info.si_signo);
      return;
  }
}

[[noreturn]] void watch(sigset_t set) {
  for (;;) {
    siginfo_t info{};
    if (sigwaitinfo(&set, &info) > 0) dispatch(info);
  }
}

StopSignalMode enter(StopSignalMode mode) {
  start_stop_signal_watcher();
  g_signal = 0;
  return g_mode.exchange(mode);
}

}  // namespace

void start_stop_signal_watcher() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = stop_signal_set();
    pthread_sigmask(SIG_BLOCK, &set, &g_mask_before);
    for (std::size_t i = 0; i < std::size(kIgnored); ++i)
      g_ignored_before[i] = std::signal(kIgnored[i], SIG_IGN);
    g_started = true;
    // Lives as long as the process: it only waits in sigwaitinfo and touches
    // atomics, so exit() needs nothing from it and it is not joined.
    std::thread watcher(watch, set);
    pthread_setname_np(watcher.native_handle(), "stop-signals");
    watcher.detach();
  });
}

void restore_signal_mask_before_exec() {
  if (!g_started.load()) return;
  sigprocmask(SIG_SETMASK, &g_mask_before, nullptr);
  for (std::size_t i = 0; i < std::size(kIgnored); ++i)  // ignored stays ignored across exec
    std::signal(kIgnored[i], g_ignored_before[i]);
}

StopSignals::StopSignals() : previous_mode_(enter(StopSignalMode::stop)) {}

StopSignals::~StopSignals() {
  g_mode = previous_mode_;
}

ForwardStopSignals::ForwardStopSignals(std::function<void(int)> send) {
  {
    const std::lock_guard<std::mutex> lock(g_forward_mutex);
    g_forward = std::move(send);
  }
  previous_mode_ = enter(StopSignalMode::forward);
}

ForwardStopSignals::~ForwardStopSignals() {
  g_mode = previous_mode_;
  const std::lock_guard<std::mutex> lock(g_forward_mutex);
  g_forward = nullptr;
}

int stop_requested() {
  return g_signal.load();
}

bool stopped_by_signal_code(int code) {
  return code == 128 + SIGINT || code == 128 + SIGTERM || code == 128 + SIGHUP;
}

}  // namespace trainer::checkpoint
