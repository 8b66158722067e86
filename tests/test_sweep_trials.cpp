// labels: cpu
// How `trainer sweep` starts its trials: each from its own config, resolved
// when the sweep started (a value of the sweep section read as written there,
// so a relative path is relative to its file); a trial that sets its own
// backend.threads keeps it under --parallel; a command-line override of a
// swept key is refused; --out naming a directory that holds something else is
// refused; a config whose rules between fields hold only with the swept
// values is swept; a retried trial reports its latest attempt's error; a resumed
// sweep may change its objective and max_retries and stays in its directory.
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_image_fixtures.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;

namespace {

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

nlohmann::json trial_state(const std::string& sweep_dir) {
  return nlohmann::json::parse(read_text(sweep_dir + "/trials.json"));
}

// A CSV of 3 features and a class label in 0..2; `bad` puts a word where a
// number belongs in its second row.
void write_csv(const std::string& path, bool bad = false) {
  std::string text = "a,b,c,label\n";
  for (int r = 0; r < 96; ++r)
    text += std::to_string(r % 7 * 0.1) + "," + (bad && r == 1 ? "oops" : std::to_string(r % 5)) +
            "," + std::to_string(r % 3 * 0.5) + "," + std::to_string(r % 3) + "\n";
  write_text(path, text);
}

std::string csv_experiment(const std::string& path, const std::string& output_dir) {
  return "name: csv\n"
         "output: {dir: " +
         output_dir +
         "}\n"
         "data:\n"
         "  train: {type: csv, path: " +
         path +
         ", classes: 3}\n"
         "  workers: 1\n"
         "model:\n"
         "  layers: [{type: linear, out_features: 8}, {type: relu}, {type: linear, "
         "out_features: 3}]\n"
         "train: {max_steps: 6, batch_size: 16, log_every: 3}\n"
         "backend: {threads: 1}\n";
}

}  // namespace

TEST_CASE("each trial runs its own config, resolved when the sweep started") {
  TempDir tmp("sweep-trial-configs");
  fs::create_directories(tmp / "project/data");
  write_csv(tmp / "project/data/good.csv");
  // The grid names the data file relative to the config, and the sweep is
  // started from another directory.
  write_text(tmp / "project/csv.yaml",
             csv_experiment("data/good.csv", tmp / "runs") +
                 "sweep: {grid: {data.train.path: [data/good.csv]}, seeds: [0, 1], objective: "
                 "{metric: train.loss}}\n");
  REQUIRE(run_to_end({"sweep", tmp / "project/csv.yaml", "--out", tmp / "sw"}, tmp / "1.log") == 0);
  for (const std::string id : {"trial-000", "trial-001"}) {
    INFO(id);
    const std::string config = read_text(tmp / ("sw/configs/" + id + ".yaml"));
    CHECK(config.rfind("# resolved from " + (tmp / "project/csv.yaml") + "\n", 0) == 0);
    CHECK(config.find("path: " + (tmp / "project/data/good.csv")) != std::string::npos);
    CHECK(config.find("sweep:") == std::string::npos);
    const auto manifest =
        nlohmann::json::parse(read_text(tmp / ("sw/trials/" + id + "/manifest.json")));
    CHECK(manifest["command"].get<std::string>().find(" run " + (tmp / ("sw/configs/" + id)) +
                                                      ".yaml --out ") != std::string::npos);
  }
  CHECK(read_text(tmp / "sw/configs/trial-001.yaml").find("seed: 1\n") != std::string::npos);
}

TEST_CASE("a config that needs the swept values to pass its rules between fields is swept") {
  TempDir tmp("sweep-base-rules");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // A multistep schedule needs milestones, which the sweep sets.
  REQUIRE(run_to_end({"sweep", tmp / "tiny.yaml", "train.max_steps=4", "schedule.type=multistep",
                      "--grid", "schedule.milestones=[1,2],[2,3]", "--out", tmp / "sw"},
                     tmp / "1.log") == 0);
  CHECK(read_text(tmp / "sw/configs/trial-000.yaml").find("milestones: [1, 2]\n") !=
        std::string::npos);
  CHECK(read_text(tmp / "sw/configs/trial-001.yaml").find("milestones: [2, 3]\n") !=
        std::string::npos);
  // Nothing to train without the swept max_steps.
  REQUIRE(run_to_end({"sweep", tmp / "tiny.yaml", "train.epochs=0", "--grid", "train.max_steps=2,3",
                      "--out", tmp / "sw2"},
                     tmp / "2.log") == 0);
  CHECK(nlohmann::json::parse(read_text(tmp / "sw2/trials/trial-001/summary.json"))["steps"] == 3);
  // An error no swept value mends is reported once, before any trial.
  const auto r = run_trainer("sweep " + (tmp / "tiny.yaml") +
                                 " train.epochs=0 schedule.type=multistep --grid "
                                 "'schedule.milestones=[1,2],[2,3]' --out " +
                                 (tmp / "sw3"),
                             true);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out ==
        "sweep: the config fails its checks without the values the sweep sets; checked with "
        "trial-000's (schedule.milestones=[1,2]):\n"
        "<command line>:1:14: error: train.epochs: nothing to train: set train.epochs > 0 or "
        "train.max_steps > 0 (in override 1 'train.epochs=0')\n1 error\n");
  CHECK_FALSE(fs::exists(tmp / "sw3"));
}

