// MpiCollective: the Collective of CPU ranks over MPI_COMM_WORLD. Gradients
// are summed in buckets started during backward (attach()), every wait is
// bounded by the watchdog, and at each log point the ranks' load-balance
// windows are gathered with the metrics: the root logs them, appends them to
// ranks.jsonl in the run directory and warns about a straggler by rank.
// SyncBN's per-channel sums are reduced inside the step, apart from those.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/collective.h"
#include "runner/dist/gradient_buckets.h"
#include "runner/dist/mpi_watchdog.h"
#include "runner/dist/rank_stats.h"

namespace trainer::graph {
class Program;
}

namespace trainer::dist {

class MpiCollective final : public Collective {
 public:
  // MPI must be initialised. `timeout_s` bounds every wait
  // (TRAINER_COLLECTIVE_TIMEOUT), `checkpoint_timeout_s` the wait for the
  // root's checkpoint write (TRAINER_CHECKPOINT_TIMEOUT).
  MpiCollective(double timeout_s, double checkpoint_timeout_s);
  ~MpiCollective() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void all_reduce_sum(const std::vector<TensorRef>& tensors) override;
  void all_reduce_sum(std::vector<double>& values) override;
  void all_reduce_statistics(std::vector<double>& values) override;
  void barrier() override;
  void wait_for_checkpoint() override;
  void note_data_wait(double seconds) override { window_.data_wait_s += seconds; }
  void start_at_step(std::int64_t step) override { steps_ = step; }

  // Starts bucket reductions from `program`'s backward calls (host memory
  // gradients, no accumulation). Without it, all_reduce_sum reduces at the end.
  void attach(graph::Program& program, std::size_t bucket_bytes);
  // The root appends the per-rank windows to `<dir>/ranks.jsonl` (empty: nowhere).
  void set_report_dir(const std::string& dir) { report_dir_ = dir; }

  // Root's bytes to every rank (the NCCL unique id).
  void broadcast(void* data, std::size_t bytes);
  // Every rank's host name, in rank order.
  std::vector<std::string> host_names();
  // The run's optimizer steps so far (from start_at_step on, one a gradient reduction).
  std::int64_t steps() const { return steps_; }
  // A step's gradients were reduced by another collective (NCCL, queued on the
  // GPU): counted in the load-balance window, its time as busy.
  void note_step_reduced_elsewhere();

 private:
  void start_bucket(float* data, std::size_t count);
  void reduce_unbucketed(const std::vector<TensorRef>& tensors);
  void report(const std::vector<RankWindow>& ranks);

  int rank_ = 0, world_ = 1;
  MpiWatchdog watchdog_;
  double checkpoint_timeout_s_;
  std::unique_ptr<GradientBuckets> buckets_;
  graph::Program* attached_ = nullptr;
  std::vector<MPI_Request> pending_;  // bucket reductions in flight
  RankWindow window_;
  std::optional<std::chrono::steady_clock::time_point> last_sync_end_;
  std::int64_t steps_ = 0;
  std::string report_dir_;
  int last_straggler_ = -1;
};

}  // namespace trainer::dist
