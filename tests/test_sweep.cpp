// labels: cpu
// `trainer sweep`: a failing trial does not stop the sweep and is retried up
// to max_retries (the tables count its failures), unless it failed on a
// config error (exit 2), and the best trial is named; a sweep stopped in the
// middle and run again finishes every trial exactly once (finished ones
// skipped, the interrupted one resumed); a sweep directory refuses trials of
// a changed config, and one whose trials.json is damaged goes on from its
// trials' run directories, with a warning naming what is damaged; trial
// configs that fail their field checks stop the sweep
// before any runs, errors in the sweep section's values reported there, once;
// --parallel is bounded, and a sweep runs no more trials at once than it has;
// the config's warnings are shown once; validate refuses what sweep refuses;
// a file where the sweep needs a folder is an error that says so.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runner/train/sha256.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;

namespace {

nlohmann::json trial_state(const std::string& sweep_dir) {
  try {
    return nlohmann::json::parse(read_text(sweep_dir + "/trials.json"));
  } catch (const nlohmann::json::exception&) {
    return nlohmann::json::object();
  }
}

std::string status_of(const std::string& sweep_dir, const std::string& trial) {
  const auto state = trial_state(sweep_dir);
  return state.contains(trial) ? state[trial].value("status", "") : "";
}

// An objective as the sweep prints it.
std::string fmt_objective(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

int count(const std::string& text, const std::string& word) {
  int n = 0;
  for (auto at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

// The tiny experiment on 64 samples, with a grid of two learning rates.
const std::string kTinyLearningRateSweep =
    tiny_experiment(64) + "sweep: {grid: {optimizer.lr: [0.1, 0.2]}}\n";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// The process with `argument` on its command line (0: none).
pid_t process_with_argument(const std::string& argument) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::istringstream cmdline(read_text(entry.path() / "cmdline"));
    for (std::string arg; std::getline(cmdline, arg, '\0');)
      if (arg == argument) return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

// A sweep of the tiny experiment on 2048 samples over the learning rates
// `rates` ("[0.01, 0.003]"), 2560 steps a trial: long enough to be stopped in
// the middle of one (in `tmp`, its directory sw/).
std::vector<std::string> long_sweep(const TempDir& tmp, const std::string& rates) {
  write_text(tmp / "tiny.yaml",
             tiny_experiment(2048) + "sweep: {grid: {optimizer.lr: " + rates + "}}\n");
  return {"sweep",          tmp / "tiny.yaml", "checkpoint.every_steps=0",
          "data.workers=0", "train.epochs=40", "train.log_every=50",
          "--out",          tmp / "sw"};
}

}  // namespace

TEST_CASE("a trial stopped by a signal of its own is interrupted, not failed, and resumes") {
  TempDir tmp("sweep-trial-signal");
  const std::vector<std::string> args = long_sweep(tmp, "[0.01, 0.003]");
  {
    TrainerProcess sweep(args, tmp / "1.log");
    // The first trial's own process, once it has trained a while.
    const std::string trial_dir = tmp / "sw/trials/trial-000";
    pid_t trial = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < end &&
           (read_lines(trial_dir + "/metrics.jsonl").size() < 2 ||
            (trial = process_with_argument(trial_dir)) == 0))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(trial != 0);
    kill(trial, SIGTERM);
    CHECK(sweep.wait() == 1);  // the other trial done, this one to resume
  }
  const std::string first = read_text(tmp / "1.log");
  INFO(first);
  auto state = trial_state(tmp / "sw");
  CHECK(state["trial-000"]["status"] == "interrupted");
  CHECK(state["trial-000"].value("failures", 0) == 0);
  CHECK(state["trial-001"]["status"] == "done");
  CHECK(first.find("sweep: trial-000 stopped on a signal of its own: repeat the command to "
                   "resume it") != std::string::npos);
  REQUIRE(run_to_end(args, tmp / "2.log") == 0);
  CHECK(trial_state(tmp / "sw")["trial-000"]["status"] == "done");
  CHECK(read_text(tmp / "sw/logs/trial-000.log").find("resuming from") != std::string::npos);
}

TEST_CASE("a trial that fails does not stop the sweep, is retried, and is reported") {
  TempDir tmp("sweep-fail");
  write_text(tmp / "tiny.yaml", tiny_experiment() + "sweep: {max_retries: 1}\n");
  // A rate of 1e30 passes every check, and the weights overflow: that trial
  // fails at its first log point.
  const std::vector<std::string> args = {
      "sweep", tmp / "tiny.yaml", "train.max_steps=10", "--grid", "optimizer.lr=0.01,1e30,0.003",
      "--out", tmp / "sw"};
  CHECK(run_to_end(args, tmp / "1.log") == 1);
  auto state = trial_state(tmp / "sw");
  CHECK(state["trial-000"]["status"] == "done");
  CHECK(state["trial-002"]["status"] == "done");
  CHECK(state["trial-001"]["status"] == "failed");
  CHECK(state["trial-001"]["failures"] == 2);  // the first try and one retry
  CHECK(state["trial-000"]["failures"] == 0);
  CHECK(state["trial-001"]["error"].get<std::string>().find("lower optimizer.lr") !=
        std::string::npos);
  const std::string table = read_text(tmp / "sw/results.md");
  INFO(table);
  CHECK(table.find("| 1 | trial-0") != std::string::npos);
  CHECK(table.find("trial-001 | failed") != std::string::npos);
  CHECK(table.find("optimizer.lr") != std::string::npos);
  // The failed one is listed last.
  CHECK(table.find("trial-001 | failed") > table.find("trial-002 | done"));
  CHECK(table.find("| failures | error |") != std::string::npos);
  CHECK(table.find("trial-000 | done | ") != std::string::npos);
  const auto csv = read_lines(tmp / "sw/trials.csv");
  REQUIRE(csv.size() == 4);
  CHECK(csv[1].rfind("trial-000,done,0,", 0) == 0);  // ran and finished: no failure
  CHECK(csv[2].rfind("trial-001,failed,2,", 0) == 0);

  // Run again: nothing left to do (done ones skipped, the failure out of retries).
  CHECK(run_to_end(args, tmp / "2.log") == 1);
  CHECK(read_text(tmp / "2.log").find("0 to run") != std::string::npos);
  CHECK(read_text(tmp / "2.log")
            .find("sweep: trial-001 failed with no retries left (sweep.max_retries: 1; the errors "
                  "are in "
                  "results.md)\n    to try again: repeat the command with sweep.max_retries=2\n") !=
        std::string::npos);
  CHECK(count(read_text(tmp / "sw/logs/trial-000.log"), "run directory:") == 1);
}

TEST_CASE("a trial that fails on a config error is not retried; the best trial is named") {
  TempDir tmp("sweep-config-error");
  std::string rows = "a,b,c,y\n";
  for (int i = 0; i < 64; ++i)
    rows += std::to_string(i % 7) + "," + std::to_string(i % 5) + "," + std::to_string(i % 3) +
            "," + std::to_string(i % 2) + "\n";
  write_text(tmp / "a.csv", rows);
  write_text(tmp / "b.csv", rows);
  write_text(tmp / "c.yaml",
             "data:\n  train: {type: csv, path: a.csv}\n  split: 0.25\n"
             "model:\n  layers: [{type: linear, out_features: 2}]\n"
             "train: {batch_size: 8, max_steps: 4000, log_every: 50}\n"
             "sweep: {grid: {data.train.path: ['" +
                 (tmp / "a.csv") + "', '" + (tmp / "b.csv") + "']}, max_retries: 2}\n");
  // b.csv, there when every trial is checked, is gone before its trial
  // starts: that trial's run exits 2, which a retry would only repeat.
  int code = 0;
  {
    TrainerProcess sweep({"sweep", tmp / "c.yaml", "--out", tmp / "sw"}, tmp / "1.log");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < end &&
           read_lines(tmp / "sw/trials/trial-000/metrics.jsonl").empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    fs::remove(tmp / "b.csv");
    code = sweep.wait();
  }
  const std::string log = read_text(tmp / "1.log");
  INFO(log);
  CHECK(code == 1);
  const auto state = trial_state(tmp / "sw");
  REQUIRE(state["trial-000"]["status"] == "done");
  CHECK(state["trial-001"]["status"] == "failed");
  CHECK(state["trial-001"]["failures"] == 1);
  CHECK(log.find("sweep: trial-001 failed on a config error (exit 2; the error is in "
                 "results.md), which a retry repeats: not retried") != std::string::npos);
  CHECK(log.find("no retries left") == std::string::npos);
  // The one finished trial is the best, named with its objective and values.
  CHECK(log.find("sweep: best trial-000: eval.accuracy " +
                 fmt_objective(state["trial-000"]["objective"].get<double>()) +
                 " (data.train.path=" + (tmp / "a.csv") + "); run directory " +
                 (tmp / "sw/trials/trial-000")) != std::string::npos);
}

TEST_CASE("a sweep with a trial config that fails its field checks runs no trial") {
  TempDir tmp("sweep-config");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::vector<std::string> args = {
      "sweep", tmp / "tiny.yaml", "--grid", "optimizer.lr=0.01,-1", "--out", tmp / "sw"};
  CHECK(run_to_end(args, tmp / "1.log") == 2);
  const std::string log = read_text(tmp / "1.log");
  INFO(log);
  CHECK(log.find("--grid flag 1: error: sweep.grid.optimizer.lr: with optimizer.lr=-1: expected "
                 "a number >= 1e-30 and <= 1e+30") != std::string::npos);
  CHECK(log.find("sweep: 1 of 2 trials have config errors; none was run") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "sw"));
  // A misspelt objective is refused too: the results could not rank the trials.
  write_text(tmp / "objective.yaml",
             tiny_experiment() + "sweep: {objective: {metric: eval.acuracy}}\n");
  CHECK(run_to_end({"sweep", tmp / "objective.yaml", "--grid", "optimizer.lr=0.01,0.02", "--out",
                    tmp / "sw"},
                   tmp / "2.log") == 2);
  CHECK(read_text(tmp / "2.log").find("sweep.objective.metric: unknown metric 'eval.acuracy'") !=
        std::string::npos);
  CHECK(read_text(tmp / "2.log").find("did you mean 'eval.accuracy'?") != std::string::npos);
}

TEST_CASE("a sweep stopped in the middle and run again finishes every trial exactly once") {
  TempDir tmp("sweep-resume");
  // Long enough (2560 steps) that the second trial cannot finish between the
  // poll below seeing its second record and the stop signal arriving.
  const std::vector<std::string> args = long_sweep(tmp, "[0.01, 0.003, 0.001]");
  {
    TrainerProcess sweep(args, tmp / "1.log");
    // Stop it once the first trial is done and the second has started training.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < end &&
           !(status_of(tmp / "sw", "trial-000") == "done" &&
             read_lines(tmp / "sw/trials/trial-001/metrics.jsonl").size() >= 2))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    sweep.signal(SIGTERM);
    CHECK(sweep.wait() == 143);
  }
  auto state = trial_state(tmp / "sw");
  INFO(read_text(tmp / "1.log"));
  REQUIRE(state["trial-000"]["status"] == "done");
  REQUIRE(state["trial-001"]["status"] == "interrupted");
  CHECK(state["trial-002"]["status"] == "pending");

