// Joining the job, choosing the collective, recording the job.
#include "runner/dist/rank_job.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/durable_file.h"
#include "runner/config/fields.h"
#include "runner/dist/mpi_collective.h"
#include "runner/dist/mpi_runtime.h"
#include "runner/dist/nccl_collective.h"
#include "runner/dist/rank_config.h"
#include "runner/graph/program.h"
#include "runner/json_text.h"
#include "runner/train/devices.h"
#include "runner/usage_error.h"
#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/device_report.h"
#endif

namespace trainer::dist {
namespace {

double env_number(const char* name, double fallback, double minimum) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= minimum))
    throw UsageError(std::string("the environment variable ") + name + "=\"" + text +
                     "\" is not a number >= " + config::format_number(minimum) +
                     ": set it to one, or unset it for its default " +
                     config::format_number(fallback));
  return v;
}

bool uses_gpus(const config::Config& c) {
  return !c.devices.on_cpu();
}

// How many GPUs this process sees (-1: no CUDA in this build).
int visible_gpu_count() {
#ifdef TRAINER_WITH_CUDA
  return static_cast<int>(cuda::cuda_report(cuda::GpuQuery::properties).gpus.size());
#else
  return -1;
#endif
}

}  // namespace

RankJob::RankJob(const config::Config& loaded) : env_(detect_launch_env()) {
  timeout_s_ = env_number("TRAINER_COLLECTIVE_TIMEOUT", 300, 1);
  checkpoint_timeout_s_ = env_number("TRAINER_CHECKPOINT_TIMEOUT", 3600, 1);
  bucket_bytes_ = static_cast<std::size_t>(env_number("TRAINER_BUCKET_MB", 25, 0) * (1 << 20));
  RankPlace place;
  if (env_) place = {env_->rank, env_->world, env_->local_rank, env_->local_world};
  if (uses_gpus(loaded) && place.world > 1) place.visible_gpus = visible_gpu_count();
  gpu_bound_by_launcher_ = launcher_bound_gpu(loaded, place);
  lr_base_ = loaded.optimizer.lr;
  config_ = rank_config(loaded, place);
  place_ = {place.rank, place.world, place.local_rank};
  if (place.world > 1) {
    mpi_runtime_ = std::make_unique<MpiRuntime>();
    mpi_ = std::make_unique<MpiCollective>(timeout_s_, checkpoint_timeout_s_);
    if (mpi_->world() != place.world || mpi_->rank() != place.rank)
      throw std::runtime_error("the launcher's environment says rank " +
                               std::to_string(place.rank) + " of " + std::to_string(place.world) +
                               " but MPI says rank " + std::to_string(mpi_->rank()) + " of " +
                               std::to_string(mpi_->world()));
  }
}

RankJob::~RankJob() {
  // A rank leaving on an error, or one that failed and returns: the job is
  // aborted as this process exits (MpiRuntime), and tearing the collectives
  // down could wait on a hung peer (ncclCommDestroy, a notice in flight), so
  // they are left to the abort.
  if (mpi_runtime_ && (std::uncaught_exceptions() > 0 || MpiRuntime::job_ending())) {
    MpiRuntime::end_job_at_exit();
    static_cast<void>(nccl_.release());
    static_cast<void>(mpi_.release());
    return;
  }
  nccl_.reset();
  mpi_.reset();  // before MPI_Finalize
}

Backend& RankJob::select_backend() {
  Backend& backend = train::select_backend(config_);
  if (uses_gpus(config_) && place_.world > 1)
    nccl_ = make_nccl_collective(mpi_.get(), static_cast<int>(config_.devices.gpus.front()),
                                 timeout_s_);
  return backend;
}

void RankJob::end_job_at_exit() {
  if (mpi_runtime_) MpiRuntime::end_job_at_exit();
}

Collective& RankJob::collective() {
  if (nccl_) return *nccl_;
  if (mpi_) return *mpi_;
  return single_;
}

void RankJob::attach(graph::Program& program, const std::string& run_dir) {
  if (place_.world <= 1) {
    // A run that trained on several ranks, resumed on one: once it trains,
    // its record says how this part runs, not how the last one ran.
    job_record_ = json_text(nlohmann::json{{"world", 1},
                                           {"launcher", "none"},
                                           {"collective", "none"},
                                           {"lr_scaling", config_.optimizer.lr_scaling},
                                           {"lr_base", lr_base_},
                                           {"lr_factor", 1.0},
                                           {"lr", config_.optimizer.lr}},
                            2) +
                  "\n";
    return;
  }
  const bool overlap = !nccl_;
  if (overlap) mpi_->attach(program, bucket_bytes_);
  const auto hosts = mpi_->host_names();
  if (!is_root()) return;
  mpi_->set_report_dir(run_dir);
  const double factor = lr_scale_factor(config_.optimizer.lr_scaling, place_.world);
  nlohmann::json record = {
      {"world", place_.world},
      {"launcher", env_ ? env_->launcher : "none"},
      {"collective", nccl_ ? "nccl" : "mpi"},
      {"nccl", nccl_ ? nlohmann::json(nccl_version()) : nlohmann::json()},
      {"hosts", hosts},
      {"lr_scaling", config_.optimizer.lr_scaling},
      {"lr_base", lr_base_},
      {"lr_factor", factor},
      {"lr", config_.optimizer.lr},
      {"bucket_bytes", overlap ? bucket_bytes_ : 0},
      {"overlap_backward", overlap},
      {"collective_timeout_s", timeout_s_},
      {"checkpoint_timeout_s", checkpoint_timeout_s_},
      {"threads_per_rank", config_.backend.threads},
  };
  // Which GPU a rank uses: devices[local rank], or the one its launcher bound to it.
  if (nccl_) record["gpu_binding"] = gpu_bound_by_launcher_ ? "launcher" : "devices list";
  job_record_ = json_text(record, 2) + "\n";
  std::printf(
      "[rank 0] data-parallel: %d ranks (%s, %s collectives), lr %g x %g (lr_scaling %s) = %g\n",
      place_.world, env_ ? env_->launcher.c_str() : "none", nccl_ ? "NCCL" : "MPI", lr_base_,
      factor, config_.optimizer.lr_scaling.c_str(), config_.optimizer.lr);
  std::fflush(stdout);
}

void RankJob::record_job(const std::string& run_dir) const {
  if (!is_root() || job_record_.empty()) return;
  const std::string path = run_dir + "/distributed.json";
  std::error_code ec;
  // A single process records itself only over an earlier part's record.
  if (place_.world <= 1 && !std::filesystem::exists(path, ec)) return;
  checkpoint::write_file_atomically(path, job_record_);
}

}  // namespace trainer::dist
