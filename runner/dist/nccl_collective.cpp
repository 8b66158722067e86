// The NCCL collective (CUDA builds only).
#include "runner/dist/nccl_collective.h"

#include <stdexcept>
#include <string>

#ifdef TRAINER_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "runner/dist/mpi_collective.h"
#include "runner/dist/mpi_runtime.h"
#endif

namespace trainer::dist {

#ifdef TRAINER_WITH_CUDA
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(MpiCollective* mpi, Backend& backend, int device, double timeout_s)
      : mpi_(mpi), backend_(backend), timeout_s_(timeout_s) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id{};
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (mpi_) mpi_->broadcast(&id, sizeof id);
    check_nccl(ncclCommInitRank(&comm_, world(), id, rank()), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclCollective() override {
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  int rank() const override { return mpi_ ? mpi_->rank() : 0; }
  int world() const override { return mpi_ ? mpi_->world() : 1; }

  void all_reduce_sum(const std::vector<TensorRef>& tensors) override {
    const auto start = std::chrono::steady_clock::now();
    backend_.synchronize();  // the gradients are written on the backend's stream
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
    wait_stream(start);
  }
  void all_reduce_sum(std::vector<double>& values) override {
    if (mpi_) mpi_->all_reduce_sum(values);
  }
  void all_reduce_statistics(std::vector<double>& values) override {
    if (mpi_) mpi_->all_reduce_statistics(values);
  }
  void barrier() override {
    if (mpi_) mpi_->barrier();
  }
  void note_data_wait(double seconds) override {
    if (mpi_) mpi_->note_data_wait(seconds);
  }

 private:
  // Polls the stream so that a dead or hung peer ends the job instead of hanging it.
  void wait_stream(std::chrono::steady_clock::time_point start) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check_cuda(e, "NCCL all-reduce");
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (async != ncclSuccess || waited > timeout_s_) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        const std::string why = async != ncclSuccess
                                    ? std::string("NCCL reported: ") + ncclGetErrorString(async)
                                    : "it did not complete within " +
                                          std::to_string(static_cast<int>(timeout_s_)) + " s";
        if (!mpi_) throw std::runtime_error("the NCCL gradient all-reduce failed: " + why);
        std::fprintf(stderr,
                     "error: rank %d: the NCCL gradient all-reduce failed: %s. Aborting the job\n",
                     rank(), why.c_str());
        MpiRuntime::abort_job(1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  MpiCollective* mpi_;
  Backend& backend_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Collective> make_nccl_collective(MpiCollective* mpi, Backend& backend, int device,
                                                 double timeout_s) {
  return std::make_unique<NcclCollective>(mpi, backend, device, timeout_s);
}

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

#else

std::unique_ptr<Collective> make_nccl_collective(MpiCollective*, Backend&, int, double) {
  throw std::runtime_error("this build of trainer has no CUDA backend, so NCCL cannot be used");
}

std::string nccl_version() {
  return {};
}

#endif

}  // namespace trainer::dist