  REQUIRE(run_to_end(args, tmp / "2.log") == 0);
  state = trial_state(tmp / "sw");
  for (const char* id : {"trial-000", "trial-001", "trial-002"}) {
    INFO(id);
    CHECK(state[id]["status"] == "done");
    const std::string dir = tmp / ("sw/trials/" + std::string(id));
    CHECK(nlohmann::json::parse(read_text(dir + "/summary.json"))["steps"] == 2560);
    // Every step recorded once, in order.
    std::vector<std::int64_t> steps;
    for (const auto& line : read_lines(dir + "/metrics.jsonl")) {
      const auto record = nlohmann::json::parse(line);
      if (record["split"] == "train") steps.push_back(record["step"]);
    }
    CHECK(std::adjacent_find(steps.begin(), steps.end(), std::greater_equal<>()) == steps.end());
    CHECK(steps.size() == 52);  // every 50 of 2560 steps, and the last
  }
  CHECK(count(read_text(tmp / "sw/logs/trial-000.log"), "run directory:") == 1);
  CHECK(read_text(tmp / "sw/logs/trial-001.log").find("resuming from") != std::string::npos);
  CHECK(read_lines(tmp / "sw/trials.csv").size() == 4);
  // The time left after each trial but the last, at the pace of this sweep's.
  const std::string resumed = read_text(tmp / "2.log");
  CHECK(resumed.find("sweep: trial-001 done (1 to go, eta ") != std::string::npos);
  CHECK(resumed.find("sweep: trial-002 done\n") != std::string::npos);
}

