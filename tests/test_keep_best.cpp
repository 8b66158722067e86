// labels: cpu train
// checkpoint.keep_best ranks checkpoints by a metric measured on each one's
// own weights: every evaluation is followed by a checkpoint, a checkpoint
// taken between evaluations carries no metric (it used to carry the last
// evaluation's, so retention deleted the real best), and a checkpoint that
// recorded another metric is not ranked by this one.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "run_command.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "test_resume_fixtures.h"

using namespace trainer;
using namespace trainer::testing;
namespace fs = std::filesystem;

namespace {

// The checkpoints left in a run, by step.
std::map<std::int64_t, checkpoint::TrainState> kept(const std::string& dir) {
  std::map<std::int64_t, checkpoint::TrainState> states;
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "checkpoints")) {
    if (!entry.is_directory() || entry.is_symlink()) continue;
    const auto state = checkpoint::verify_checkpoint(entry.path().string());
    states[state.step] = state;
  }
  return states;
}

nlohmann::json eval_best(const std::string& dir) {
  const auto r = run_trainer("eval " + dir + " --checkpoint best --json");
  INFO(r.out);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("keep_best keeps the checkpoint of the best evaluation, measured on its weights") {
  TempDir tmp("keep-best");
  write_text(tmp / "tiny.yaml", tiny_experiment(256));  // 8 steps an epoch
  // Checkpoints every 3 steps fall between the evaluations (every 4 steps).
  REQUIRE(
      run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=4",
                  "train.eval_every=4", "checkpoint.every_steps=3", "checkpoint.keep_last=1",
                  "checkpoint.keep_best=1", "checkpoint.metric=eval.loss", "checkpoint.mode=min"},
                 tmp / "run.log") == 0);
  const auto evals = eval_records(tmp / "run");
  REQUIRE(evals.size() == 8);
  std::int64_t best_step = -1;
  for (const auto& [step, record] : evals)
    if (best_step < 0 || record["loss"].get<double>() < evals.at(best_step)["loss"].get<double>())
      best_step = step;

  const auto states = kept(tmp / "run");
  CHECK(states.count(32) == 1);         // the newest
  CHECK(states.count(best_step) == 1);  // the best evaluation's weights
  CHECK(states.size() <= 2);
  for (const auto& [step, state] : states) {
    INFO("step " << step);
    REQUIRE(state.metric.has_value());
    CHECK(state.metric_name == "eval.loss");
    CHECK(*state.metric == evals.at(step)["loss"].get<double>());
  }
  const auto best = eval_best(tmp / "run");
  CHECK(best["step"] == best_step);
  CHECK(best["loss"].get<double>() == evals.at(best_step)["loss"].get<double>());
}

TEST_CASE("a checkpoint between evaluations carries no metric, and another metric does not rank") {
  TempDir tmp("keep-best-metric");
  write_text(tmp / "tiny.yaml", tiny_experiment(256));
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=2",
                      "checkpoint.every_steps=3", "checkpoint.keep_last=0"},
                     tmp / "run.log") == 0);
  const auto states = kept(tmp / "run");
  for (const auto& [step, state] : states) {
    INFO("step " << step);
    // Evaluations at the epochs' ends, steps 8 and 16.
    CHECK(state.metric.has_value() == (step % 8 == 0));
    if (state.metric) CHECK(state.metric_name == "eval.accuracy");
  }
  // Ranked by eval.loss, which no checkpoint recorded: nothing is "best".
  const auto r =
      run_trainer("eval " + (tmp / "run") +
                      " --checkpoint best checkpoint.metric=eval.loss checkpoint.mode=min",
                  true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("no checkpoint recorded a finite eval.loss"));
}

TEST_CASE("an evaluation stopped by a signal and made by the resume still ranks its checkpoint") {
  TempDir tmp("keep-best-stopped");
  write_text(tmp / "tiny.yaml", tiny_experiment(256));  // 8 steps an epoch
  // By the highest loss, the first evaluation's checkpoint (step 2) is the best.
  const std::vector<std::string> settings = {
      "train.max_steps=12",     "train.eval_every=2",          "checkpoint.keep_best=1",
      "checkpoint.keep_last=1", "checkpoint.metric=eval.loss", "checkpoint.mode=max"};
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "full", settings), tmp / "full.log") == 0);
  const auto full = kept(tmp / "full");
  REQUIRE(full.count(2) == 1);
  {
    setenv("TRAINER_INJECT_EVAL_DELAY", "2", 1);
    TrainerProcess run(run_args(tmp / "tiny.yaml", tmp / "stopped", settings), tmp / "s.log");
    unsetenv("TRAINER_INJECT_EVAL_DELAY");
    REQUIRE(wait_for_text(tmp / "s.log", "TRAINER_INJECT_EVAL_DELAY", std::chrono::seconds(60)));
    run.signal(SIGINT);
    REQUIRE(run.wait() == 130);
  }
  REQUIRE(run_to_end({"run", "--resume", tmp / "stopped"}, tmp / "r.log") == 0);
  const auto resumed = kept(tmp / "stopped");
  INFO(read_text(tmp / "r.log"));
  REQUIRE(resumed.size() == full.size());
  for (const auto& [step, state] : full) {
    INFO("step " << step);
    REQUIRE(resumed.count(step) == 1);
    CHECK(resumed.at(step).metric == state.metric);
  }
}