TEST_CASE("validate reads a config with a sweep section as the sweep does") {
  TempDir tmp("sweep-base-validate");
  // Nothing to train without the swept epochs: the sweep runs it, so
  // validate passes it; a bad value of another swept key is still reported.
  const auto swept = [&](const std::string& grid) {
    write_text(tmp / "sw.yaml", replaced(tiny_experiment(), "epochs: 3,", "epochs: 0,") +
                                    "sweep: {objective: {metric: train.loss}, grid: {" + grid +
                                    "}}\n");
    return run_trainer("validate " + (tmp / "sw.yaml"), true);
  };
  auto r = swept("train.epochs: [1, 2], optimizer.lr: [0.1, 0.01]");
  INFO(r.out);
  CHECK(r.code == 0);
  // With the config's own error as a warning: `trainer run` of it refuses it.
  CHECK(r.out.ends_with("\nok: a sweep of 4 trials (trainer sweep runs them)\n"));
  CHECK(r.out.find("sw.yaml:") != std::string::npos);
  CHECK(r.out.find(": warning: train.epochs: nothing to train") != std::string::npos);
  CHECK(r.out.find("`trainer run` of this config refuses it") != std::string::npos);
  CHECK(r.out.find("error") == std::string::npos);
  r = swept("train.epochs: [1, 2], optimizer.lr: [0.1, -1]");
  CHECK(r.code == 2);
  CHECK(r.out.find("error: sweep.grid.optimizer.lr: with optimizer.lr=-1: expected a number") !=
        std::string::npos);
  CHECK(r.out.find("nothing to train") == std::string::npos);
  // An error no swept value mends: as the sweep reports it.
  r = swept("optimizer.lr: [0.1, 0.01]");
  CHECK(r.code == 2);
  CHECK(r.out.rfind("validate: the config fails its checks without the values the sweep sets; "
                    "checked with trial-000's (optimizer.lr=0.1):\n",
                    0) == 0);
  CHECK(r.out.find("error: train.epochs: nothing to train") != std::string::npos);
}

TEST_CASE("a trial's own backend.threads is kept when trials run side by side") {
  TempDir tmp("sweep-threads");
  write_text(tmp / "tiny.yaml", replaced(tiny_experiment(), "backend: {threads: 1}\n", ""));
  REQUIRE(run_to_end({"sweep", tmp / "tiny.yaml", "train.max_steps=4", "--grid",
                      "backend.threads=0,2", "--parallel", "2", "--out", tmp / "sw"},
                     tmp / "1.log") == 0);
  // trial-000 leaves the threads to the sweep (0: all cores), trial-001 asks for 2.
  const auto command = [&](const std::string& id) {
    return nlohmann::json::parse(read_text(tmp / ("sw/trials/" + id + "/manifest.json")))["command"]
        .get<std::string>();
  };
  CHECK(command("trial-000").find("backend.threads=") != std::string::npos);
  CHECK(command("trial-001").find("backend.threads=") == std::string::npos);
  CHECK(read_text(tmp / "sw/trials/trial-001/config.yaml").find("threads: 2\n") !=
        std::string::npos);
}

