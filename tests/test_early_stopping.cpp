// labels: cpu
// train.early_stopping: training ends at the evaluation where the metric has
// gone `patience` evaluations without beating its best by more than
// min_delta (recomputed here from metrics.jsonl), with a checkpoint there; a
// resumed run stops where the uninterrupted one did; bad settings are config
// errors with the key and a suggestion.
#include <catch2/catch.hpp>

#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;

namespace {

// The step at which the rule stops, from the eval records (0: it does not).
std::int64_t stop_step(const std::vector<nlohmann::json>& evals, std::int64_t patience,
                       double min_delta) {
  std::optional<double> best;
  std::int64_t bad = 0;
  for (const auto& e : evals) {
    const double v = e["accuracy"].get<double>();
    if (!best || v > *best + min_delta) {
      best = v;
      bad = 0;
    } else if (++bad >= patience) {
      return e["step"].get<std::int64_t>();
    }
  }
  return 0;
}

const std::vector<std::string> kFollowAccuracy = {
    "train.eval_every=4", "train.early_stopping.metric=eval.accuracy",
    "train.early_stopping.mode=max", "schedule.type=constant"};

std::vector<std::string> following_accuracy(const std::string& config, const std::string& out,
                                            std::vector<std::string> extra) {
  extra.insert(extra.begin(), kFollowAccuracy.begin(), kFollowAccuracy.end());
  return run_args(config, out, extra);
}

}  // namespace

