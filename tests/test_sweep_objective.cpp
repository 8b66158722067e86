// labels: cpu
// `trainer sweep`'s objective: one its trials never record is refused before
// any trial runs; an eval metric ranks each trial by the best of its
// evaluations (not its last); a sweep whose finished trials recorded no
// objective says so and exits 1.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;

namespace {

nlohmann::json trial_state(const std::string& sweep_dir) {
  return nlohmann::json::parse(read_text(sweep_dir + "/trials.json"));
}

std::vector<double> eval_accuracies(const std::string& run_dir) {
  std::vector<double> out;
  for (const auto& r : metrics_records(run_dir, "eval")) out.push_back(r["accuracy"]);
  return out;
}

}  // namespace

TEST_CASE("an objective the trials never record is refused before any trial runs") {
  TempDir tmp("sweep-objective-unrecorded");
  // tiny_experiment: 4 classes, deterministic (no timing in the metrics).
  const std::string base = tiny_experiment();
  const std::string line = std::to_string(std::count(base.begin(), base.end(), '\n') + 1);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"eval.top5", "top5 is recorded above 5 classes, and its data has 4"},
      {"train.step_ms", "deterministic: true leaves timing out of the metrics"}};
  for (const auto& [metric, why] : cases) {
    INFO(metric);
    const std::string sweep =
        "sweep: {grid: {optimizer.lr: [0.01, 0.003]}, objective: {metric: " + metric + "}}\n";
    write_text(tmp / "sw.yaml", base + sweep);
    const std::string column = std::to_string(sweep.find(metric) + 1);
    CHECK(run_to_end({"sweep", tmp / "sw.yaml", "--out", tmp / "sw"}, tmp / "1.log") == 2);
    const std::string log = read_text(tmp / "1.log");
    INFO(log);
    CHECK(log.find(tmp / "sw.yaml" + ":" + line + ":" + column +
                   ": error: sweep.objective.metric: the " + "trials never record '" + metric +
                   "': " + why) != std::string::npos);
    CHECK(log.find("set it to one they record: eval.loss, eval.accuracy, train.loss, "
                   "train.accuracy, train.lr, train.memory_peak_mib") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "sw"));
    // validate refuses it too.
    CHECK(run_to_end({"validate", tmp / "sw.yaml"}, tmp / "2.log") == 2);
    CHECK(read_text(tmp / "2.log")
              .find("error: sweep.objective.metric: the trials never record '" + metric +
                    "': " + why) != std::string::npos);
  }
}

TEST_CASE("a sweep ranks an eval objective by each trial's best evaluation") {
  TempDir tmp("sweep-objective-best");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // Evaluations every 2 steps: accuracy on this data rises and falls, so a
  // trial's last evaluation is not its best.
  REQUIRE(run_to_end({"sweep", tmp / "tiny.yaml", "train.eval_every=2", "--grid",
                      "optimizer.lr=0.1,0.03,0.01", "--out", tmp / "sw"},
                     tmp / "1.log") == 0);
  const auto state = trial_state(tmp / "sw");
  std::vector<std::pair<double, std::string>> best;  // (best accuracy, trial)
  bool best_before_last = false;
  for (const char* id : {"trial-000", "trial-001", "trial-002"}) {
    INFO(id);
    const auto accuracies = eval_accuracies(tmp / ("sw/trials/" + std::string(id)));
    REQUIRE(accuracies.size() > 2);
    const double top = *std::max_element(accuracies.begin(), accuracies.end());
    CHECK(state[id]["objective"].get<double>() == Approx(top));
    best_before_last = best_before_last || accuracies.back() < top;
    best.emplace_back(top, id);
  }
  CHECK(best_before_last);  // or this data does not tell best from last
  std::sort(best.rbegin(), best.rend());
  const std::string table = read_text(tmp / "sw/results.md");
  INFO(table);
  CHECK(table.find("(max, the best of each trial's evaluations)") != std::string::npos);
  CHECK(table.find("| 1 | " + best[0].second) != std::string::npos);
  CHECK(table.find("| 3 | " + best[2].second) != std::string::npos);
}

TEST_CASE("a sweep whose finished trials recorded no objective says so and exits 1") {
  TempDir tmp("sweep-objective-none");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::vector<std::string> args = {"sweep",   tmp / "tiny.yaml",         "train.max_steps=4",
                                         "--grid",  "optimizer.lr=0.01,0.003", "--out",
                                         tmp / "sw"};
  REQUIRE(run_to_end(args, tmp / "1.log") == 0);
  // Summaries without an evaluation (as from a run that recorded none).
  for (const char* id : {"trial-000", "trial-001"}) {
    const std::string dir = tmp / ("sw/trials/" + std::string(id));
    auto summary = nlohmann::json::parse(read_text(dir + "/summary.json"));
    summary["final_eval"] = nullptr;
    summary["best_eval"] = nullptr;
    write_text(dir + "/summary.json", summary.dump());
    fs::remove(dir + "/metrics.jsonl");
  }
  CHECK(run_to_end(args, tmp / "2.log") == 1);
  const std::string log = read_text(tmp / "2.log");
  INFO(log);
  CHECK(log.find("0 to run") != std::string::npos);
  CHECK(log.find("error: no finished trial recorded the objective "
                 "'eval.accuracy', so none is "
                 "ranked; trial-000 records train.loss, ") != std::string::npos);
  CHECK(log.find("set sweep.objective.metric to one of those") != std::string::npos);
  CHECK(read_text(tmp / "sw/results.md")
            .find("No finished trial recorded `eval.accuracy`: nothing is "
                  "ranked.") != std::string::npos);
}
