// The MPI collective: bucketed gradient all-reduce, metric reductions with
// per-rank load-balance windows, barrier, broadcast.
#include "runner/dist/mpi_collective.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runner/graph/program.h"
#include "runner/json_text.h"

namespace trainer::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kStatFields = 4;  // busy, comm wait, data wait, steps

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

MpiCollective::MpiCollective(double timeout_s, double checkpoint_timeout_s)
    : watchdog_(MPI_COMM_WORLD, timeout_s), checkpoint_timeout_s_(checkpoint_timeout_s) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
}

MpiCollective::~MpiCollective() {
  if (attached_) attached_->set_after_backward(nullptr);
}

void MpiCollective::attach(graph::Program& program, std::size_t bucket_bytes) {
  for (const auto& p : program.params())
    if (p.grad_micro) return;  // accumulation: gradients are final only after the last micro-batch
  buckets_ =
      std::make_unique<GradientBuckets>(GradientBuckets::from_program(program, bucket_bytes));
  attached_ = &program;
  program.set_after_backward([this](const graph::Call& call) {
    buckets_->after_backward(call,
                             [this](float* data, std::size_t count) { start_bucket(data, count); });
    watchdog_.poll(pending_);  // MPI progresses only inside MPI calls
  });
}

void MpiCollective::start_bucket(float* data, std::size_t count) {
  if (pending_.empty()) watchdog_.enter();  // the step's gradient reduction starts
  pending_.push_back(MPI_REQUEST_NULL);
  MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                 &pending_.back());
}

void MpiCollective::all_reduce_sum(const std::vector<TensorRef>& tensors) {
  const auto start = Clock::now();
  if (last_sync_end_) window_.busy_s += seconds_between(*last_sync_end_, start);
  if (buckets_ && buckets_->covers(tensors)) {
    buckets_->launch_remaining(
        [this](float* data, std::size_t count) { start_bucket(data, count); });
    watchdog_.wait(pending_, fmt::format("gradient all-reduce of step {}", steps_ + 1));
    pending_.clear();
    buckets_->unpack();
  } else {
    reduce_unbucketed(tensors);
  }
  const auto end = Clock::now();
  window_.comm_wait_s += seconds_between(start, end);
  ++window_.steps;
  ++steps_;
  last_sync_end_ = end;
}

void MpiCollective::note_step_reduced_elsewhere() {
  const auto now = Clock::now();
  if (last_sync_end_) window_.busy_s += seconds_between(*last_sync_end_, now);
  ++window_.steps;
  ++steps_;
  last_sync_end_ = now;
}

void MpiCollective::reduce_unbucketed(const std::vector<TensorRef>& tensors) {
  watchdog_.enter();
  std::vector<MPI_Request> requests;
  for (const auto& t : tensors) {
    requests.push_back(MPI_REQUEST_NULL);
    MPI_Iallreduce(MPI_IN_PLACE, t.data, static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM,
                   MPI_COMM_WORLD, &requests.back());
  }
  watchdog_.wait(requests, fmt::format("gradient all-reduce of step {}", steps_ + 1));
}

void MpiCollective::all_reduce_sum(std::vector<double>& values) {
  // Every rank's values and load-balance window, gathered; summed in rank
  // order so that every rank gets bit-identical sums.
  const std::size_t n = values.size() + kStatFields;
  std::vector<double> mine = values;
  mine.insert(mine.end(), {window_.busy_s, window_.comm_wait_s, window_.data_wait_s,
                           static_cast<double>(window_.steps)});
  std::vector<double> all(n * static_cast<std::size_t>(world_));
  watchdog_.enter();
  std::vector<MPI_Request> request(1, MPI_REQUEST_NULL);
  MPI_Iallgather(mine.data(), static_cast<int>(n), MPI_DOUBLE, all.data(), static_cast<int>(n),
                 MPI_DOUBLE, MPI_COMM_WORLD, &request[0]);
  watchdog_.wait(request, fmt::format("metric reduction after step {}", steps_));
  std::vector<RankWindow> ranks(static_cast<std::size_t>(world_));
  for (std::size_t i = 0; i < values.size(); ++i) {
    double sum = 0;
    for (int r = 0; r < world_; ++r) sum += all[static_cast<std::size_t>(r) * n + i];
    values[i] = sum;
  }
  for (int r = 0; r < world_; ++r) {
    const double* s = all.data() + static_cast<std::size_t>(r) * n + values.size();
    ranks[static_cast<std::size_t>(r)] = {s[0], s[1], s[2], static_cast<std::int64_t>(s[3])};
  }
  window_ = {};
  if (rank_ == 0) report(ranks);
}

