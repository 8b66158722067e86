// SIGINT / SIGTERM / SIGHUP as a request to stop, received by one thread that
// runs no kernels.
//
// No handler for them is ever installed: a handler runs on whichever thread
// the kernel picks, and oneDNN 2.x JIT GEMM kernels point rsp into a heap
// buffer while they run, so a signal frame pushed onto such a thread corrupts
// the heap. Instead start_stop_signal_watcher(), called first thing in main()
// before any thread exists, blocks these signals (every thread started later:
// OpenMP, data loader, MPI, logging, inherits the mask) and starts one
// watcher thread that takes them with sigwaitinfo. What a signal does depends
// on the scope active when it arrives:
//   - StopSignals: the first is recorded (stop_requested()); the training loop
//     finishes its step, writes a checkpoint and exits with 128 + signal
//     (130 / 143 / 129). A second signal of any of them, kSameStopWindow or more
//     after the first, ends the process at once (_exit(128 + signal)); one
//     sooner is the same stop delivered again (a kill of the process group
//     reaches a rank directly and through mpirun, or `timeout`, forwarding it).
//   - ForwardStopSignals(send): each is handed to `send` (the launcher sends
//     it on to the ranks, which stop the job); the first is recorded.
//   - neither: what it would do unblocked (the disposition this process has:
//     terminate as if killed by it, be ignored, or run a handler someone
//     installed), acted out on the watcher thread.
// SIGHUP (a closed terminal or SSH session) is one of them unless the process
// started with it ignored (`nohup`), which it then stays. SIGPIPE and SIGXFSZ
// are ignored from then on: a console that goes away (`trainer run ... |
// head`) or a file size limit reached (`ulimit -f`) makes writes fail, with
// an error the run records, rather than end the run unrecorded. All other
// signals are left as they are. A child this process starts calls
// restore_signal_mask_before_exec() between fork() and exec so the program it
// runs gets the mask (and SIGPIPE, SIGXFSZ) this process began with.
#pragma once

#include <chrono>
#include <functional>

namespace trainer::checkpoint {

// Signals this close to the first one of a StopSignals scope are that stop
// delivered again; later ones end the process.
inline constexpr std::chrono::milliseconds kSameStopWindow{1000};

// What the watcher does with the stop signals (the scopes below set it).
enum class StopSignalMode { default_action, stop, forward };

// Blocks the stop signals in the calling thread and starts the watcher
// thread (once; later calls do nothing). main() calls it before anything
// else; StopSignals calls it too, for a program (a test) whose main did not,
// where threads started before it keep the signals unblocked.
void start_stop_signal_watcher();

// Sets the calling thread's signal mask back to what it was before
// start_stop_signal_watcher() (nothing when it was never called).
// Async-signal-safe: for the child between fork() and exec.
void restore_signal_mask_before_exec();

// While alive, the stop signals are stop requests (see above).
class StopSignals {
 public:
  StopSignals();   // clears the request recorded before
  ~StopSignals();  // back to what the signals did before
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  StopSignalMode previous_mode_;
};

// While alive, the stop signals are handed to `send`, on the watcher thread
// (see above).
class ForwardStopSignals {
 public:
  explicit ForwardStopSignals(std::function<void(int)> send);  // clears the recorded request
  ~ForwardStopSignals();  // back to what the signals did before
  ForwardStopSignals(const ForwardStopSignals&) = delete;
  ForwardStopSignals& operator=(const ForwardStopSignals&) = delete;

 private:
  StopSignalMode previous_mode_;
};

// The first signal received within the latest StopSignals or
// ForwardStopSignals scope (0: none).
int stop_requested();

// Whether `code` is the exit code of a process (a trainer run) that a stop
// signal stopped: 128 + SIGINT, SIGTERM or SIGHUP.
bool stopped_by_signal_code(int code);

}  // namespace trainer::checkpoint