TEST_CASE("a damaged trials.json is reported by trial and field, and no result is lost") {
  TempDir tmp("sweep-damaged-state");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::vector<std::string> args = {"sweep",   tmp / "tiny.yaml",         "train.max_steps=4",
                                         "--grid",  "optimizer.lr=0.01,0.003", "--out",
                                         tmp / "sw"};
  REQUIRE(run_to_end(args, tmp / "1.log") == 0);
  const std::string state_path = tmp / "sw/trials.json";
  const std::string policy =
      "ignored; the sweep goes on as for a trials.json it cannot read: whether a trial finished, "
      "and its result, is read from its run directory, and the file is rewritten\n";
  // Runs the sweep again over `damaged`: it warns, runs nothing (both trials
  // are done) and ranks both.
  const auto rerun = [&](const std::string& damaged, const std::string& log) {
    write_text(state_path, damaged);
    CHECK(run_to_end(args, tmp / log) == 0);
    const std::string out = read_text(tmp / log);
    CHECK(out.find("0 to run") != std::string::npos);
    CHECK(out.find("exception") == std::string::npos);
    const auto state = trial_state(tmp / "sw");
    CHECK(state["trial-000"]["status"] == "done");
    CHECK(state["trial-001"]["status"] == "done");
    const std::string table = read_text(tmp / "sw/results.md");
    CHECK(table.find("| 1 | trial-00") != std::string::npos);
    CHECK(table.find("| 2 | trial-00") != std::string::npos);
    return out;
  };
  auto state = trial_state(tmp / "sw");
  state["trial-000"]["failures"] = "1";
  state["trial-001"]["status"] = nullptr;
  std::string out = rerun(state.dump(), "2.log");
  INFO(out);
  CHECK(out.find("warning: " + state_path +
                 " is damaged at trial-000.failures (expected an integer, found \"1\"): that "
                 "value is " +
                 policy) != std::string::npos);
  CHECK(out.find("warning: " + state_path +
                 " is damaged at trial-001.status (expected pending, running, done, failed or "
                 "interrupted, found null): that value is " +
                 policy) != std::string::npos);
  CHECK(trial_state(tmp / "sw")["trial-000"]["failures"] == 0);  // rewritten

  state = trial_state(tmp / "sw");
  state["trial-000"] = 5;
  out = rerun(state.dump(), "3.log");
  CHECK(out.find("warning: " + state_path +
                 " is damaged at trial-000 (expected an object, found 5): the trial's saved state "
                 "is " +
                 policy) != std::string::npos);

  // Nested deeper than printing it recursively could go.
  out = rerun("{\"trial-000\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
              "deep.log");
  CHECK(out.find("warning: " + state_path +
                 " is damaged at trial-000 (expected an object, found a list of 1)") !=
        std::string::npos);

  out = rerun("{\"trial-000\": {\"status\": \"do", "4.log");
  CHECK(out.find("warning: " + state_path +
                 " is damaged (not JSON): the trials' saved status and failure counts are " +
                 policy) != std::string::npos);
}

TEST_CASE("the sweep's tables say how many steps each trial took and which stopped early") {
  TempDir tmp("sweep-early-stop");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // A min_delta no evaluation can beat: patience 1 stops at the second
  // evaluation (step 4); patience 1000 runs all 48 steps.
  const std::vector<std::string> args = {"sweep",
                                         tmp / "tiny.yaml",
                                         "train.eval_every=2",
                                         "train.early_stopping.min_delta=100",
                                         "--grid",
                                         "train.early_stopping.patience=1,1000",
                                         "--out",
                                         tmp / "sw"};
  REQUIRE(run_to_end(args, tmp / "1.log") == 0);
  const auto state = trial_state(tmp / "sw");
  CHECK(state["trial-000"]["steps"] == 4);
  CHECK(state["trial-000"]["early_stopped"] == true);
  CHECK(state["trial-001"]["steps"] == 48);
  CHECK(state["trial-001"]["early_stopped"] == false);
  const std::string table = read_text(tmp / "sw/results.md");
  INFO(table);
  CHECK(table.find("| eval.accuracy | steps |") != std::string::npos);
  CHECK(table.find("| 4 (early stop) | 1 |") != std::string::npos);
  CHECK(table.find("| 48 | 1000 |") != std::string::npos);
  const auto csv = read_lines(tmp / "sw/trials.csv");
  REQUIRE(csv.size() == 3);
  CHECK(csv[0].rfind("trial,status,failures,objective,steps,early_stopped,", 0) == 0);
  CHECK(csv[1].find(",4,true,1,") != std::string::npos);
  CHECK(csv[2].find(",48,false,1000,") != std::string::npos);
}

TEST_CASE("a second sweep process in the same sweep directory is refused") {
  TempDir tmp("sweep-lock");
  write_text(tmp / "tiny.yaml",
             tiny_experiment(2048) + "sweep: {grid: {optimizer.lr: [0.01, 0.003]}}\n");
  const std::vector<std::string> args = {
      "sweep", tmp / "tiny.yaml", "checkpoint.every_steps=0", "data.workers=0", "train.epochs=40",
      "--out", tmp / "sw"};
  TrainerProcess first(args, tmp / "1.log");
  REQUIRE(wait_for_lines(tmp / "sw/trials/trial-000/metrics.jsonl", 1, std::chrono::seconds(60)));
  CHECK(run_to_end(args, tmp / "2.log") == 2);
  CHECK(read_text(tmp / "2.log")
            .find("sweep directory " + tmp / "sw" + " is in use by another trainer process (pid " +
                  std::to_string(first.pid()) + ")") != std::string::npos);
  first.signal(SIGTERM);
  CHECK(first.wait() == 143);
}