TEST_CASE("early stopping ends training where the metric stopped improving") {
  TempDir tmp("early-stopping");
  write_text(tmp / "tiny.yaml", tiny_experiment());

  // Without a stop (patience beyond the run) the run goes to step 48 and
  // evaluates every 4 steps: where a patience of 2 would stop, from its records.
  REQUIRE(run_to_end(following_accuracy(tmp / "tiny.yaml", tmp / "long",
                                        {"train.early_stopping.patience=99"}),
                     tmp / "long.log") == 0);
  const auto evals = metrics_records(tmp / "long", "eval");
  REQUIRE(evals.size() == 12);
  CHECK_FALSE(summary_of(tmp / "long").contains("early_stopped"));
  const std::int64_t expected = stop_step(evals, 2, 0.0);
  REQUIRE(expected > 0);  // this data does stop early
  REQUIRE(expected < 48);

  REQUIRE(run_to_end(following_accuracy(tmp / "tiny.yaml", tmp / "stop",
                                        {"train.early_stopping.patience=2"}),
                     tmp / "stop.log") == 0);
  const auto summary = summary_of(tmp / "stop");
  INFO(read_text(tmp / "stop.log"));
  CHECK(summary["status"] == "complete");
  REQUIRE(summary.contains("early_stopped"));
  CHECK(summary["early_stopped"]["step"] == expected);
  CHECK(summary["early_stopped"]["metric"] == "eval.accuracy");
  CHECK(summary["early_stopped"]["evaluations_without_improvement"] == 2);
  CHECK(summary["steps"] == expected);
  // Nothing trained past the stop, and a checkpoint is there.
  for (const auto& r : metrics_records(tmp / "stop", "train")) CHECK(r["step"] <= expected);
  CHECK(metrics_records(tmp / "stop", "eval").back()["step"] == expected);
  CHECK(fs::exists(tmp / "stop/checkpoints/" + [&] {
    char name[32];
    std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(expected));
    return std::string(name);
  }()));
  CHECK_THAT(read_text(tmp / "stop/train.log"),
             Catch::Contains("early stopping at step " + std::to_string(expected)));

  // min_delta: no evaluation beats the first by more than 1 (accuracies are
  // fractions), so the third evaluation (step 12) stops with patience 2.
  REQUIRE(run_to_end(following_accuracy(
                         tmp / "tiny.yaml", tmp / "delta",
                         {"train.early_stopping.patience=2", "train.early_stopping.min_delta=1"}),
                     tmp / "delta.log") == 0);
  CHECK(summary_of(tmp / "delta")["early_stopped"]["step"] == 12);
  CHECK(summary_of(tmp / "delta")["early_stopped"]["best_step"] == 4);
  CHECK_THAT(read_text(tmp / "delta/train.log"),
             Catch::Contains("(step 4) by more than min_delta 1 in 2 evaluations"));
  CHECK_THAT(read_text(tmp / "stop/train.log"), !Catch::Contains("min_delta"));

  // Stopped by max_steps before the early stop and resumed: the counters
  // come back from the checkpoint, so it stops at the same step with the
  // same records.
  REQUIRE(run_to_end(following_accuracy(tmp / "tiny.yaml", tmp / "part",
                                        {"train.early_stopping.patience=2",
                                         "train.max_steps=" + std::to_string(expected - 2)}),
                     tmp / "part.log") == 0);
  CHECK_FALSE(summary_of(tmp / "part").contains("early_stopped"));
  REQUIRE(run_to_end({"run", "--resume", tmp / "part", "train.max_steps=0"}, tmp / "resume.log") ==
          0);
  CHECK(read_text(tmp / "part/metrics.jsonl") == read_text(tmp / "stop/metrics.jsonl"));
  CHECK(summary_of(tmp / "part")["early_stopped"] == summary["early_stopped"]);

  // The early-stopped run resumed: nothing to train, and nothing in its
  // directory changes but train.log (it trained to the next evaluation and
  // stopped again, rewriting its records and pruning checkpoints).
  const std::string metrics = read_text(tmp / "stop/metrics.jsonl");
  const std::string stopped_summary = read_text(tmp / "stop/summary.json");
  REQUIRE(run_to_end({"run", "--resume", tmp / "stop"}, tmp / "again.log") == 0);
  CHECK_THAT(read_text(tmp / "again.log"),
             Catch::Contains("nothing to train: early stopping stops this run at step " +
                             std::to_string(expected)));
  CHECK(read_text(tmp / "stop/metrics.jsonl") == metrics);
  CHECK(read_text(tmp / "stop/summary.json") == stopped_summary);
  // With more patience it goes on, as the patient run did.
  REQUIRE(run_to_end({"run", "--resume", tmp / "stop", "train.early_stopping.patience=99"},
                     tmp / "patient.log") == 0);
  CHECK(summary_of(tmp / "stop")["steps"] == 48);
  CHECK(metrics_records(tmp / "stop", "eval") == metrics_records(tmp / "long", "eval"));
}

TEST_CASE(
    "a run whose last evaluation used up the patience, extended, stops where a longer run does") {
  TempDir tmp("early-stopping-extended");
  // 6 steps per epoch, evaluated every 4 steps and at each epoch's end.
  write_text(tmp / "small.yaml",
             "name: small\nseed: 3\ndeterministic: true\n"
             "data:\n"
             "  train: {type: synthetic, shape: [16], classes: 4, size: 200, seed: 1}\n"
             "  eval: {type: synthetic, shape: [16], classes: 4, size: 101, seed: 2}\n"
             "  workers: 0\n"
             "model:\n  layers: [{type: linear, out_features: 32}, {type: relu}, "
             "{type: linear, out_features: 4}]\n"
             "optimizer: {type: sgd, lr: 0.1}\n"
             "train: {batch_size: 32, log_every: 1, eval_every: 4, early_stopping: {patience: 2}}\n"
             "backend: {threads: 1}\n");
  REQUIRE(run_to_end(run_args(tmp / "small.yaml", tmp / "long", {"train.epochs=12"}),
                     tmp / "long.log") == 0);
  const auto stopped = summary_of(tmp / "long")["early_stopped"];
  // This data stops at the end of epoch 3: the last evaluation of a 3-epoch run.
  REQUIRE(stopped["step"] == 18);
  REQUIRE(run_to_end(run_args(tmp / "small.yaml", tmp / "short", {"train.epochs=3"}),
                     tmp / "short.log") == 0);
  CHECK_FALSE(summary_of(tmp / "short").contains("early_stopped"));  // its steps ran out
  REQUIRE(run_to_end({"run", "--resume", tmp / "short", "train.epochs=12"}, tmp / "more.log") == 0);
  INFO(read_text(tmp / "more.log"));
  CHECK(summary_of(tmp / "short")["steps"] == 18);
  CHECK(read_text(tmp / "short/metrics.jsonl") == read_text(tmp / "long/metrics.jsonl"));
}

