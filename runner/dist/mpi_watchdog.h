// MpiWatchdog: every MPI wait of the data-parallel job goes through it. It
// polls the pending requests until they complete or the timeout passes; on a
// timeout it names the ranks that never reached this collective and throws
// CollectiveTimeout (the run records it; the job is aborted as this process
// exits), so a dead or hung rank never leaves the others waiting silently.
//
// To know who is missing, each rank announces every collective it enters to
// its peers with a tiny message on a private communicator ("arrival notices");
// a rank waiting in a collective repeats its notice as a heartbeat. A
// timed-out rank reports the peers whose last notice is older (never reached
// the collective) and those it has not heard from for a while (reached it, then
// hung or stopped).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::dist {

// A wait that timed out, naming the ranks to blame. The process that throws
// it has marked the job to be aborted when it exits (MpiRuntime), after the
// run has written it into summary.json and train.log.
class CollectiveTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class MpiWatchdog {
 public:
  // `timeout_s`: TRAINER_COLLECTIVE_TIMEOUT, the limit of every wait unless
  // a wait names its own.
  MpiWatchdog(MPI_Comm world, double timeout_s);
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  // Marks the start of the next collective (announced to the peers).
  void enter();
  // Waits for every request; on timeout throws CollectiveTimeout saying who is missing.
  void wait(std::vector<MPI_Request>& requests, const std::string& what);
  // The same under another limit, `setting` naming where it comes from.
  void wait(std::vector<MPI_Request>& requests, const std::string& what, double timeout_s,
            const std::string& setting);
  // Advances MPI progress without waiting (called between backward calls).
  void poll(std::vector<MPI_Request>& requests);

  double timeout_s() const { return timeout_s_; }
  std::int64_t sequence() const { return sequence_; }

 private:
  void read_notices();
  void send_notices();
  [[noreturn]] void fail(const std::string& what, double waited_s, double timeout_s,
                         const std::string& setting);

  MPI_Comm notices_ = MPI_COMM_NULL;  // duplicate of the world communicator
  bool timed_out_ = false;            // the job is being aborted: nothing more to complete
  int rank_ = 0, world_ = 1;
  double timeout_s_;
  std::int64_t sequence_ = 0;            // collectives this rank has entered
  std::vector<std::int64_t> last_seen_;  // per peer: the last collective it announced
  std::vector<std::chrono::steady_clock::time_point> last_heard_;  // per peer: its last notice
  std::vector<std::int64_t> incoming_;                             // receive buffers, one per peer
  std::vector<MPI_Request> receives_;                              // one posted receive per peer
  struct Outgoing {
    std::unique_ptr<std::int64_t> value;
    MPI_Request request;
  };
  std::deque<Outgoing> sends_;
};

}  // namespace trainer::dist