TEST_CASE("a file where the sweep needs a folder is named in plain words, with what to do") {
  TempDir tmp("sweep-file");
  write_text(tmp / "tiny.yaml", tiny_experiment(64) + "sweep: {grid: {optimizer.lr: [0.1]}}\n");
  write_text(tmp / "taken", "");
  // The path the user chose: a usage error, as a run directory's is.
  CHECK(run_to_end({"sweep", tmp / "tiny.yaml", "--out", tmp / "taken/sw"}, tmp / "1.log") == 2);
  CHECK(read_text(tmp / "1.log") ==
        "error: cannot create sweep directory '" + tmp / "taken/sw" +
            "': Not a directory\n    a file stands where a folder belongs (a folder above it): "
            "move it aside, or choose another directory (--out, or output.dir)\n");

  // In a sweep's own directory: refused before a trial runs, and nothing is lost.
  const std::vector<std::string> args = {"sweep", tmp / "tiny.yaml", "--out", tmp / "sw"};
  REQUIRE(run_to_end(args, tmp / "2.log") == 0);
  fs::remove(tmp / "sw/trials.json");
  fs::create_directory(tmp / "sw/trials.json");
  CHECK(run_to_end(args, tmp / "3.log") == 2);
  CHECK(read_text(tmp / "3.log") ==
        "error: '" + tmp / "sw/trials.json" +
            "' is a folder where the sweep writes its trials.json file.\n    move it aside and "
            "repeat the command (the trials' results are read again from their run "
            "directories)\n");
  fs::remove(tmp / "sw/trials.json");
  fs::remove_all(tmp / "sw/logs");
  write_text(tmp / "sw/logs", "");
  CHECK(run_to_end(args, tmp / "4.log") == 2);
  CHECK(read_text(tmp / "4.log") == "error: '" + tmp / "sw/logs" +
                                        "' is not a folder, and the sweep keeps its logs folder "
                                        "there.\n    move it aside and repeat the command\n");
  CHECK(fs::exists(tmp / "sw/trials/trial-000/summary.json"));
  // A record that names no config is called damaged, not another sweep.
  fs::remove(tmp / "sw/logs");
  write_text(tmp / "sw/sweep.yaml", "nonsense: [\n");
  CHECK(run_to_end(args, tmp / "5.log") == 2);
  CHECK(read_text(tmp / "5.log") ==
        "error: the sweep directory '" + tmp / "sw" +
            "' has a sweep.yaml that names no config (it was edited or damaged), so its trials "
            "cannot be matched to this sweep's.\n    restore " +
            tmp / "sw/sweep.yaml" +
            " (the sweep writes it as it starts), or use a new --out directory\n");
  CHECK(fs::exists(tmp / "sw/trials/trial-000/summary.json"));
}

TEST_CASE("--parallel out of its range is refused; no more trials run at once than there are") {
  TempDir tmp("sweep-parallel");
  write_text(tmp / "tiny.yaml",
             tiny_experiment() + "sweep: {grid: {optimizer.lr: [0.01, 0.003]}}\n");
  for (const char* parallel : {"9000000000000000000", "1025", "0"}) {
    INFO(parallel);
    const std::string log = tmp / ("refused-" + std::string(parallel) + ".log");
    CHECK(run_to_end({"sweep", tmp / "tiny.yaml", "--parallel", parallel, "--out", tmp / "sw"},
                     log) == 2);
    CHECK(read_text(log).find("error: --parallel: expected an integer >= 1 and <= 1024, found '" +
                              std::string(parallel) + "'") == 0);
    CHECK_FALSE(fs::exists(tmp / "sw"));
  }
  REQUIRE(run_to_end({"sweep", tmp / "tiny.yaml", "train.epochs=1", "--parallel", "1024", "--out",
                      tmp / "sw"},
                     tmp / "run.log") == 0);
  CHECK(read_text(tmp / "run.log").find("sweep: 2 trials, 2 to run, 2 at once;") !=
        std::string::npos);
}

TEST_CASE("a swept model key is checked against the model before any trial runs") {
  TempDir tmp("sweep-model-key");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  CHECK(run_to_end({"sweep", tmp / "tiny.yaml", "--grid", "model.layers[1].out_features=0,8",
                    "--grid", "optimizer.lr=0.1,0.01", "--out", tmp / "sw"},
                   tmp / "1.log") == 2);
  const std::string log = read_text(tmp / "1.log");
  INFO(log);
  CHECK(log.find("--grid flag 1: error: sweep.grid.model.layers[1].out_features: with "
                 "model.layers[1].out_features=0: expected an integer >= 1") != std::string::npos);
  // Both trials with the bad model count, though the model is checked once.
  CHECK(log.find("sweep: 2 of 4 trials have config errors; none was run") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "sw/trials"));
  // The config's own model, when the sweep changes other keys: checked too.
  write_text(tmp / "typo.yaml", replaced(tiny_experiment(), "{type: relu}", "{type: relux}"));
  CHECK(run_to_end(
            {"sweep", tmp / "typo.yaml", "--grid", "optimizer.lr=0.1,0.2", "--out", tmp / "sw2"},
            tmp / "3.log") == 2);
  INFO(read_text(tmp / "3.log"));
  CHECK(read_text(tmp / "3.log").find("unknown layer type 'relux'") != std::string::npos);
  CHECK(read_text(tmp / "3.log").find("sweep: 2 of 2 trials have config errors") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "sw2/trials"));
  // validate says the same of the config's own sweep section.
  write_text(tmp / "swept.yaml",
             tiny_experiment() + "sweep:\n  grid:\n    model.layers[1].type: [linear, lienar]\n");
  const auto validate = run_to_end({"validate", tmp / "swept.yaml"}, tmp / "2.log");
  INFO(read_text(tmp / "2.log"));
  CHECK(validate == 2);
  CHECK(read_text(tmp / "2.log").find("lienar") != std::string::npos);
}