TEST_CASE("early stopping that can never stop the run is warned of at its patience") {
  TempDir tmp("early-stopping-cannot-stop");
  write_text(tmp / "tiny.yaml", tiny_experiment());  // 3 epochs of 16 steps
  const std::string validate = "validate " + (tmp / "tiny.yaml") + " ";
  // Evaluated at steps 16 and 32 before the last (48): a best, then one more.
  auto r = run_trainer(validate + "train.early_stopping.patience=2", true);
  CHECK(r.code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("warning: train.early_stopping.patience: 2: early stopping takes an "
                             "evaluation that sets the best and 2 more without improvement, but "
                             "this run of 48 steps evaluates 2 times before its last step (at the "
                             "end of each epoch of 16 steps), so it can never stop the run") &&
                 Catch::Contains("or lower patience to 1 or less"));
  CHECK(run_trainer(validate + "train.early_stopping.patience=1", true).out == "ok\n");
  // Every 4 steps and at each epoch's end: 11 evaluations before step 48.
  CHECK(run_trainer(validate + "train.early_stopping.patience=10 train.eval_every=4", true).out ==
        "ok\n");
  r = run_trainer(validate + "train.early_stopping.patience=11 train.eval_every=4", true);
  CHECK_THAT(r.out, Catch::Contains("evaluates 11 times before its last step (every 4 steps and "
                                    "at the end of each epoch of 16 steps)"));
  // A run shorter than an epoch never evaluates before its end.
  r = run_trainer(validate + "train.early_stopping.patience=1 train.max_steps=10", true);
  CHECK_THAT(r.out, Catch::Contains("this run of 10 steps never evaluates before its last step"));
  // `run` says so before it trains.
  r = run_trainer("run " + (tmp / "tiny.yaml") + " --out " + (tmp / "run") +
                      " train.early_stopping.patience=1 train.max_steps=3",
                  true);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("warning: train.early_stopping.patience: 1:"));
}

TEST_CASE("early stopping settings that cannot work are config errors") {
  TempDir tmp("early-stopping-errors");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::string validate =
      "validate " + (tmp / "tiny.yaml") + " train.early_stopping.patience=3 ";
  auto r = run_trainer(validate + "train.early_stopping.metric=eval.acuracy", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("error: train.early_stopping.metric") &&
                        Catch::Contains("did you mean 'eval.accuracy'?"));
  // An accuracy followed with the default mode (min) would wait for it to fall.
  r = run_trainer(validate + "train.early_stopping.metric=eval.accuracy", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("set train.early_stopping.mode: max"));
  // A mode written against the default metric (eval.loss) would wait for it to rise.
  r = run_trainer(validate + "train.early_stopping.mode=max", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("early stopping would wait for the largest eval.loss "
                                    "(train.early_stopping.metric defaults to eval.loss)"));
  // It follows the evaluations, not the training log.
  r = run_trainer(validate + "train.early_stopping.metric=train.loss", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("it follows the evaluations"));
  // The defaults (eval.loss, min) are fine; without patience nothing is checked.
  CHECK(run_trainer(validate).code == 0);
  CHECK(run_trainer("validate " + (tmp / "tiny.yaml") + " train.early_stopping.metric=nonsense")
            .code == 0);
  r = run_trainer(validate + "train.early_stopping.patience=-1", true);
  CHECK(r.code == 2);
}
