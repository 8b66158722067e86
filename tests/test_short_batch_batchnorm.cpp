// labels: cpu
// A short last training batch (data.drop_last: false) with batchnorm, through
// whole runs on the CPU (short_batch_runs.h): 10 samples in batches of 4
// train like 8 in batches of 4 followed by the last 2 as a batch of 2. And
// short_batch_rows says when training meets a short batch, the compiled
// kernels are told so (CUDA's batchnorm then leaves cuDNN, which would count
// the padding rows, for its own kernels over the real rows).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runner/config/load.h"
#include "runner/train/session.h"
#include "runner/train/session_checks.h"
#include "runner/train/trainer.h"
#include "tests/short_batch_runs.h"

using namespace trainer;

TEST_CASE("a short last batch trains batchnorm like a batch of its samples, end to end") {
  testing::short_batch::check_short_batch_trains_like_its_rows("cpu", 1e-4);
}

namespace {

// A session on `samples` synthetic samples with the given train/data settings.
struct Prepared {
  config::Config config;
  train::Session session;
};

Prepared prepare(int samples, const std::string& train,
                 const std::vector<std::string>& overrides = {}) {
  const config::Config c = config::load_config_text(
      "data:\n"
      "  train: {type: synthetic, shape: [3, 4, 4], classes: 3, size: " +
          std::to_string(samples) +
          "}\n"
          "  drop_last: false\n"
          "model:\n"
          "  layers:\n"
          "    - {type: conv2d, name: conv, out_channels: 4, kernel: 3, padding: 1}\n"
          "    - {type: batchnorm, name: bn}\n"
          "    - {type: global_avgpool}\n"
          "    - {type: linear, name: fc, out_features: 3}\n"
          "  loss: {type: cross_entropy}\n"
          "train: " +
          train + "\n",
      "short.yaml", overrides);
  return {c, train::prepare_session(c)};
}

std::int64_t short_rows(int samples, const std::string& train,
                        const std::vector<std::string>& overrides = {}) {
  const Prepared p = prepare(samples, train, overrides);
  return train::short_batch_rows(p.config, p.session);
}

}  // namespace

TEST_CASE("short_batch_rows: the real rows of the short micro-batch training meets") {
  CHECK(short_rows(10, "{batch_size: 4}") == 2);
  CHECK(short_rows(10, "{batch_size: 5}") == 0);
  CHECK(short_rows(10, "{batch_size: 4}", {"data.drop_last=true"}) == 0);
  // Micro-batches of 2 divide the 10 samples.
  CHECK(short_rows(10, "{batch_size: 4, micro_batch_size: 2}") == 0);
  // 10 samples in micro-batches of 3: 3, 3, 3, then 1 real row.
  CHECK(short_rows(10, "{batch_size: 6, micro_batch_size: 3}") == 1);
  CHECK(short_rows(11, "{batch_size: 6, micro_batch_size: 3}") == 2);
  // Two CPU ranks: shards of 5 samples in micro-batches of 2 (2, 2, 1).
  CHECK(short_rows(10, "{batch_size: 4}", {"devices.world_size=2"}) == 1);
}

TEST_CASE("the kernels of a run that meets a short batch are told so") {
  // CUDA's batchnorm then takes its own kernels over the real rows, not cuDNN's.
  CHECK(train::compile_options(prepare(10, "{batch_size: 4}").session).short_batches);
  CHECK_FALSE(train::compile_options(prepare(12, "{batch_size: 4}").session).short_batches);
  CHECK_FALSE(
      train::compile_options(prepare(10, "{batch_size: 4}", {"data.drop_last=true"}).session)
          .short_batches);
}