TEST_CASE("a swept `devices` is checked on this machine before any trial runs") {
  // GPU 99 exists on no machine these tests run on (nor does any GPU without
  // a CUDA build or a driver).
  TempDir tmp("sweep-devices");
  write_text(tmp / "tiny.yaml", tiny_experiment(64));
  CHECK(run_to_end({"sweep", tmp / "tiny.yaml", "--grid", "devices=cpu,[99]", "--out", tmp / "sw"},
                   tmp / "1.log") == 2);
  const std::string log = read_text(tmp / "1.log");
  INFO(log);
  CHECK(log.find("--grid flag 1: error: sweep.grid.devices: with devices=[99]") !=
        std::string::npos);
  CHECK(log.find("sweep: 1 of 2 trials have config errors; none was run") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "sw/trials"));
  write_text(tmp / "swept.yaml",
             tiny_experiment(64) + "sweep:\n  grid:\n    devices: [cpu, [99]]\n");
  CHECK(run_to_end({"validate", tmp / "swept.yaml"}, tmp / "2.log") == 2);
  INFO(read_text(tmp / "2.log"));
  CHECK(read_text(tmp / "2.log").find("error: sweep.grid.devices: with devices=[99]") !=
        std::string::npos);
  // The config's own devices: its error once, not each swept value's.
  write_text(tmp / "own.yaml", tiny_experiment(64) +
                                   "devices: [99]\nsweep:\n  grid:\n    train.batch_size: [16, "
                                   "32]\n");
  CHECK(run_to_end({"validate", tmp / "own.yaml"}, tmp / "3.log") == 2);
  INFO(read_text(tmp / "3.log"));
  CHECK(read_text(tmp / "3.log").find("error: devices:") != std::string::npos);
  CHECK(read_text(tmp / "3.log").find("sweep.grid.train.batch_size") == std::string::npos);
  CHECK(read_text(tmp / "3.log").find("1 error") != std::string::npos);
}

TEST_CASE("a sweep directory refuses trials of a changed config and resumes an unchanged one") {
  TempDir tmp("sweep-changed-config");
  write_text(tmp / "base.yaml", tiny_experiment());
  const std::string sweep = "sweep: {grid: {optimizer.lr: [0.01, 0.003]}}\n";
  write_text(tmp / "sw.yaml", "extends: base.yaml\n" + sweep);
  const std::vector<std::string> args = {"sweep", tmp / "sw.yaml", "train.max_steps=4", "--out",
                                         tmp / "sw"};
  REQUIRE(run_to_end(args, tmp / "1.log") == 0);
  // Unchanged, or with another objective (which does not change the trials): it resumes.
  CHECK(run_to_end(args, tmp / "2.log") == 0);
  CHECK(read_text(tmp / "2.log").find("0 to run") != std::string::npos);
  write_text(tmp / "sw.yaml", "extends: base.yaml\n" +
                                  replaced(sweep, "]}}", "]}, objective: {metric: eval.loss}}"));
  CHECK(run_to_end(args, tmp / "3.log") == 0);
  // A sweep directory of an older trainer, which filled in fewer defaults
  // (here no layer's bias): the same config, so it resumes, and is recorded
  // as this trainer resolves it.
  const std::string resolved = read_text(tmp / "sw/config.yaml");
  const std::string older = replaced(resolved, "      bias: true\n", "");
  REQUIRE(older != resolved);
  write_text(tmp / "sw/config.yaml", older);
  const std::string record = read_text(tmp / "sw/sweep.yaml");
  write_text(tmp / "sw/sweep.yaml", replaced(record, trainer::train::sha256_hex(resolved),
                                             trainer::train::sha256_hex(older)));
  CHECK(run_to_end(args, tmp / "5.log") == 0);
  CHECK(read_text(tmp / "5.log").find("0 to run") != std::string::npos);
  CHECK(read_text(tmp / "sw/sweep.yaml") == record);
  // The file it extends changed: the trials there ran another model.
  write_text(tmp / "base.yaml",
             replaced(tiny_experiment(), "out_features: 32", "out_features: 16"));
  CHECK(run_to_end(args, tmp / "4.log") == 2);
  const std::string log = read_text(tmp / "4.log");
  INFO(log);
  CHECK(log.find("error: the sweep directory '" + tmp / "sw" +
                 "' holds trials of another version of the config: since they started, "
                 "model.layers[1].out_features: 32 -> 16; resuming there would rank trials of "
                 "both versions together.\n    use a new --out directory for the config as it is "
                 "now, or restore the config (" +
                 tmp / "sw/config.yaml" + " holds it") != std::string::npos);
  CHECK(count(read_text(tmp / "sw/logs/trial-000.log"), "run directory:") == 1);  // none ran again
  // Restored: it resumes.
  write_text(tmp / "base.yaml", tiny_experiment());
  CHECK(run_to_end(args, tmp / "5.log") == 0);
}

TEST_CASE("a sweep of a changed config in a new default directory notes the earlier one") {
  TempDir tmp("sweep-default-dir");
  write_text(tmp / "sw.yaml", tiny_experiment() + "sweep: {grid: {optimizer.lr: [0.01, 0.003]}}\n");
  const std::vector<std::string> args = {"sweep", tmp / "sw.yaml", "train.max_steps=2",
                                         "output.dir=" + (tmp / "runs")};
  REQUIRE(run_to_end(args, tmp / "1.log") == 0);
  CHECK(read_text(tmp / "1.log").find("note: a new sweep") == std::string::npos);
  // The same config goes on in its own directory, without a note.
  REQUIRE(run_to_end(args, tmp / "2.log") == 0);
  CHECK(read_text(tmp / "2.log").find("note: a new sweep") == std::string::npos);
  std::vector<std::string> changed = args;
  changed.push_back("train.log_every=1");
  REQUIRE(run_to_end(changed, tmp / "3.log") == 0);
  const std::string log = read_text(tmp / "3.log");
  INFO(log);
  CHECK(log.find("note: a new sweep in " + tmp / "runs/") != std::string::npos);
  CHECK(log.find("whose trials it does not take over; to go on with one: trainer sweep " +
                 tmp / "sw.yaml" + " --out " + tmp / "runs/") != std::string::npos);
  // Another file of the same name: those sweeps are no earlier sweep of it.
  write_text(tmp / "other.yaml", read_text(tmp / "sw.yaml"));
  std::vector<std::string> other = args;
  other[1] = tmp / "other.yaml";
  REQUIRE(run_to_end(other, tmp / "4.log") == 0);
  CHECK(read_text(tmp / "4.log").find("note: a new sweep") == std::string::npos);
}

