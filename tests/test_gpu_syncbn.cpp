// labels: gpu
// SyncBN on a GPU (batchnorm with sync: true over several ranks: the own
// kernels of ops/cuda/batchnorm_rows.cu) without a second GPU: two ranks
// simulated by two threads on GPU 0, each with half the batch, their device
// sums added through the host, give the outputs, running statistics and
// gradients of the CPU's SyncBN kernel on the whole batch, and do not without
// the reduction. The threads take turns on the GPU (one lock, let go while a
// rank waits for the other's sums), so the backend is never used by both at
// once. Skipped with the reason on a machine without a GPU.
#include <catch2/catch.hpp>

#include <atomic>
#include <barrier>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gpu_skip.h"
#include "ops/collective.h"
#include "tests/op_check.h"
#include "tests/two_rank_batchnorm.h"

#ifdef TRAINER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "ops/cuda/cuda_backend.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

// Two ranks in one process on one GPU. A rank holds `gpu` while it works; in a
// reduction it copies its sums out, lets the other rank work until both have
// given theirs, and copies the total back in rank order.
struct TwoRanks {
  std::mutex gpu;
  std::barrier<> meet{2};
  std::vector<double> slot[2];
  std::atomic<bool> failed{false};  // a rank threw: it left `meet`, the other must not wait on it
};

class DeviceThreadRank final : public Collective {
 public:
  DeviceThreadRank(TwoRanks& ranks, int rank) : ranks_(ranks), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return 2; }
  void all_reduce_sum(const std::vector<TensorRef>&) override {}
  void all_reduce_sum(std::vector<double>&) override {}
  void all_reduce_statistics(std::vector<double>&) override {}
  // Called with `gpu` held by this rank's thread.
  void all_reduce_device_statistics(double* values, std::size_t count) override {
    ++calls;
    std::vector<double>& mine = ranks_.slot[rank_];
    mine.resize(count);
    // The sums queued before this call. (No test macros here: this runs on
    // the ranks' threads; the test reads `cuda_errors` after joining them.)
    cuda_errors += cudaDeviceSynchronize() != cudaSuccess;
    cuda_errors += cudaMemcpy(mine.data(), values, count * sizeof(double),
                              cudaMemcpyDeviceToHost) != cudaSuccess;
    ranks_.gpu.unlock();
    ranks_.meet.arrive_and_wait();
    std::vector<double> total(count);
    for (std::size_t i = 0; i < count; ++i) total[i] = ranks_.slot[0][i] + ranks_.slot[1][i];
    ranks_.meet.arrive_and_wait();  // both have read the slots
    ranks_.gpu.lock();
    if (ranks_.failed) throw std::runtime_error("the other rank failed");
    // From pageable memory the copy may return before its DMA lands; the
    // compute stream, which does not wait for the legacy one, reads it next.
    cuda_errors += cudaMemcpy(values, total.data(), count * sizeof(double),
                              cudaMemcpyHostToDevice) != cudaSuccess;
    cuda_errors += cudaDeviceSynchronize() != cudaSuccess;
  }
  void barrier() override { ranks_.meet.arrive_and_wait(); }
  int calls = 0;
  int cuda_errors = 0;

 private:
  TwoRanks& ranks_;
  int rank_;
};

OpCase sync_bn(const Shape& x, bool relu) {
  return {"batchnorm",
          {{"momentum", 0.3},
           {"eps", 1e-3},
           {"sync", true},
           {"activation", std::string(relu ? "relu" : "none")}},
          {x}};
}

}  // namespace

TEST_CASE("CUDA SyncBN: two ranks of half the batch train like the CPU's one rank of the whole") {
  for (const Shape& x : std::vector<Shape>{{8, 3, 4, 5}, {12, 5}, {64, 4, 12, 12}}) {
    for (const bool relu : {false, true}) {
      INFO("x " << to_string(x) << (relu ? " with relu" : ""));
      const std::int64_t half = x[0] / 2;
      Shape x_half = x;
      x_half[0] = half;
      OpRun whole(cpu_backend(), sync_bn(x, relu), 5);  // the CPU's SyncBN kernel, one rank
      const std::vector<HostTensor> initial = whole.params;
      // Each rank's loss is the mean over its half: its incoming gradient is
      // twice the whole batch's, and the ranks' weight gradients are averaged.
      const HostTensor dy = random_like(x, 13);
      const auto y = whole.forward(true);
      const auto g = whole.backward(dy);

      for (const bool synced : {true, false}) {
        INFO((synced ? "reduced over both ranks" : "each rank alone"));
        TwoRanks two;
        DeviceThreadRank r0(two, 0), r1(two, 1);
        std::vector<std::unique_ptr<OpRun>> ranks;
        std::vector<HostTensor> ys(2);
        std::vector<OpRun::Grads> gs(2);
        for (int r = 0; r < 2; ++r) {
          DeviceThreadRank* collective = r == 0 ? &r0 : &r1;
          ranks.push_back(std::make_unique<OpRun>(cuda_backend(0), sync_bn(x_half, relu), 5, true,
                                                  synced ? collective : nullptr));
          ranks[r]->inputs[0] = rows_of(whole.inputs[0], r * half, half);
          ranks[r]->params = initial;
        }
        if (synced) CHECK_THAT(ranks[0]->kernel().implementation(), Catch::Contains("ranks=2"));
        std::exception_ptr failed[2];
        auto run_rank = [&](int r) {
          try {
            std::lock_guard<std::mutex> hold(two.gpu);
            ys[r] = ranks[r]->forward(true);
            gs[r] = ranks[r]->backward(rank_gradient(dy, r, half));
          } catch (...) {
            failed[r] = std::current_exception();
            if (!two.failed.exchange(true)) two.meet.arrive_and_drop();
          }
        };
        std::thread t1(run_rank, 1);
        run_rank(0);
        t1.join();
        for (const auto& f : failed)
          if (f) std::rethrow_exception(f);
        CHECK(r0.cuda_errors + r1.cuda_errors == 0);
        if (synced) {
          CHECK(r0.calls == 2);  // forward statistics, backward sums
          CHECK(r1.calls == 2);
        }

        check_two_ranks_against_whole(ys, gs, ranks, y, g, whole, synced, {1e-5, 1e-5, 1e-4, 1e-5},
                                      0.25);
      }
    }
  }
}

#endif  // TRAINER_WITH_CUDA
