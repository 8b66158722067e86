// labels: mpi
// Accumulation on 2 CPU ranks: with data.drop_last: false every rank runs the
// epoch's short last step (the micro-batches left, as many on each rank), and
// with the loss's ignore_index each rank's gradient is the mean over its rows
// that are not ignored, so micro-batches train like the batch they split; a
// run stopped inside an epoch after such a step resumes exactly.
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

// 100 samples on 2 ranks (50 each), batch 32 (16 per rank): 4 steps per
// epoch, the last 2 samples per rank; label 0 ignored (a quarter of the rows).
const std::vector<std::string> kTwoRanks = {
    "devices.world_size=2",    "data.drop_last=false", "model.loss.ignore_index=0",
    "optimizer.type=sgd",      "optimizer.lr=0.1",     "optimizer.momentum=0.9",
    "schedule.type=constant",  "train.epochs=2",       "train.log_every=1",
    "checkpoint.every_steps=0"};

std::string train_run(const TempDir& tmp, const std::string& name,
                      const std::vector<std::string>& extra) {
  return train_tiny(tmp, name, {kTwoRanks, extra});
}

}  // namespace

TEST_CASE("2 ranks: micro-batches with a short last step and ignored rows train like the batch") {
  TempDir tmp("dist-accumulation");
  write_text(tmp / "tiny.yaml", tiny_experiment(100));
  const std::string whole = train_run(tmp, "whole", {});
  // Micro-batches of 8: 7 per rank and epoch, the last step one of 2 samples.
  const std::string acc2 = train_run(tmp, "acc2", {"train.micro_batch_size=8"});
  const std::string acc4 = train_run(tmp, "acc4", {"train.micro_batch_size=4"});
  CHECK(steps_of(whole) == 8);
  CHECK(steps_of(acc2) == 8);
  CHECK(steps_of(acc4) == 8);
  check_same_training(whole, acc2);
  check_same_training(whole, acc4);

  // Cut at step 7, inside epoch 1 after epoch 0's short step, and resumed.
  const std::string part =
      train_run(tmp, "part", {"train.micro_batch_size=8", "train.max_steps=7"});
  REQUIRE(run_to_end({"run", "--resume", part, "train.max_steps=0"}, tmp / "r.log") == 0);
  INFO(read_text(tmp / "r.log"));
  CHECK(steps_of(part) == 8);
  CHECK(read_text(acc2 + "/metrics.jsonl") == read_text(part + "/metrics.jsonl"));
  CHECK(read_text(acc2 + "/checkpoints/last/model.safetensors") ==
        read_text(part + "/checkpoints/last/model.safetensors"));
}
