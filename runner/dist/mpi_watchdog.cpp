// Timed MPI waits and arrival notices.
#include "runner/dist/mpi_watchdog.h"

#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "runner/dist/mpi_runtime.h"

namespace trainer::dist {
namespace {

constexpr int kNoticeTag = 7;

}  // namespace

MpiWatchdog::MpiWatchdog(MPI_Comm world, double timeout_s) : timeout_s_(timeout_s) {
  MPI_Comm_dup(world, &notices_);
  MPI_Comm_rank(notices_, &rank_);
  MPI_Comm_size(notices_, &world_);
  last_seen_.assign(static_cast<std::size_t>(world_), 0);
  last_heard_.assign(static_cast<std::size_t>(world_), std::chrono::steady_clock::now());
  incoming_.assign(static_cast<std::size_t>(world_), 0);
  receives_.assign(static_cast<std::size_t>(world_), MPI_REQUEST_NULL);
  for (int peer = 0; peer < world_; ++peer)
    if (peer != rank_)
      MPI_Irecv(&incoming_[static_cast<std::size_t>(peer)], 1, MPI_INT64_T, peer, kNoticeTag,
                notices_, &receives_[static_cast<std::size_t>(peer)]);
}

MpiWatchdog::~MpiWatchdog() {
  // After a timeout a notice to a hung peer may never complete: the job ends
  // in MPI_Abort, which frees it all.
  if (timed_out_) return;
  for (auto& r : receives_) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  // Notices are a few bytes, sent eagerly: completing them needs no receiver.
  for (auto& s : sends_) MPI_Wait(&s.request, MPI_STATUS_IGNORE);
  MPI_Comm_free(&notices_);
}

void MpiWatchdog::enter() {
  ++sequence_;
  read_notices();  // keeps the peers' notices from queueing up
  send_notices();
}

void MpiWatchdog::send_notices() {
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    Outgoing out{std::make_unique<std::int64_t>(sequence_), MPI_REQUEST_NULL};
    MPI_Isend(out.value.get(), 1, MPI_INT64_T, peer, kNoticeTag, notices_, &out.request);
    sends_.push_back(std::move(out));
  }
  // Drop completed notices, oldest first.
  while (!sends_.empty()) {
    int done = 0;
    MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    sends_.pop_front();
  }
}

void MpiWatchdog::read_notices() {
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    const auto p = static_cast<std::size_t>(peer);
    for (;;) {
      int done = 0;
      MPI_Test(&receives_[p], &done, MPI_STATUS_IGNORE);
      if (!done) break;
      last_seen_[p] = std::max(last_seen_[p], incoming_[p]);
      last_heard_[p] = std::chrono::steady_clock::now();
      MPI_Irecv(&incoming_[p], 1, MPI_INT64_T, peer, kNoticeTag, notices_, &receives_[p]);
    }
  }
}

void MpiWatchdog::poll(std::vector<MPI_Request>& requests) {
  int done = 0;
  if (!requests.empty())
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
}

void MpiWatchdog::wait(std::vector<MPI_Request>& requests, const std::string& what) {
  wait(requests, what, timeout_s_, "TRAINER_COLLECTIVE_TIMEOUT");
}

void MpiWatchdog::wait(std::vector<MPI_Request>& requests, const std::string& what,
                       double timeout_s, const std::string& setting) {
  using Clock = std::chrono::steady_clock;
  // A gap between two polls this long means this process did not run (it was
  // stopped, or the machine suspended): that time is its own, not a delay of
  // the others, and does not count towards the timeout.
  constexpr double kOwnStallS = 2.0;
  const auto start = Clock::now();
  auto last_poll = start;
  double stalled = 0;
  const double heartbeat_s = std::min(1.0, timeout_s_ / 8);
  double next_heartbeat = heartbeat_s;
  auto pause = std::chrono::microseconds(5);
  for (;;) {
    int done = 0;
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return;
    const auto now = Clock::now();
    if (const double gap = std::chrono::duration<double>(now - last_poll).count();
        gap > kOwnStallS) {
      stalled += gap;
      read_notices();  // what the others said meanwhile
    }
    last_poll = now;
    const double waited = std::chrono::duration<double>(now - start).count() - stalled;
    if (waited > timeout_s) fail(what, waited, timeout_s, setting);
    if (waited > next_heartbeat) {  // still here: tell the peers, hear from them
      send_notices();
      read_notices();
      next_heartbeat = waited + heartbeat_s;
    }
    // Sleep between polls: ranks often share cores with the other ranks' compute.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

void MpiWatchdog::fail(const std::string& what, double waited_s, double timeout_s,
                       const std::string& setting) {
  read_notices();
  std::string missing, silent;
  const auto now = std::chrono::steady_clock::now();
  const double quiet_limit = std::max(2.0, timeout_s_ / 2);
  for (int peer = 0; peer < world_; ++peer) {
    const auto p = static_cast<std::size_t>(peer);
    if (peer == rank_) continue;
    const double quiet = std::chrono::duration<double>(now - last_heard_[p]).count();
    if (last_seen_[p] < sequence_)
      missing += fmt::format("{}rank {} (last reached collective #{})", missing.empty() ? "" : ", ",
                             peer, last_seen_[p]);
    else if (quiet > quiet_limit)
      silent +=
          fmt::format("{}rank {} (silent for {:.0f} s)", silent.empty() ? "" : ", ", peer, quiet);
  }
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::string message = fmt::format(
      "rank {} on {}: the {} (collective #{}) did not complete within {:.0f} s: ", rank_, host,
      what, sequence_, waited_s);
  if (!missing.empty())
    message += missing + " never reached it (dead or hung)";
  else if (!silent.empty())
    message += silent + " reached it but stopped responding (hung)";
  else
    message += "every rank reached it and is alive: the interconnect or MPI is stuck";
  message += fmt::format(". Aborting the job (timeout: {}, {:.0f} s)", setting, timeout_s);
  timed_out_ = true;
  MpiRuntime::end_job_at_exit();  // however the error travels up, the job ends with this process
  throw CollectiveTimeout(message);
}

}  // namespace trainer::dist
