// labels: cpu train
// Gradient accumulation trains like one batch of the same samples: with
// data.drop_last: false the epoch's last, short step runs the micro-batches
// that are left (none is skipped; a training set smaller than one batch is one
// such step), with drop_last: true a partial global batch
// is dropped, a run stopped inside an epoch after such a step resumes exactly,
// and with the loss's ignore_index a micro-batch counts by its rows that are
// not ignored. Runs compare per-step losses and the final weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_resume_fixtures.h"
#include "test_training_comparison.h"

using namespace trainer::testing;
namespace checkpoint = trainer::checkpoint;

namespace {

// SGD with momentum and a constant rate: runs that agree on the gradients
// agree on the weights to float rounding; every step logged.
const std::vector<std::string> kPlainSgd = {"optimizer.type=sgd",     "optimizer.lr=0.1",
                                            "optimizer.momentum=0.9", "schedule.type=constant",
                                            "train.log_every=1",      "checkpoint.every_steps=0"};

// Trains `name` under tmp with kPlainSgd, `common` and `extra`; returns the run directory.
std::string train_run(const TempDir& tmp, const std::string& name,
                      const std::vector<std::string>& common,
                      const std::vector<std::string>& extra = {}) {
  return train_tiny(tmp, name, {kPlainSgd, common, extra});
}

}  // namespace

TEST_CASE("drop_last: false: the epoch's short last step runs the micro-batches left") {
  // 100 samples, batch 32: 4 steps per epoch (32, 32, 32, 4 samples). As
  // micro-batches of 16 (7 per epoch) the last step is one micro-batch of 4;
  // of 8 (13 per epoch), one of 4 too.
  TempDir tmp("acc-short-step");
  write_text(tmp / "tiny.yaml", tiny_experiment(100));
  const std::vector<std::string> common = {"data.drop_last=false", "train.epochs=2"};
  const std::string whole = train_run(tmp, "whole", common);
  const std::string acc2 = train_run(tmp, "acc2", common, {"train.micro_batch_size=16"});
  const std::string acc4 = train_run(tmp, "acc4", common, {"train.micro_batch_size=8"});
  CHECK(steps_of(whole) == 8);
  CHECK(steps_of(acc2) == 8);
  CHECK(steps_of(acc4) == 8);
  CHECK(read_text(tmp / "acc2.log").find("training 8 steps (4 per epoch)") != std::string::npos);
  check_same_training(whole, acc2);
  check_same_training(whole, acc4);
}

TEST_CASE("drop_last: false trains a training set smaller than one batch, in one short step") {
  // 20 samples, batch 64 as micro-batches of 16: one step of two micro-batches
  // (16 and 4 samples) an epoch, like one batch of the 20.
  TempDir tmp("acc-small-set");
  write_text(tmp / "tiny.yaml", tiny_experiment(20));
  const std::vector<std::string> common = {"data.drop_last=false", "train.epochs=3",
                                           "train.batch_size=64"};
  const std::string whole = train_run(tmp, "whole", common);
  const std::string acc4 = train_run(tmp, "acc4", common, {"train.micro_batch_size=16"});
  CHECK(steps_of(acc4) == 3);
  check_same_training(whole, acc4);
}

TEST_CASE("drop_last: true drops a partial global batch, also with accumulation") {
  // 100 samples, batch 40: 2 steps per epoch. As micro-batches of 20 the
  // loader gives 5, and the fifth (no whole step) is dropped.
  TempDir tmp("acc-drop-last");
  write_text(tmp / "tiny.yaml", tiny_experiment(100));
  const std::vector<std::string> common = {"data.drop_last=true", "train.epochs=2",
                                           "train.batch_size=40"};
  const std::string whole = train_run(tmp, "whole", common);
  const std::string acc2 = train_run(tmp, "acc2", common, {"train.micro_batch_size=20"});
  CHECK(steps_of(whole) == 4);
  CHECK(steps_of(acc2) == 4);
  check_same_training(whole, acc2);
}

TEST_CASE("a run stopped inside an epoch after a short last step resumes exactly") {
  // 4 steps per epoch, the fourth one micro-batch of 4 samples; the cut at
  // step 7 is inside epoch 1, inside a logging window of 5.
  TempDir tmp("acc-short-resume");
  write_text(tmp / "tiny.yaml", tiny_experiment(100));
  const std::vector<std::string> overrides = {"data.drop_last=false", "train.micro_batch_size=16",
                                              "schedule.type=constant"};
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "full", overrides), tmp / "f.log") == 0);
  std::vector<std::string> cut = overrides;
  cut.push_back("train.max_steps=7");
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "part", cut), tmp / "p.log") == 0);
  REQUIRE(run_to_end({"run", "--resume", tmp / "part", "train.max_steps=0"}, tmp / "r.log") == 0);
  INFO(read_text(tmp / "r.log"));
  CHECK(steps_of(tmp / "full") == 12);
  CHECK(steps_of(tmp / "part") == 12);
  CHECK(read_text(tmp / "full/metrics.jsonl") == read_text(tmp / "part/metrics.jsonl"));
  CHECK(read_text(tmp / "full/checkpoints/last/model.safetensors") ==
        read_text(tmp / "part/checkpoints/last/model.safetensors"));
}

TEST_CASE("with ignore_index, micro-batches train like the batch they split") {
  // Label 0 ignored: about a quarter of the synthetic rows, a different share
  // in each micro-batch, so each counts by its rows that are not ignored.
  TempDir tmp("acc-ignore-index");
  write_text(tmp / "tiny.yaml", tiny_experiment(256));
  const std::vector<std::string> common = {"model.loss.ignore_index=0", "train.epochs=1"};
  const std::string whole = train_run(tmp, "whole", common);
  const std::string acc8 = train_run(tmp, "acc8", common, {"train.micro_batch_size=4"});
  CHECK(steps_of(acc8) == 8);
  check_same_training(whole, acc8);
  // The training accuracy counts the same rows either way.
  const auto a = metrics_records(whole, "train"), b = metrics_records(acc8, "train");
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i]["accuracy"] == b[i]["accuracy"]);
}
