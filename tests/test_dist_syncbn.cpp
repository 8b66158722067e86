// labels: cpu
// The CPU SyncBN kernel (batchnorm with sync: true) without a second process:
// alone it equals the plain (oneDNN) batchnorm kernel, forward and backward,
// and its gradients match finite differences; two ranks simulated by two
// threads, each with half the batch, give the full-batch kernel's outputs,
// running statistics and gradients, and do not without the reduction.
#include <catch2/catch.hpp>

#include <barrier>
#include <thread>

#include "ops/collective.h"
#include "tests/op_check.h"
#include "tests/thread_ranks.h"
#include "tests/two_rank_batchnorm.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

OpCase sync_bn(const Shape& x, bool sync) {
  return {"batchnorm", {{"momentum", 0.3}, {"eps", 1e-3}, {"sync", sync}}, {x}};
}

}  // namespace

TEST_CASE("sync batchnorm on one rank equals the plain batchnorm kernel") {
  SingleProcess single;
  for (const Shape& x : std::vector<Shape>{{8, 3, 5, 5}, {16, 6}, {2, 4, 1, 3}}) {
    const std::vector<Collective*> collectives = {nullptr, &single};
    for (Collective* collective : collectives) {
      INFO("x " << to_string(x) << (collective ? ", SingleProcess" : ", no collective"));
      OpRun plain(cpu_backend(), sync_bn(x, false), 5);
      OpRun sync(cpu_backend(), sync_bn(x, true), 5, true, collective);
      REQUIRE(sync.inputs[0].f == plain.inputs[0].f);  // the same data seed
      CHECK_THAT(sync.kernel().implementation(), Catch::Contains("sync_batchnorm[ranks=1]"));
      const auto y_plain = plain.forward(true), y_sync = sync.forward(true);
      check_close(y_sync.f, y_plain.f, 1e-5, 1e-5, "y");
      check_close(sync.params[2].f, plain.params[2].f, 1e-6, 1e-7, "running_mean");
      check_close(sync.params[3].f, plain.params[3].f, 1e-6, 1e-7, "running_var");
      const HostTensor dy = random_like(x, 11);
      const auto g_plain = plain.backward(dy), g_sync = sync.backward(dy);
      check_close(g_sync.inputs[0].f, g_plain.inputs[0].f, 1e-4, 1e-5, "dx");
      check_close(g_sync.params[0].f, g_plain.params[0].f, 1e-5, 1e-5, "dweight");
      check_close(g_sync.params[1].f, g_plain.params[1].f, 1e-5, 1e-5, "dbias");
      // Eval: the running statistics, left alone.
      const auto running_var = sync.params[3].f;
      check_close(sync.forward(false).f, plain.forward(false).f, 1e-5, 1e-5, "eval y");
      CHECK(sync.params[3].f == running_var);
    }
  }
}

TEST_CASE("sync batchnorm gradients match finite differences") {
  for (const Shape& x : std::vector<Shape>{{4, 3, 5, 3}, {7, 5}}) {
    INFO("x " << to_string(x));
    OpRun run(cpu_backend(), sync_bn(x, true));
    check_gradients(run);
  }
}

TEST_CASE("two ranks of half the batch each train like one rank of the whole batch") {
  for (const Shape& x : std::vector<Shape>{{8, 3, 4, 5}, {12, 5}}) {
    INFO("x " << to_string(x));
    const std::int64_t half = x[0] / 2;
    Shape x_half = x;
    x_half[0] = half;
    OpRun whole(cpu_backend(), sync_bn(x, true), 5);
    const std::vector<HostTensor> initial = whole.params;  // before the running statistics move
    // The whole batch's loss is a mean over x[0] rows; each rank's over its
    // half: its incoming gradient is twice the whole batch's (the training
    // loop then averages the ranks' weight gradients).
    const HostTensor dy = random_like(x, 13);
    const auto y = whole.forward(true);
    const auto g = whole.backward(dy);

    for (const bool synced : {true, false}) {
      INFO((synced ? "reduced over both ranks" : "each rank alone"));
      Exchange exchange;
      ThreadRank r0(exchange, 0), r1(exchange, 1);
      std::vector<std::unique_ptr<OpRun>> ranks;
      std::vector<HostTensor> ys(2);
      std::vector<OpRun::Grads> gs(2);
      for (int r = 0; r < 2; ++r) {
        ThreadRank* collective = r == 0 ? &r0 : &r1;
        ranks.push_back(std::make_unique<OpRun>(cpu_backend(), sync_bn(x_half, true), 5, true,
                                                synced ? collective : nullptr));
        ranks[r]->inputs[0] = rows_of(whole.inputs[0], r * half, half);
        ranks[r]->params = initial;
      }
      auto run_rank = [&](int r) {
        ys[r] = ranks[r]->forward(true);
        gs[r] = ranks[r]->backward(rank_gradient(dy, r, half));
      };
      std::thread t1(run_rank, 1);
      run_rank(0);
      t1.join();
      if (synced) CHECK(r0.calls == 2);  // forward statistics, backward sums

      // Without the reduction, per-rank statistics give other outputs (the test can tell).
      check_two_ranks_against_whole(ys, gs, ranks, y, g, whole, synced, {1e-6, 1e-6, 1e-5, 1e-6},
                                    0.5);
    }
  }
}