TEST_CASE("a sweep shows the config's warnings once, as validate does") {
  TempDir tmp("sweep-warnings");
  write_text(tmp / "tiny.yaml", kTinyLearningRateSweep);
  REQUIRE(run_to_end({"sweep", tmp / "tiny.yaml", "optimizer.momentum=0.5", "--out", tmp / "sw"},
                     tmp / "1.log") == 0);
  CHECK(count(read_text(tmp / "1.log"),
              "<command line>:1:20: warning: optimizer.momentum: has no effect with "
              "optimizer.type: adam") == 1);
  // Not one that every trial's values make moot.
  REQUIRE(run_to_end({"sweep", tmp / "tiny.yaml", "train.early_stopping.min_delta=0.5", "--grid",
                      "train.early_stopping.patience=3,5", "--out", tmp / "sw2"},
                     tmp / "2.log") == 0);
  CHECK(read_text(tmp / "2.log").find(": warning:") == std::string::npos);
  // A swept key without effect is the sweep's warning, once, at the sweep,
  // though the trial at its default (0.9) has none of its own; validate says
  // it too.
  const std::string swept_momentum =
      "warning: sweep.grid.optimizer.momentum: the sweep varies optimizer.momentum, which has no "
      "effect with optimizer.type: adam (it applies to sgd)";
  REQUIRE(run_to_end({"sweep", tmp / "tiny.yaml", "train.max_steps=1", "--grid",
                      "optimizer.momentum=0.8,0.9", "--out", tmp / "sw3"},
                     tmp / "3.log") == 0);
  CHECK(count(read_text(tmp / "3.log"), "--grid flag 1: " + swept_momentum) == 1);
  CHECK(count(read_text(tmp / "3.log"), "warning: optimizer.momentum") == 0);
  write_text(tmp / "momentum.yaml",
             tiny_experiment(64) + "sweep: {grid: {optimizer.momentum: [0.9, 0.8]}}\n");
  REQUIRE(run_to_end({"validate", tmp / "momentum.yaml"}, tmp / "4.log") == 0);
  CHECK(count(read_text(tmp / "4.log"), swept_momentum) == 1);
}

TEST_CASE("trainer validate refuses the sweep sections trainer sweep refuses") {
  TempDir tmp("sweep-validate");
  const auto validate = [&](const std::string& sweep, const std::vector<std::string>& overrides) {
    write_text(tmp / "c.yaml", tiny_experiment() + sweep);
    std::vector<std::string> args = {"validate", tmp / "c.yaml"};
    args.insert(args.end(), overrides.begin(), overrides.end());
    const int code = run_to_end(args, tmp / "v.log");
    return std::make_pair(code, read_text(tmp / "v.log"));
  };
  const std::string line = std::to_string(count(tiny_experiment(), "\n") + 1);
  // Seeds are values of `seed` like any other swept value.
  auto [code, log] = validate("sweep: {seeds: [1, -1]}\n", {});
  CHECK(code == 2);
  CHECK(log == tmp / "c.yaml" + ":" + line +
                   ":9: error: sweep.seeds: with seed=-1: expected an integer >= 0, found integer "
                   "-1\n1 error\n");
  // A section with nothing to sweep yet passes: `trainer sweep --grid` adds the grid.
  std::tie(code, log) = validate("sweep: {objective: {metric: eval.loss, mode: min}}\n", {});
  CHECK(code == 0);
  // A sweep section given on the command line is checked like one in the file.
  std::tie(code, log) = validate("", {"sweep.grid.x=[1, 2]"});
  CHECK(code == 2);
  CHECK(log.find("<command line>:1:12: error: sweep.grid.x: with x=1: unknown key 'x'") !=
        std::string::npos);
  // A random search's trials written wrong is one error.
  std::tie(code, log) =
      validate("sweep: {random: {trials: 0, params: {optimizer.lr: {uniform: [0.1, 0.2]}}}}\n", {});
  CHECK(code == 2);
  CHECK(count(log, "error:") == 1);
  CHECK(log.find("sweep.random.trials: expected an integer >= 1, found integer 0") !=
        std::string::npos);
  // A swept value the data refuses (a batch its 512 samples cannot fill)
  // is refused as the sweep refuses it, at the value, not after an "ok".
  std::tie(code, log) = validate("sweep: {grid: {train.batch_size: [32, 1024]}}\n", {});
  CHECK(code == 2);
  CHECK(log.find("error: sweep.grid.train.batch_size: with train.batch_size=1024: the training "
                 "set's 512 samples do not fill one batch of 1024") != std::string::npos);
  CHECK(count(log, "error:") == 1);
  // The config's own error is reported once, as its own, not again for
  // every swept value that leaves it as it is.
  std::string big_batch = tiny_experiment();
  big_batch.replace(big_batch.find("batch_size: 32"), 14, "batch_size: 1024");
  write_text(tmp / "c.yaml", big_batch + "sweep: {seeds: [1, 2], grid: {train.epochs: [1, 2]}}\n");
  CHECK(run_to_end({"validate", tmp / "c.yaml"}, tmp / "v.log") == 2);
  log = read_text(tmp / "v.log");
  INFO(log);
  CHECK(count(log, "error:") == 1);
  CHECK(log.find("error: train.batch_size: the training set's 512 samples do not fill one batch "
                 "of 1024") != std::string::npos);
}

