// RankJob: how `trainer run` takes part in a data-parallel job. A process a
// launcher started (mpirun, srun, or trainer's own local launcher) joins the
// MPI job and trains its shard with MPI (CPU) or NCCL (GPU) collectives; a
// process started alone is a single rank. The root rank records the job in
// `distributed.json` in the run directory.
//
// Settings from the environment: TRAINER_COLLECTIVE_TIMEOUT (seconds a rank
// waits in a collective before it names the missing ranks and aborts the job;
// default 300), TRAINER_CHECKPOINT_TIMEOUT (seconds the other ranks wait while
// the root writes a checkpoint; default 3600) and TRAINER_BUCKET_MB (gradient
// bucket size; default 25).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ops/collective.h"
#include "ops/kernel.h"
#include "runner/config/config.h"
#include "runner/dist/launch_env.h"

namespace trainer::graph {
class Program;
}

namespace trainer::dist {

class MpiRuntime;
class MpiCollective;

class RankJob {
 public:
  explicit RankJob(const config::Config& loaded);
  ~RankJob();
  RankJob(const RankJob&) = delete;
  RankJob& operator=(const RankJob&) = delete;

  // The config this rank trains with (world size, scaled lr, its GPU first).
  const config::Config& config() const { return config_; }
  bool is_root() const { return place_.rank == 0; }
  // The backend of this rank's device (and the NCCL communicator on GPUs).
  Backend& select_backend();
  // Overlaps gradient reduction with backward, and has the ranks' reports
  // written to `run_dir` (root).
  void attach(graph::Program& program, const std::string& run_dir);
  // Records the job in `run_dir`'s distributed.json (root), once the run
  // writes its directory: a job of several ranks, or one rank resuming a run
  // that had several (after attach).
  void record_job(const std::string& run_dir) const;
  Collective& collective();
  // The gradient bucket size (TRAINER_BUCKET_MB), which every rank must share.
  std::size_t bucket_bytes() const { return bucket_bytes_; }
  // This rank failed and returns normally: at exit it ends the whole job
  // (MPI_Abort) instead of finalising, which would wait for the other ranks
  // while they wait for it. Nothing to do for a single process.
  void end_job_at_exit();

 private:
  config::Config config_;
  std::optional<LaunchEnv> env_;
  struct Place {
    int rank = 0, world = 1, local_rank = 0;
  } place_;
  double timeout_s_ = 300;
  double checkpoint_timeout_s_ = 3600;
  bool gpu_bound_by_launcher_ = false;
  std::size_t bucket_bytes_ = 25u << 20;
  std::string job_record_;  // distributed.json's text (attach)
  double lr_base_ = 0;
  std::unique_ptr<MpiRuntime> mpi_runtime_;
  std::unique_ptr<MpiCollective> mpi_;
  std::unique_ptr<Collective> nccl_;
  SingleProcess single_;
};

}  // namespace trainer::dist