TEST_CASE("an override of a key the sweep varies is refused") {
  TempDir tmp("sweep-override-swept");
  write_text(tmp / "tiny.yaml", tiny_experiment() + "sweep: {grid: {optimizer.lr: [0.1, 0.01]}}\n");
  const auto r =
      run_trainer("sweep " + (tmp / "tiny.yaml") + " train.max_steps=4 optimizer.lr=0.5", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out,
             Catch::Contains("<command line>:2:1: error: optimizer.lr: the sweep varies "
                             "optimizer.lr (at " +
                             (tmp / "tiny.yaml") +
                             ":21:16), so every trial would replace this value (in override 2 "
                             "'optimizer.lr=0.5')\n    drop the override, or the key from the "
                             "sweep section"));
  const auto flag = run_trainer(
      "sweep " + (tmp / "tiny.yaml") + " seed=4 --grid seed=1,2 --out " + (tmp / "sw"), true);
  CHECK(flag.code == 2);
  CHECK_THAT(flag.out, Catch::Contains("the sweep varies seed (a --grid flag)"));
  CHECK_FALSE(fs::exists(tmp / "sw"));
  // validate takes it (a plain run uses it) and warns that a sweep would refuse it.
  const auto validated =
      run_trainer("validate " + (tmp / "tiny.yaml") + " train.max_steps=4 optimizer.lr=0.5", true);
  CHECK(validated.code == 0);
  CHECK_THAT(validated.out, Catch::Contains("<command line>:2:1: warning: optimizer.lr: the sweep "
                                            "varies optimizer.lr (at " +
                                            (tmp / "tiny.yaml") + ":21:16)"));
  CHECK_THAT(validated.out, Catch::EndsWith("ok: a sweep of 2 trials (trainer sweep runs them)\n"));
}

TEST_CASE("--out naming a directory that holds something else is refused, leaving it as it was") {
  TempDir tmp("sweep-out-taken");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  fs::create_directories(tmp / "project");
  write_text(tmp / "project/config.yaml", "# my notes\n");
  const auto r = run_trainer(
      "sweep " + (tmp / "tiny.yaml") + " --grid optimizer.lr=0.1,0.01 --out " + (tmp / "project"),
      true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("the sweep directory '" + (tmp / "project") +
                                    "' holds config.yaml and no sweep"));
  CHECK(read_text(tmp / "project/config.yaml") == "# my notes\n");
  CHECK(std::distance(fs::directory_iterator(tmp / "project"), fs::directory_iterator()) == 1);
}

TEST_CASE("a retried trial reports its latest attempt's error; max_retries may change on resume") {
  TempDir tmp("sweep-retry-error");
  // Images are decoded as the run reads them: a damaged one fails the trial
  // that trains on it, not the checks before any trial runs.
  trainer::data::testing::write_image_folder(tmp / "good", 8);
  trainer::data::testing::write_image_folder(tmp / "other", 8, {"a/1.png"});
  write_text(tmp / "img.yaml",
             "name: img\noutput: {dir: " + (tmp / "runs") +
                 "}\n"
                 "data:\n  train: {type: image_folder, root: good, size: 3}\n  workers: 1\n"
                 "model:\n  layers: [{type: flatten}, {type: linear, out_features: 2}]\n"
                 "train: {max_steps: 4, batch_size: 4, log_every: 2}\n"
                 "backend: {threads: 1}\n"
                 "sweep: {grid: {data.train.root: [good, other]}, objective: {metric: "
                 "train.loss}}\n");
  const std::vector<std::string> args = {"sweep", tmp / "img.yaml"};
  REQUIRE(run_to_end(args, tmp / "1.log") == 1);
  const std::string first = read_text(tmp / "1.log");
  INFO(first);
  const auto at = first.find("results in ");
  REQUIRE(at != std::string::npos);
  const std::string dir =
      fs::path(first.substr(at + 11, first.find('\n', at) - at - 11)).parent_path().string();
  CHECK(trial_state(dir)["trial-001"]["error"].get<std::string>().find("a/1.png") !=
        std::string::npos);

  // Now other images are damaged, every one of class b (the retry resumes
  // from the training kept before a/1.png's batch, and meets one of them in
  // the steps still to train); retries allowed on the command line: the same
  // sweep directory, and the error of the attempt that just failed.
  trainer::data::testing::write_image_folder(
      tmp / "other", 8,
      {"b/0.png", "b/1.png", "b/2.png", "b/3.png", "b/4.png", "b/5.png", "b/6.png", "b/7.png"});
  std::vector<std::string> retry = args;
  retry.push_back("sweep.max_retries=1");
  REQUIRE(run_to_end(retry, tmp / "2.log") == 1);
  CHECK(read_text(tmp / "2.log").find("results in " + dir + "/results.md") != std::string::npos);
  CHECK(read_text(tmp / "2.log").find("trial-001 started (resumed)") != std::string::npos);
  const auto state = trial_state(dir);
  CHECK(state["trial-000"]["status"] == "done");
  CHECK(state["trial-001"]["failures"] == 2);
  const std::string error = state["trial-001"]["error"].get<std::string>();
  INFO(error);
  CHECK(error.rfind("exit 1: ", 0) == 0);
  CHECK(error.find("/other/b/") != std::string::npos);
  CHECK(error.find("a/1.png") == std::string::npos);
  CHECK(read_text(dir + "/results.md").find("/other/b/") != std::string::npos);
}