TEST_CASE("every command refuses a sweep section trainer sweep refuses, not only validate") {
  TempDir tmp("sweep-everywhere");
  write_text(tmp / "c.yaml", tiny_experiment() + "sweep: {bogus: 1, random: {trials: -5}}\n");
  const std::string line = std::to_string(count(tiny_experiment(), "\n") + 1);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"print-config", tmp / "c.yaml"},
        {"plan", tmp / "c.yaml"},
        {"time", tmp / "c.yaml", "--steps", "1"},
        {"lr-find", tmp / "c.yaml", "--out", tmp / "lr"},
        {"run", tmp / "c.yaml", "--out", tmp / "run"}}) {
    INFO(args[0]);
    CHECK(run_to_end(args, tmp / "out.log") == 2);
    const std::string log = read_text(tmp / "out.log");
    CHECK(log.find(tmp / "c.yaml" + ":" + line + ":9: error: sweep.bogus: unknown key 'bogus'") !=
          std::string::npos);
    CHECK(log.find("sweep.random.trials: expected an integer >= 1") != std::string::npos);
    CHECK(log.find("\n2 errors\n") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(tmp / "run"));
  CHECK_FALSE(fs::exists(tmp / "lr"));
  // A sound section is no error: `run` trains the config's own values.
  write_text(tmp / "good.yaml", tiny_experiment() + "sweep: {grid: {optimizer.lr: [0.1, 0.2]}}\n");
  CHECK(run_to_end({"print-config", tmp / "good.yaml"}, tmp / "out.log") == 0);
  // A run directory whose config an earlier trainer accepted resumes: the
  // resume trains the config its run began with and does not use the section.
  write_text(tmp / "plain.yaml", tiny_experiment());
  CHECK(run_to_end({"run", tmp / "plain.yaml", "--out", tmp / "old"}, tmp / "out.log") == 0);
  write_text(tmp / "old/config.yaml", read_text(tmp / "old/config.yaml") + "sweep: {bogus: 1}\n");
  CHECK(run_to_end({"run", "--resume", tmp / "old", "train.epochs=4"}, tmp / "out.log") == 0);
  CHECK(read_text(tmp / "out.log").find("error") == std::string::npos);
  // Another config given to the resume, or an override of the section, is
  // checked as everywhere.
  CHECK(run_to_end({"run", "--resume", tmp / "old", tmp / "c.yaml", "train.epochs=5"},
                   tmp / "out.log") == 2);
  CHECK(read_text(tmp / "out.log").find("sweep.bogus: unknown key 'bogus'") != std::string::npos);
  CHECK(run_to_end({"run", "--resume", tmp / "old", "train.epochs=5", "sweep.seeds=[1, x]"},
                   tmp / "out.log") == 2);
}

TEST_CASE("a trial log the sweep cannot write stops the sweep, naming it") {
  // The trial's output would otherwise go to the sweep's own console, and
  // its failure could not be read back. A folder where the log belongs
  // refuses it even to root.
  TempDir tmp("sweep-log");
  write_text(tmp / "c.yaml", tiny_experiment() + "sweep: {grid: {optimizer.lr: [1e30, 5e29]}}\n");
  const std::string out = tmp / "sw it's";  // a path a shell needs quoted
  CHECK(run_to_end({"sweep", tmp / "c.yaml", "--out", out}, tmp / "1.log") == 1);
  CHECK(read_text(tmp / "1.log").find("trial-000 failed") != std::string::npos);
  CHECK(read_text(tmp / "1.log").find("trial-001 failed") != std::string::npos);
  // The attempt's line is a command to paste: its paths quoted for the shell.
  const std::string log = out + "/logs/trial-000.log";
  const std::string quoted_out = "'" + tmp / "sw it'\\''s";
  // The binary as it ran (the quick start's build/trainer is on no PATH).
  const std::string binary = fs::canonical(TRAINER_BINARY).string();
  CHECK(read_text(log).rfind("sweep: attempt 1 of trial-000: " + binary + " run " + quoted_out +
                                 "/configs/trial-000.yaml' --out " + quoted_out +
                                 "/trials/trial-000'\n",
                             0) == 0);
  // Side by side: trial-000 starts, trial-001's log cannot be written. The
  // sweep stops trial-000 (or sees it fail) and records it before it ends.
  const std::string second_log = out + "/logs/trial-001.log";
  fs::remove(second_log);
  fs::create_directory(second_log);
  CHECK(
      run_to_end({"sweep", tmp / "c.yaml", "--out", out, "--parallel", "2", "sweep.max_retries=1"},
                 tmp / "2.log") == 1);
  const std::string second = read_text(tmp / "2.log");
  INFO(second);
  CHECK(second.find("error: cannot write the trial's log '" + second_log + "': Is a directory") !=
        std::string::npos);
  CHECK(second.find("trial-000 started") != std::string::npos);
  CHECK(second.find("trial-001 started") == std::string::npos);
  const std::string table = read_text(out + "/trials.csv");
  INFO(table);
  CHECK(table.find("running") == std::string::npos);
  CHECK(table.find("trial-001,failed,1,") != std::string::npos);  // as it was
}

TEST_CASE("errors in the sweep section's values are reported where they are written, once") {
  TempDir tmp("sweep-section-errors");
  const std::string config = tiny_experiment() +
                             "sweep:\n  grid:\n    optimizer.lrr: [0.1, 0.01]\n"
                             "    train.batch_size: [32, 0]\n";
  write_text(tmp / "bad.yaml", config);
  const std::string lrr_line = std::to_string(count(tiny_experiment(), "\n") + 3);
  const std::string batch_line = std::to_string(count(tiny_experiment(), "\n") + 4);
  CHECK(run_to_end({"sweep", tmp / "bad.yaml", "--out", tmp / "sw"}, tmp / "1.log") == 2);
  const std::string log = read_text(tmp / "1.log");
  INFO(log);
  const std::string lrr = tmp / "bad.yaml" + ":" + lrr_line +
                          ":5: error: sweep.grid.optimizer.lrr: with optimizer.lrr=0.1: unknown "
                          "key 'lrr'\n    did you mean 'lr'?\n";
  const std::string batch = tmp / "bad.yaml" + ":" + batch_line +
                            ":5: error: sweep.grid.train.batch_size: with train.batch_size=0: "
                            "expected an integer >= 1";
  CHECK(count(log, lrr) == 1);
  CHECK(count(log, batch) == 1);
  // The misspelt key is one error, whatever the values: named by the first.
  CHECK(count(log, "with optimizer.lrr=0.01: unknown key 'lrr'") == 0);
  CHECK(log.find("<command line>") == std::string::npos);
  CHECK(log.find("sweep: 4 of 4 trials have config errors; none was run") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "sw"));
  // validate says the same.
  CHECK(run_to_end({"validate", tmp / "bad.yaml"}, tmp / "2.log") == 2);
  CHECK(read_text(tmp / "2.log").find(lrr) != std::string::npos);
  CHECK(read_text(tmp / "2.log").find(batch) != std::string::npos);
  CHECK(count(read_text(tmp / "2.log"), "unknown key 'lrr'") == 1);
  CHECK(read_text(tmp / "2.log").find("\n2 errors\n") != std::string::npos);
  // A --grid flag's: named by the flag, once, not as one of the command line's overrides.
  write_text(tmp / "good.yaml", tiny_experiment());
  CHECK(run_to_end({"sweep", tmp / "good.yaml", "train.max_steps=3", "--grid", "optimizer.lrr=1,2",
                    "--out", tmp / "sw"},
                   tmp / "3.log") == 2);
  CHECK(read_text(tmp / "3.log") ==
        "--grid flag 1: error: sweep.grid.optimizer.lrr: with optimizer.lrr=1: unknown key "
        "'lrr'\n    did you mean 'lr'?\nsweep: 2 of 2 trials have config errors; none was run\n");
}

