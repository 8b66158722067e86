// The NCCL collective (CUDA builds only).
#include "runner/dist/nccl_collective.h"

#include <stdexcept>
#include <string>

#ifdef TRAINER_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "ops/cuda/cuda_backend.h"
#include "runner/dist/mpi_collective.h"
#include "runner/error_report.h"
#endif

namespace trainer::dist {

#ifdef TRAINER_WITH_CUDA
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

// The gradient all-reduce runs on the backend's compute stream, in order
// between the backward that wrote the gradients and the update that reads
// them: the host queues it and goes on, with no device synchronisation. A
// watchdog thread follows each reduction's completion event, and after each
// step the step's queued work (SyncBN reduces inside it), so that a dead or
// hung peer ends the job (with the reason) instead of hanging it.
class NcclCollective final : public Collective {
 public:
  NcclCollective(MpiCollective* mpi, int device, double timeout_s)
      : mpi_(mpi), device_(device), stream_(cuda_compute_stream(device)), timeout_s_(timeout_s) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id{};
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (mpi_) {
      mpi_->broadcast(&id, sizeof id);
      // ncclCommInitRank waits for every rank with no timeout of its own:
      // meet here first, where a missing rank is named after the timeout.
      mpi_->barrier();
    }
    check_nccl(ncclCommInitRank(&comm_, world(), id, rank()), "ncclCommInitRank");
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclCollective() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    watchdog_.join();
    for (const auto& p : pending_) cudaEventDestroy(p.done);
    if (comm_) ncclCommDestroy(comm_);
  }
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  int rank() const override { return mpi_ ? mpi_->rank() : 0; }
  int world() const override { return mpi_ ? mpi_->world() : 1; }

  void all_reduce_sum(const std::vector<TensorRef>& tensors) override {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    try {
      for (const auto& t : tensors)
        check_nccl(ncclAllReduce(t.data, t.data, static_cast<std::size_t>(t.numel()), ncclFloat,
                                 ncclSum, comm_, stream_),
                   "ncclAllReduce");
    } catch (...) {
      ncclGroupEnd();  // leave no group open behind the error
      throw;
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    watch_queued_work();
    if (mpi_) mpi_->note_step_reduced_elsewhere();  // the ranks' load-balance reports
  }
  void all_reduce_sum(std::vector<double>& values) override {
    if (mpi_) mpi_->all_reduce_sum(values);
  }
  void all_reduce_statistics(std::vector<double>& values) override {
    if (mpi_) mpi_->all_reduce_statistics(values);
  }
  // SyncBN's sums, inside the step on the compute stream (and inside its
  // recording): the watchdog follows them through watch_queued_work.
  void all_reduce_device_statistics(double* values, std::size_t count) override {
    check_nccl(ncclAllReduce(values, values, count, ncclDouble, ncclSum, comm_, stream_),
               "ncclAllReduce(batchnorm statistics)");
  }
  void barrier() override {
    if (mpi_) mpi_->barrier();
  }
  // The watchdog follows everything queued on the compute stream so far.
  void watch_queued_work() override {
    cudaEvent_t done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(done, stream_), "cudaEventRecord");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back({done, std::chrono::steady_clock::now()});
    }
    changed_.notify_all();
  }
  // The host waits over MPI; no reduction is pending then (the step before
  // the checkpoint was reduced on every rank before the root read it back).
  void wait_for_checkpoint() override {
    if (mpi_) mpi_->wait_for_checkpoint();
  }
  void start_at_step(std::int64_t step) override {
    if (mpi_) mpi_->start_at_step(step);
  }
  void note_data_wait(double seconds) override {
    if (mpi_) mpi_->note_data_wait(seconds);
  }

 private:
  struct Pending {
    cudaEvent_t done;  // recorded after the reduction
    std::chrono::steady_clock::time_point queued;
  };

  // The watchdog: waits for each queued reduction in turn; one that NCCL
  // reports failed, or that has not completed within the timeout, ends the job.
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, nothing left to follow
      const Pending p = pending_.front();
      lock.unlock();
      const cudaError_t e = cudaEventQuery(p.done);
      std::string failure;
      if (e != cudaSuccess && e != cudaErrorNotReady)
        failure =
            std::string("the GPU reported ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess)
        failure = std::string("NCCL reported: ") + ncclGetErrorString(async);
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - p.queued).count();
      if (failure.empty() && e == cudaErrorNotReady && waited > timeout_s_)
        failure =
            "it did not complete within " + std::to_string(static_cast<int>(timeout_s_)) + " s";
      if (!failure.empty()) end_job(failure);
      lock.lock();
      if (e == cudaSuccess) {
        cudaEventDestroy(p.done);
        pending_.pop_front();
      } else {  // also when stopping: the comm is destroyed after the last reduction
        // Soon for a reduction just queued, then less often (a twentieth of
        // its wait so far, at most 10 ms): each poll is two driver calls.
        changed_.wait_for(lock, std::chrono::duration<double>(std::clamp(waited / 20, 2e-4, 1e-2)));
      }
    }
  }

  // Breaks the hung reduction and ends this process. This runs on the
  // watchdog thread, and MPI was started for the main thread's calls only
  // (MPI_THREAD_FUNNELED), so no MPI_Abort here: a rank that exits without
  // finalising makes the launcher end the job.
  [[noreturn]] void end_job(const std::string& why) {
    ncclCommAbort(comm_);
    print_error_report("error: an NCCL reduction (gradients, or SyncBN's sums) failed: " + why +
                       ". " + (mpi_ ? "Ending this rank (the launcher ends the job)" : "Stopping") +
                       "\n");
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }

  MpiCollective* mpi_;
  int device_;
  cudaStream_t stream_;  // the backend's compute stream
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Pending> pending_;  // reductions queued and not yet seen complete
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Collective> make_nccl_collective(MpiCollective* mpi, int device, double timeout_s) {
  return std::make_unique<NcclCollective>(mpi, device, timeout_s);
}

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

#else

std::unique_ptr<Collective> make_nccl_collective(MpiCollective*, int, double) {
  throw std::runtime_error("this build of trainer has no CUDA backend, so NCCL cannot be used");
}

std::string nccl_version() {
  return {};
}

#endif

}  // namespace trainer::dist
