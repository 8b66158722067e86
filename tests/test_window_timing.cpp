// labels: cpu
// A logging window's rates (timing.jsonl, and metrics.jsonl when timing goes
// there) are those of its steps: the evaluations and checkpoints between
// them are left out, and a run resumed inside a window times only the steps
// it ran itself.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_data_fixtures.h"

namespace {

const std::string kTimedRun =
    "name: timing\n"
    "data:\n"
    "  train: {type: synthetic, shape: [1, 4, 4], classes: 4, size: 256}\n"
    "  eval: {type: synthetic, shape: [1, 4, 4], classes: 4, size: 64}\n"
    "  workers: 1\n"
    "model:\n"
    "  layers: [{type: flatten}, {type: linear, out_features: 4}]\n"
    "train: {epochs: 1, batch_size: 32, log_every: 4, eval_every: 2}\n"
    "checkpoint: {every_steps: 1}\n"
    "backend: {threads: 1}\n";

// step -> step_ms of a run directory's timing.jsonl.
std::map<std::int64_t, double> step_ms_by_step(const std::string& run_dir) {
  std::map<std::int64_t, double> out;
  std::ifstream in(run_dir + "/timing.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    out[record.at("step").get<std::int64_t>()] = record.at("step_ms").get<double>();
  }
  return out;
}

}  // namespace

TEST_CASE("evaluations and checkpoints stay out of a window's step time") {
  trainer::data::testing::TempDir tmp;
  const std::string config = tmp.file("timing.yaml");
  trainer::data::testing::write_text(config, kTimedRun);
  // Steps of 20 ms; every step a checkpoint of 100 ms more, every second one
  // an evaluation of two 100 ms batches: counted in, a step would take
  // 220 ms on average.
  const std::string dir = tmp.file("run");
  const auto r = trainer::testing::run_command(
      "TRAINER_INJECT_STEP_DELAY=0.02 TRAINER_INJECT_CHECKPOINT_DELAY=0.1 "
      "TRAINER_INJECT_EVAL_DELAY=0.1 " +
      trainer::testing::trainer_binary() + " run " + config + " --out " + dir);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto step_ms = step_ms_by_step(dir);
  REQUIRE(step_ms.size() == 2);
  for (const auto& [step, ms] : step_ms) {
    INFO("step " << step);
    CHECK(ms >= 20.0);
    // The first window also holds the first step's set-up.
    if (step > 4) CHECK(ms < 120.0);
  }
}

TEST_CASE("a run resumed inside a window times only the steps it ran") {
  trainer::data::testing::TempDir tmp;
  const std::string config = tmp.file("timing.yaml");
  trainer::data::testing::write_text(config, kTimedRun);
  const std::string dir = tmp.file("run");
  // Seven steps of a window of eight, checkpointed at the end; the resume
  // runs the eighth. Divided among all eight, its 40 ms would read as 5.
  const std::string delay = "TRAINER_INJECT_STEP_DELAY=0.04 ";
  const auto first = trainer::testing::run_command(
      delay + trainer::testing::trainer_binary() + " run " + config + " --out " + dir +
      " train.log_every=8 train.max_steps=7 train.eval_every=0 checkpoint.every_steps=0");
  INFO(first.out);
  REQUIRE(first.code == 0);
  const auto resumed = trainer::testing::run_command(delay + trainer::testing::trainer_binary() +
                                                     " run --resume " + dir + " train.max_steps=8");
  INFO(resumed.out);
  REQUIRE(resumed.code == 0);
  const auto step_ms = step_ms_by_step(dir);
  REQUIRE(step_ms.count(8) == 1);
  CHECK(step_ms.at(8) >= 40.0);
}