TEST_CASE("every trial's data is checked before any runs, once per setting the checks read") {
  TempDir tmp("sweep-data-checks");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // 1000 passes the field checks but does not fill a batch from 512 samples;
  // the checks of 16 come first.
  CHECK(run_to_end({"sweep", tmp / "tiny.yaml", "--grid", "train.batch_size=16,1000", "--grid",
                    "optimizer.lr=0.1,0.01", "--out", tmp / "sw"},
                   tmp / "1.log") == 2);
  const std::string log = read_text(tmp / "1.log");
  INFO(log);
  CHECK(log.find("do not fill one batch of 1000") != std::string::npos);
  CHECK(log.find("sweep: 2 of 4 trials have config errors; none was run") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "sw/trials"));
}

TEST_CASE("a trial whose config no longer matches its run directory stops the sweep") {
  TempDir tmp("sweep-trial-config");
  write_text(tmp / "tiny.yaml", tiny_experiment(64));
  const std::vector<std::string> args = {"sweep",   tmp / "tiny.yaml",        "train.max_steps=4",
                                         "--grid",  "optimizer.lr=0.01,0.02", "--out",
                                         tmp / "sw"};
  REQUIRE(run_to_end(args, tmp / "1.log") == 0);
  // The same sweep named by another spelling of the config's path is the same sweep.
  std::vector<std::string> spelled = args;
  spelled[1] = tmp / "./tiny.yaml";
  REQUIRE(run_to_end(spelled, tmp / "2.log") == 0);
  CHECK(read_text(tmp / "2.log").find("0 to run") != std::string::npos);
  // A trial resumed by hand with other settings is not ranked with the others.
  REQUIRE(run_to_end({"run", "--resume", tmp / "sw/trials/trial-001", "train.max_steps=6"},
                     tmp / "3.log") == 0);
  CHECK(run_to_end(args, tmp / "4.log") == 2);
  const std::string refused = read_text(tmp / "4.log");
  INFO(refused);
  CHECK(refused.find("error: the run directory of trial-001 in the sweep directory '" +
                     (tmp / "sw") +
                     "' holds another config than this sweep gives it: "
                     "train.max_steps: 6 -> 4") != std::string::npos);
}

TEST_CASE("trainer run of a config with a sweep section says it trains the config's own values") {
  TempDir tmp("sweep-run-note");
  write_text(tmp / "tiny.yaml", kTinyLearningRateSweep);
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "train.max_steps=2", "--out", tmp / "run"},
                     tmp / "1.log") == 0);
  CHECK(count(read_text(tmp / "1.log"), "note: the sweep: section is read by `trainer sweep " +
                                            (tmp / "tiny.yaml") + "`") == 1);
  // Not again when the run goes on.
  REQUIRE(run_to_end({"run", "--resume", tmp / "run", "train.max_steps=3"}, tmp / "2.log") == 0);
  CHECK(read_text(tmp / "2.log").find("sweep: section") == std::string::npos);
}

TEST_CASE("a sweep resumes with init_from through a link and a config named through a link") {
  TempDir tmp("sweep-links");
  write_text(tmp / "tiny.yaml", tiny_experiment(64));
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "train.max_steps=2", "--out", tmp / "src"},
                     tmp / "0.log") == 0);
  // checkpoints/last is a link; the trials' config.yaml names where it led.
  const std::vector<std::string> args = {
      "sweep",
      tmp / "tiny.yaml",
      "train.max_steps=2",
      "model.init_from=" + (tmp / "src/checkpoints/last/model.safetensors"),
      "--grid",
      "optimizer.lr=0.01,0.02",
      "--out",
      tmp / "sw"};
  REQUIRE(run_to_end(args, tmp / "1.log") == 0);
  REQUIRE(run_to_end(args, tmp / "2.log") == 0);
  CHECK(read_text(tmp / "2.log").find("0 to run") != std::string::npos);
  // A config named through a link extends from the link's folder, as `run` reads it.
  fs::create_directories(tmp / "exp");
  fs::create_directories(tmp / "shared");
  write_text(tmp / "shared/real.yaml", "extends: base.yaml\n");
  write_text(tmp / "exp/base.yaml",
             replaced(tiny_experiment(64), "out_features: 32", "out_features: 16"));
  write_text(tmp / "shared/base.yaml",
             replaced(tiny_experiment(64), "out_features: 32", "out_features: 8"));
  fs::create_symlink("../shared/real.yaml", tmp / "exp/link.yaml");
  REQUIRE(run_to_end({"sweep", tmp / "exp/link.yaml", "train.max_steps=1", "--grid",
                      "optimizer.lr=0.01", "--out", tmp / "sw2"},
                     tmp / "3.log") == 0);
  const std::string trial = read_text(tmp / "sw2/configs/trial-000.yaml");
  CHECK(trial.find("out_features: 16") != std::string::npos);
  CHECK(trial.find("out_features: 8\n") == std::string::npos);
}
