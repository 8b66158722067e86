// OutputForwarder: a child's stdout and stderr through pipes that this
// process reads and copies to its own. A console that goes away (`| head`)
// then ends the copying, not the child: mpirun aborts the whole job when a
// write to its own stdout fails (EPIPE), killing the ranks mid-checkpoint.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace trainer::dist {

class OutputForwarder {
 public:
  OutputForwarder();  // the pipes; throws std::runtime_error when they cannot be made
  ~OutputForwarder();
  OutputForwarder(const OutputForwarder&) = delete;
  OutputForwarder& operator=(const OutputForwarder&) = delete;

  // In the child, between fork and exec: the pipes become its stdout and
  // stderr (async-signal-safe calls only).
  void attach_child() const;
  // In the parent, after fork: closes the child's ends and starts copying.
  void start();
  // Once the child has ended: copies what is left, until every writer has
  // closed its end, or (once `grace` has passed) nothing is left to read,
  // and at most a minute past `grace`.
  void finish(std::chrono::milliseconds grace);

 private:
  void copy();

  int out_[2] = {-1, -1};  // [read, write]
  int err_[2] = {-1, -1};
  std::atomic<std::chrono::steady_clock::rep> deadline_{0};  // 0: none yet
  std::thread thread_;
};

}  // namespace trainer::dist