void MpiCollective::all_reduce_statistics(std::vector<double>& values) {
  // Gathered and summed in rank order (not MPI_Allreduce, whose order may
  // differ between ranks): every rank gets bit-identical sums.
  const auto n = static_cast<int>(values.size());
  std::vector<double> all(values.size() * static_cast<std::size_t>(world_));
  watchdog_.enter();
  std::vector<MPI_Request> request(1, MPI_REQUEST_NULL);
  MPI_Iallgather(values.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, MPI_COMM_WORLD,
                 &request[0]);
  watchdog_.wait(request, fmt::format("small reduction (batchnorm statistics or the stop "
                                      "flag) at step {}",
                                      steps_ + 1));
  for (std::size_t i = 0; i < values.size(); ++i) {
    double sum = 0;
    for (int r = 0; r < world_; ++r) sum += all[static_cast<std::size_t>(r) * values.size() + i];
    values[i] = sum;
  }
}

void MpiCollective::report(const std::vector<RankWindow>& ranks) {
  if (ranks.empty() || ranks[0].steps == 0) return;
  std::string line =
      fmt::format("[rank 0] ranks after step {}: busy/comm/data ms per step:", steps_);
  nlohmann::json record = {{"step", steps_}, {"ranks", nlohmann::json::array()}};
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankWindow& w = ranks[r];
    line += fmt::format(" r{} {:.1f}/{:.1f}/{:.1f}", r, w.busy_ms_per_step(), w.comm_ms_per_step(),
                        w.data_ms_per_step());
    record["ranks"].push_back({{"rank", r},
                               {"steps", w.steps},
                               {"busy_ms", w.busy_ms_per_step()},
                               {"comm_wait_ms", w.comm_ms_per_step()},
                               {"data_wait_ms", w.data_ms_per_step()}});
  }
  std::printf("%s\n", line.c_str());
  const auto straggler = find_straggler(ranks);
  if (straggler) {
    record["straggler"] = straggler->rank;
    if (straggler->rank != last_straggler_)
      std::fprintf(stderr, "[rank 0] warning: %s\n", describe(*straggler).c_str());
  }
  last_straggler_ = straggler ? straggler->rank : -1;
  std::fflush(stdout);
  if (!report_dir_.empty())
    std::ofstream(report_dir_ + "/ranks.jsonl", std::ios::app) << json_text(record) << '\n';
}

void MpiCollective::barrier() {
  watchdog_.enter();
  std::vector<MPI_Request> request(1, MPI_REQUEST_NULL);
  MPI_Ibarrier(MPI_COMM_WORLD, &request[0]);
  watchdog_.wait(request, "barrier");
}

void MpiCollective::wait_for_checkpoint() {
  watchdog_.enter();
  std::vector<MPI_Request> request(1, MPI_REQUEST_NULL);
  MPI_Ibarrier(MPI_COMM_WORLD, &request[0]);
  // Rank 0 arrives once it has written the checkpoint, which the others
  // allow for; it waits for them as in any collective.
  if (rank_ == 0)
    watchdog_.wait(request, "barrier after rank 0 wrote the checkpoint");
  else
    watchdog_.wait(request, "wait for rank 0 to write the checkpoint", checkpoint_timeout_s_,
                   "TRAINER_CHECKPOINT_TIMEOUT");
}

void MpiCollective::broadcast(void* data, std::size_t bytes) {
  watchdog_.enter();
  std::vector<MPI_Request> request(1, MPI_REQUEST_NULL);
  MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD, &request[0]);
  watchdog_.wait(request, "broadcast");
}

std::vector<std::string> MpiCollective::host_names() {
  constexpr std::size_t kLength = 64;
  char mine[kLength] = {};
  gethostname(mine, kLength - 1);
  std::vector<char> all(kLength * static_cast<std::size_t>(world_));
  watchdog_.enter();
  std::vector<MPI_Request> request(1, MPI_REQUEST_NULL);
  MPI_Iallgather(mine, kLength, MPI_CHAR, all.data(), kLength, MPI_CHAR, MPI_COMM_WORLD,
                 &request[0]);
  watchdog_.wait(request, "host name exchange");
  std::vector<std::string> names;
  for (int r = 0; r < world_; ++r)
    names.emplace_back(all.data() + static_cast<std::size_t>(r) * kLength);
  return names;
}

}  // namespace trainer::dist
