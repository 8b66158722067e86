// labels: mpi
// Data-parallel training on CPU ranks, end to end through `trainer run`:
// 2 ranks x global batch 128 train like 1 rank x 128 (bucketed overlap or
// not; started by trainer's own launcher or by mpirun; with dropout, also
// against micro-batches of the same global batch), evaluate a shard each and
// report the whole eval set's metrics, also a CNN with SyncBN (and, without
// sync, not), a checkpoint resumes on another number of ranks
// and continues like the uninterrupted run (ranks that find different
// checkpoints stop with an error naming each), lr scaling is applied and
// recorded, a batch that does not divide is one clear error, and a rank that
// is killed or hangs ends the job with an error naming it, while a slow
// checkpoint write is waited for under its own timeout; a rank that fails
// alone has the job's failure recorded in summary.json by the launcher.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_image_fixtures.h"

namespace fs = std::filesystem;
using trainer::testing::run_trainer;

namespace {

const fs::path kRoot = fs::temp_directory_path() / "trainer_test_dist";

// A small MLP without batchnorm or dropout on synthetic data.
const char* kMlpLayers = R"(
    - {type: flatten}
    - {type: linear, name: fc1, out_features: 32}
    - {type: relu}
    - {type: linear, name: fc2, out_features: 16}
    - {type: relu}
    - {type: linear, name: fc3, out_features: 4})";

// The same MLP with dropout after each hidden layer.
const char* kDropoutMlpLayers = R"(
    - {type: flatten}
    - {type: linear, name: fc1, out_features: 32}
    - {type: relu}
    - {type: dropout, name: drop1, p: 0.3}
    - {type: linear, name: fc2, out_features: 16}
    - {type: relu}
    - {type: dropout, name: drop2, p: 0.2}
    - {type: linear, name: fc3, out_features: 4})";

fs::path write_config(const std::string& name, const std::string& extra = "",
                      const char* layers = kMlpLayers) {
  fs::create_directories(kRoot);
  const fs::path path = kRoot / (name + ".yaml");
  std::ofstream(path) << "name: " << name << R"(
seed: 3
data:
  train: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 512, seed: 1}
  eval: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 128, seed: 2}
  workers: 1
model:
  layers:)" << layers << R"(
  loss: {type: cross_entropy}
optimizer: {type: sgd, lr: 0.2, momentum: 0.9}
train: {batch_size: 128, max_steps: 8, log_every: 1}
backend: {threads: 1}
)" << extra;
  return path;
}

// A small CNN with batch normalization after the convolution (NCHW) and
// after a linear layer ([N, C]), on synthetic 3x8x8 images; `sync` for both.
fs::path write_cnn_config(const std::string& name, bool sync, const std::string& extra = "") {
  fs::create_directories(kRoot);
  const fs::path path = kRoot / (name + ".yaml");
  const std::string bn = sync ? ", sync: true}" : "}";
  std::ofstream(path) << "name: " << name << R"(
seed: 5
data:
  train: {type: synthetic, shape: [3, 8, 8], classes: 4, size: 512, seed: 1}
  eval: {type: synthetic, shape: [3, 8, 8], classes: 4, size: 128, seed: 2}
  workers: 1
model:
  layers:
    - {type: conv2d, name: conv1, out_channels: 8, kernel: 3, padding: 1, bias: false}
    - {type: batchnorm, name: bn1)"
                      << bn << R"(
    - {type: relu}
    - {type: maxpool2d, kernel: 2}
    - {type: flatten}
    - {type: linear, name: fc1, out_features: 16, bias: false}
    - {type: batchnorm, name: bn2)"
                      << bn << R"(
    - {type: relu}
    - {type: linear, name: fc2, out_features: 4}
  loss: {type: cross_entropy}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
schedule: {type: constant}
train: {batch_size: 128, max_steps: 8, log_every: 1}
backend: {threads: 1}
)" << extra;
  return path;
}

std::vector<double> train_losses(const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<double> losses;
  std::string line;
  while (std::getline(in, line)) {
    const auto r = nlohmann::json::parse(line);
    if (r["split"] == "train") losses.push_back(r["loss"].get<double>());
  }
  return losses;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void check_same_training(const fs::path& one, const fs::path& two, double rtol = 1e-6) {
  const auto a = train_losses(one), b = train_losses(two);
  REQUIRE(a.size() == 8);
  REQUIRE(b.size() == a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1 << ": " << a[i] << " vs " << b[i]);
    CHECK(std::abs(a[i] - b[i]) <= rtol * std::abs(a[i]));
  }
  // The model after the last step, through the evaluation of the root rank.
  const double ea = read_json(one / "summary.json")["final_eval"]["loss"].get<double>();
  const double eb = read_json(two / "summary.json")["final_eval"]["loss"].get<double>();
  CHECK(std::abs(ea - eb) <= rtol * std::abs(ea));
  CHECK(a.back() != a.front());  // the parameters moved (random labels: no accuracy to expect)
}

std::string mpirun_prefix(int ranks) {
  return "mpirun -np " + std::to_string(ranks) + (geteuid() == 0 ? " --allow-run-as-root" : "") +
         " --oversubscribe --bind-to none ";
}

// A `trainer run` in the background; its output goes to a file.
struct BackgroundRun {
  fs::path log, rc;
  explicit BackgroundRun(const std::string& env, const std::string& args, const std::string& name) {
    log = kRoot / (name + ".log");
    rc = kRoot / (name + ".rc");
    fs::remove(rc);
    const std::string cmd = "(" + env + " " + std::string(TRAINER_BINARY) + " " + args + " >" +
                            log.string() + " 2>&1; echo $? >" + rc.string() + ") &";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  std::string output() const {
    std::ifstream in(log);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // The exit code, or -1 when it has not ended within `seconds`.
  int wait(double seconds) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      std::ifstream in(rc);
      int code = -1;
      if (in >> code) return code;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
};

// The pid of rank `rank` of the job whose command line contains `marker`.
pid_t find_rank(int rank, const std::string& marker) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline_file(entry.path() / "cmdline"), environ_file(entry.path() / "environ");
    std::stringstream cmdline, environ;
    cmdline << cmdline_file.rdbuf();
    environ << environ_file.rdbuf();
    const std::string c = cmdline.str(), e = environ.str();
    if (c.find(marker) == std::string::npos || c.find("mpirun") != std::string::npos) continue;
    if (e.find(std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0') ==
        std::string::npos)
      continue;
    return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// Waits until the job has trained a step (a train record in metrics.jsonl).
bool wait_for_training(const fs::path& dir, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (fs::exists(dir / "metrics.jsonl") && fs::file_size(dir / "metrics.jsonl") > 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace

TEST_CASE("2 ranks x global batch 128 train like 1 rank x 128") {
  const fs::path config = write_config("equal");
  const fs::path one = kRoot / "equal_1", two = kRoot / "equal_2",
                 two_small = kRoot / "equal_2_small_buckets";
  for (const auto& d : {one, two, two_small}) fs::remove_all(d);

  auto r1 = run_trainer("run " + config.string() + " --out " + one.string(), true);
  INFO(r1.out);
  REQUIRE(r1.code == 0);
  CHECK_FALSE(fs::exists(one / "distributed.json"));

  // trainer's own launcher: devices.world_size=2 re-executes under mpirun.
  auto r2 =
      run_trainer("run " + config.string() + " devices.world_size=2 --out " + two.string(), true);
  INFO(r2.out);
  REQUIRE(r2.code == 0);
  CHECK_THAT(r2.out, Catch::Contains("starting 2 ranks"));
  // The output went to a pipe: no progress bar, though mpirun gives the ranks a terminal.
  CHECK(r2.out.find("\033[K") == std::string::npos);
  check_same_training(one, two);
  const auto job = read_json(two / "distributed.json");
  CHECK(job["world"] == 2);
  CHECK(job["collective"] == "mpi");
  CHECK(job["nccl"].is_null());  // no NCCL in a CPU job
  CHECK(job["overlap_backward"] == true);
  CHECK(fs::exists(two / "ranks.jsonl"));

  // One bucket per gradient: every reduction starts during backward.
  setenv("TRAINER_BUCKET_MB", "0", 1);
  auto r3 = run_trainer(
      "run " + config.string() + " devices.world_size=2 --out " + two_small.string(), true);
  unsetenv("TRAINER_BUCKET_MB");
  INFO(r3.out);
  REQUIRE(r3.code == 0);
  check_same_training(one, two_small);
  CHECK(read_json(two_small / "distributed.json")["bucket_bytes"] == 0);

  // The ranks' load-balance windows span a logging window (4 steps), not one
  // step: one ranks.jsonl record per log point, also with checkpoints between
  // the log points (whose check of the weights is a reduction of its own).
  const fs::path windows = kRoot / "equal_2_log_every_4";
  fs::remove_all(windows);
  auto r4 = run_trainer("run " + config.string() +
                            " devices.world_size=2 train.log_every=4 checkpoint.every_steps=3 "
                            "--out " +
                            windows.string(),
                        true);
  INFO(r4.out);
  REQUIRE(r4.code == 0);
  std::ifstream ranks_file(windows / "ranks.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(ranks_file, line);)
    records.push_back(nlohmann::json::parse(line));
  REQUIRE(records.size() == 2);  // 8 steps
  for (const auto& record : records)
    for (const auto& rank : record["ranks"]) CHECK(rank["steps"] == 4);
}

TEST_CASE("with dropout, 2 ranks and micro-batches train like 1 rank x 128") {
  // A dropout mask follows the sample (its position in the step's global
  // batch), not the rank or micro-batch that holds it.
  const fs::path config = write_config("dropout", "", kDropoutMlpLayers);
  const fs::path one = kRoot / "dropout_1", accumulated = kRoot / "dropout_1_micro_64",
                 two = kRoot / "dropout_2", two_accumulated = kRoot / "dropout_2_micro_32";
  for (const auto& d : {one, accumulated, two, two_accumulated}) fs::remove_all(d);
  const std::string cfg = "run " + config.string();
  auto r1 = run_trainer(cfg + " --out " + one.string(), true);
  INFO(r1.out);
  REQUIRE(r1.code == 0);
  auto r2 = run_trainer(cfg + " train.micro_batch_size=64 --out " + accumulated.string(), true);
  INFO(r2.out);
  REQUIRE(r2.code == 0);
  auto r3 = run_trainer(cfg + " devices.world_size=2 --out " + two.string(), true);
  INFO(r3.out);
  REQUIRE(r3.code == 0);
  auto r4 = run_trainer(
      cfg + " devices.world_size=2 train.micro_batch_size=32 --out " + two_accumulated.string(),
      true);
  INFO(r4.out);
  REQUIRE(r4.code == 0);
  CHECK(read_json(two_accumulated / "manifest.json")["batch"]["accumulation"] == 2);
  check_same_training(one, accumulated);
  check_same_training(one, two);
  check_same_training(one, two_accumulated);
}

TEST_CASE("2 ranks evaluate a shard each and report the metrics of the whole eval set") {
  // 101 eval samples: rank 0 takes 51, rank 1 50; each sample counts once.
  const fs::path config = write_config("eval_shards");
  const fs::path one = kRoot / "eval_shards_1", two = kRoot / "eval_shards_2";
  for (const auto& d : {one, two}) fs::remove_all(d);
  const std::string cfg = "run " + config.string() + " data.eval.size=101 train.eval_every=4";
  auto r1 = run_trainer(cfg + " --out " + one.string(), true);
  INFO(r1.out);
  REQUIRE(r1.code == 0);
  auto r2 = run_trainer(cfg + " devices.world_size=2 --out " + two.string(), true);
  INFO(r2.out);
  REQUIRE(r2.code == 0);
  auto eval_records = [](const fs::path& dir) {
    std::ifstream in(dir / "metrics.jsonl");
    std::vector<nlohmann::json> records;
    for (std::string line; std::getline(in, line);) {
      auto r = nlohmann::json::parse(line);
      if (r["split"] == "eval") records.push_back(r);
    }
    return records;
  };
  const auto a = eval_records(one), b = eval_records(two);
  REQUIRE(a.size() == 2);  // after step 4 and at the end (step 8)
  REQUIRE(b.size() == a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("eval " << i << ": " << a[i].dump() << " vs " << b[i].dump());
    CHECK(a[i]["samples"] == 101);
    CHECK(b[i]["samples"] == 101);
    const double la = a[i]["loss"].get<double>(), lb = b[i]["loss"].get<double>();
    CHECK(std::abs(la - lb) <= 1e-6 * std::abs(la));
    CHECK(a[i]["accuracy"].get<double>() == b[i]["accuracy"].get<double>());
  }
  // With train.eval_batches (per rank), `trainer eval` in one process covers
  // what both ranks evaluated.
  const fs::path limited = kRoot / "eval_shards_limited";
  fs::remove_all(limited);
  auto r3 =
      run_trainer(cfg + " devices.world_size=2 data.eval.size=300 train.eval_batches=1 --out " +
                      limited.string(),
                  true);
  INFO(r3.out);
  REQUIRE(r3.code == 0);
  const auto recorded = eval_records(limited).back();
  const auto evaluated = run_trainer("eval " + limited.string() + " --json");
  INFO(evaluated.out);
  REQUIRE(evaluated.code == 0);
  const auto json = nlohmann::json::parse(evaluated.out);
  CHECK(recorded["samples"].get<int>() == 128);  // a micro-batch of 64 on each rank
  CHECK(json["samples"] == recorded["samples"]);
  CHECK(json["loss"].get<double>() == Approx(recorded["loss"].get<double>()).epsilon(1e-6));
}

TEST_CASE("2 ranks stop early at the same evaluation") {
  // Every rank sees the same (reduced) evaluation, so all stop alike: with
  // min_delta 1 nothing improves on the first evaluation (step 2), and
  // patience 1 stops at the second (step 4). Ranks that disagreed would hang.
  const fs::path config = write_config("early_stop");
  const fs::path dir = kRoot / "early_stop_2";
  fs::remove_all(dir);
  auto r =
      run_trainer("run " + config.string() +
                      " devices.world_size=2 train.eval_every=2 "
                      "train.early_stopping.patience=1 train.early_stopping.min_delta=1 --out " +
                      dir.string(),
                  true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto summary = read_json(dir / "summary.json");
  CHECK(summary["early_stopped"]["step"] == 4);
  CHECK(summary["steps"] == 4);
  CHECK(fs::exists(dir / "checkpoints/step-00000004/model.safetensors"));
}

// Tolerance of the SyncBN comparisons: the statistics are sums in double, so
// 2 ranks differ from 1 only by float rounding in the per-rank sums of the
// convolution/linear weight gradients (over 64 rows instead of 128, then added
// in the all-reduce) and a last-bit difference in a normalised value: relative
// 1e-7 per step, growing over 8 steps of momentum SGD to well under 1e-6.
constexpr double kSyncTolerance = 1e-6;

TEST_CASE("SyncBN: 2 ranks x global batch 128 train a CNN like 1 rank x 128; without sync not") {
  const fs::path config = write_cnn_config("syncbn", true);
  const fs::path one = kRoot / "syncbn_1", two = kRoot / "syncbn_2";
  for (const auto& d : {one, two}) fs::remove_all(d);
  auto r1 = run_trainer("run " + config.string() + " --out " + one.string(), true);
  INFO(r1.out);
  REQUIRE(r1.code == 0);
  auto r2 =
      run_trainer("run " + config.string() + " devices.world_size=2 --out " + two.string(), true);
  INFO(r2.out);
  REQUIRE(r2.code == 0);
  // The kernels reduce over the job's 2 ranks (the collective reached them).
  const auto kernels = read_json(two / "manifest.json")["kernels"];
  CHECK(kernels["bn1"] == "own:sync_batchnorm[ranks=2]");
  CHECK(kernels["bn2"] == "own:sync_batchnorm[ranks=2]");
  check_same_training(one, two, kSyncTolerance);

  // Without sync each rank normalises with its own 64 rows: the test can tell.
  const fs::path plain = write_cnn_config("plainbn", false);
  const fs::path p1 = kRoot / "plainbn_1", p2 = kRoot / "plainbn_2";
  for (const auto& d : {p1, p2}) fs::remove_all(d);
  REQUIRE(run_trainer("run " + plain.string() + " --out " + p1.string(), true).code == 0);
  REQUIRE(run_trainer("run " + plain.string() + " devices.world_size=2 --out " + p2.string(), true)
              .code == 0);
  const auto a = train_losses(p1), b = train_losses(p2);
  REQUIRE(a.size() == 8);
  REQUIRE(b.size() == 8);
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / a[i]);
  CHECK(worst > 100 * kSyncTolerance);
  // Sync on one rank is plain batchnorm (own loops instead of oneDNN).
  check_same_training(p1, one, 1e-5);
}

TEST_CASE("a checkpoint of 2 ranks resumes on 1 rank (and of 1 on 2) like the run that went on") {
  // 4 steps per epoch: the first run stops after epoch 0 with a checkpoint,
  // and the resumed runs go on to step 8.
  const fs::path config = write_cnn_config("resume", true);
  const fs::path full = kRoot / "resume_full", part2 = kRoot / "resume_part2",
                 part1 = kRoot / "resume_part1", on1 = kRoot / "resume_2_on_1",
                 on2 = kRoot / "resume_2_on_2", from1 = kRoot / "resume_1_on_2";
  for (const auto& d : {full, part2, part1, on1, on2, from1}) fs::remove_all(d);
  const std::string cfg = config.string();
  REQUIRE(run_trainer("run " + cfg + " --out " + full.string(), true).code == 0);
  REQUIRE(
      run_trainer("run " + cfg + " devices.world_size=2 train.max_steps=4 --out " + part2.string(),
                  true)
          .code == 0);
  REQUIRE(run_trainer("run " + cfg + " train.max_steps=4 --out " + part1.string(), true).code == 0);
  REQUIRE(fs::exists(part2 / "checkpoints/last/model.safetensors"));
  const auto copy = fs::copy_options::recursive | fs::copy_options::copy_symlinks;
  fs::copy(part2, on1, copy);
  fs::copy(part2, on2, copy);
  fs::copy(part1, from1, copy);

  auto resume = [](const fs::path& dir, const std::string& overrides) {
    auto r = run_trainer("run " + (dir / "config.yaml").string() + " --resume " + dir.string() +
                             " train.max_steps=8 " + overrides,
                         true);
    INFO(r.out);
    CHECK_THAT(r.out, Catch::Contains("resuming from"));
    REQUIRE(r.code == 0);
  };
  resume(on1, "devices.world_size=1");
  resume(on2, "");
  resume(from1, "devices.world_size=2");
  CHECK(read_json(on2 / "distributed.json")["world"] == 2);
  CHECK(read_json(from1 / "distributed.json")["world"] == 2);
  // The records say how the last part ran; a resume with nothing to train
  // leaves them as they were.
  CHECK(read_json(on1 / "distributed.json")["world"] == 1);
  const auto idle = run_trainer("run --resume " + on2.string() + " devices.world_size=1", true);
  INFO(idle.out);
  CHECK(idle.out.find("nothing to train") != std::string::npos);
  CHECK(read_json(on2 / "distributed.json")["world"] == 2);
  CHECK(read_json(on1 / "manifest.json")["resumes"].back()["ranks"] == 1);
  CHECK(read_json(on2 / "manifest.json")["resumes"].back()["ranks"] == 2);
  // The ranks' load reports count the run's steps across the resume.
  std::vector<std::int64_t> report_steps;
  std::ifstream reports(on2 / "ranks.jsonl");
  for (std::string line; std::getline(reports, line);)
    report_steps.push_back(nlohmann::json::parse(line)["step"].get<std::int64_t>());
  INFO("ranks.jsonl steps: " << nlohmann::json(report_steps).dump());
  REQUIRE_FALSE(report_steps.empty());
  CHECK(std::adjacent_find(report_steps.begin(), report_steps.end(), std::greater_equal<>()) ==
        report_steps.end());
  CHECK(report_steps.back() == 8);

  // 2 ranks -> 1 continues like 2 -> 2 and like the uninterrupted 1-rank run;
  // 1 -> 2 likewise.
  check_same_training(on2, on1, kSyncTolerance);
  check_same_training(full, on1, kSyncTolerance);
  check_same_training(full, from1, kSyncTolerance);
  // The first 4 records are the 2-rank run's own, kept through the resume.
  const auto before = train_losses(part2), after = train_losses(on1);
  REQUIRE(before.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(after[i] == before[i]);
}

TEST_CASE("2 ranks resume past a corrupt checkpoint: the root alone sets it aside") {
  const fs::path config = write_config("corrupt", "checkpoint: {every_steps: 2}\n");
  const fs::path full = kRoot / "corrupt_full", part = kRoot / "corrupt_part";
  for (const auto& d : {full, part}) fs::remove_all(d);
  REQUIRE(run_trainer("run " + config.string() + " devices.world_size=2 train.max_steps=6 --out " +
                          full.string(),
                      true)
              .code == 0);
  REQUIRE(run_trainer("run " + config.string() + " devices.world_size=2 train.max_steps=4 --out " +
                          part.string(),
                      true)
              .code == 0);
  // The newest checkpoint (step 4) is damaged: both ranks fall back to step 2.
  const fs::path newest = part / "checkpoints/step-00000004";
  {
    std::fstream f(newest / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  const auto r = run_trainer("run " + (part / "config.yaml").string() + " --resume " +
                                 part.string() + " train.max_steps=6",
                             true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("resuming from " + (part / "checkpoints/step-00000002").string()));
  // Rank 0 moved it; rank 1 at most reported it (moving it too could delete rank 0's copy).
  CHECK_THAT(r.out,
             Catch::Contains("[rank 0] warning: checkpoint " + newest.string() + " is unusable"));
  CHECK_THAT(r.out, Catch::Contains("moved to " + newest.string() + ".bad"));
  std::istringstream lines(r.out);
  int rank1_reports = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("[rank 1] warning: checkpoint " + newest.string() + " is unusable", 0) == 0) {
      ++rank1_reports;
      CHECK(line.find("moved to") == std::string::npos);
    }
  // Rank 1 reports it when it looks before rank 0 has moved it, else it never
  // sees it: both are right.
  CHECK(rank1_reports <= 1);
  CHECK(fs::exists(newest.string() + ".bad/model.safetensors"));
  // Steps 3 to 6 again from step 2: the uninterrupted run's losses.
  const auto want = train_losses(full), got = train_losses(part);
  REQUIRE(want.size() == 6);
  REQUIRE(got.size() == 6);
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
}

TEST_CASE("ranks that find different checkpoints to resume from stop alike, naming each") {
  // Two copies of a 2-rank run; one lacks the newest checkpoint. An mpirun
  // job whose ranks resume from different copies (as ranks on storage that
  // is not shared alike would) must not train.
  const fs::path config = write_config("mismatch", "checkpoint: {every_steps: 2}\n");
  const fs::path part = kRoot / "mismatch_part", seen_by_0 = kRoot / "mismatch_rank0",
                 seen_by_1 = kRoot / "mismatch_rank1";
  for (const auto& d : {part, seen_by_0, seen_by_1}) fs::remove_all(d);
  REQUIRE(run_trainer("run " + config.string() + " devices.world_size=2 train.max_steps=4 --out " +
                          part.string(),
                      true)
              .code == 0);
  const auto copy = fs::copy_options::recursive | fs::copy_options::copy_symlinks;
  fs::copy(part, seen_by_0, copy);
  fs::copy(part, seen_by_1, copy);
  fs::remove_all(seen_by_1 / "checkpoints/step-00000004");
  auto rank_command = [](const fs::path& dir) {
    return std::string(" -np 1 ") + TRAINER_BINARY + " run " + (dir / "config.yaml").string() +
           " --resume " + dir.string() + " train.max_steps=6";
  };
  const std::string cmd = "mpirun" + std::string(geteuid() == 0 ? " --allow-run-as-root" : "") +
                          " --oversubscribe --bind-to none" + rank_command(seen_by_0) + " :" +
                          rank_command(seen_by_1);
  const auto r = trainer::testing::run_command(cmd);
  INFO(r.out);
  CHECK(r.code != 0);
  CHECK_THAT(r.out, Catch::Contains("the ranks found different checkpoints to resume from"));
  CHECK_THAT(r.out, Catch::Contains("rank 0: step 4, rank 1: step 2"));
  CHECK_THAT(r.out, Catch::Contains("is the run directory on storage every rank sees alike?"));
  // Nothing trained and nothing was lost: no step past 4 was written.
  CHECK(train_losses(seen_by_0).size() == 4);
  CHECK(fs::exists(seen_by_0 / "checkpoints/step-00000004/model.safetensors"));
  CHECK_FALSE(fs::exists(seen_by_0 / "checkpoints/step-00000006"));
}

TEST_CASE("a checkpoint inside a logging window resumes on 1 rank with the records of 1 rank") {
  // 8 steps per epoch, a record every 3 steps: the 2-rank run stops after
  // step 4, inside the window of steps 4-6.
  const fs::path config = write_cnn_config("window", true);
  const std::string cfg = config.string() + " data.train.size=1024 train.log_every=3";
  const fs::path full = kRoot / "window_full", part = kRoot / "window_part2";
  for (const auto& d : {full, part}) fs::remove_all(d);
  REQUIRE(run_trainer("run " + cfg + " --out " + full.string(), true).code == 0);
  REQUIRE(run_trainer(
              "run " + cfg + " devices.world_size=2 train.max_steps=4 --out " + part.string(), true)
              .code == 0);
  const auto r = run_trainer("run " + (part / "config.yaml").string() + " --resume " +
                                 part.string() + " train.max_steps=8 devices.world_size=1",
                             true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto a = train_losses(full), b = train_losses(part);
  REQUIRE(a.size() == 3);  // steps 3, 6, 8
  REQUIRE(b.size() == a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("record " << i << ": " << a[i] << " vs " << b[i]);
    CHECK(std::abs(a[i] - b[i]) <= kSyncTolerance * a[i]);
  }
}

TEST_CASE("ranks started by mpirun: world from the launcher, lr scaling applied and recorded") {
  const fs::path config = write_config("mpirun");
  const fs::path dir = kRoot / "mpirun_linear";
  fs::remove_all(dir);
  const std::string cmd = mpirun_prefix(2) + TRAINER_BINARY + " run " + config.string() +
                          " optimizer.lr_scaling=linear train.max_steps=2 --out " + dir.string() +
                          " 2>&1";
  REQUIRE(std::system((cmd + " >" + (kRoot / "mpirun.log").string()).c_str()) == 0);
  const auto job = read_json(dir / "distributed.json");
  CHECK(job["world"] == 2);
  CHECK(job["launcher"] == "openmpi");
  CHECK(job["lr_base"].get<double>() == Approx(0.2));
  CHECK(job["lr"].get<double>() == Approx(0.4));
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  REQUIRE(std::getline(metrics, line));
  CHECK(nlohmann::json::parse(line)["lr"].get<double>() == Approx(0.4));
  // lr-find trains one process: refused under mpirun, said once.
  const auto lr_find = trainer::testing::run_command(mpirun_prefix(2) + TRAINER_BINARY +
                                                     " lr-find " + config.string() + " --out " +
                                                     (kRoot / "mpirun_lr_find").string() + " 2>&1");
  CHECK(lr_find.code != 0);
  const std::string refused = "error: lr-find trains one process, and 2 were started";
  const auto first = lr_find.out.find(refused);
  REQUIRE(first != std::string::npos);
  CHECK(lr_find.out.find(refused, first + 1) == std::string::npos);
  // Resumed on 1 rank the scaled rate would halve: said, with the overrides
  // that keep it; with them (in a copy of the run) it goes on at 0.4.
  const fs::path copy = kRoot / "mpirun_linear_copy";
  fs::remove_all(copy);
  fs::copy(dir, copy, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  auto r = run_trainer("run --resume " + dir.string() + " train.max_steps=3", true);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("optimizer.lr: the run trained at a base rate of 0.4 and goes "
                                    "on at 0.2 (optimizer.lr_scaling: linear scales it by the "
                                    "number of ranks, now 1); to go on at the run's rates, resume "
                                    "with optimizer.lr=0.4 optimizer.lr_scaling=none"));
  r = run_trainer("run --resume " + copy.string() +
                      " train.max_steps=3 optimizer.lr=0.4 optimizer.lr_scaling=none",
                  true);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, !Catch::Contains("optimizer.lr: the run trained at"));
}

TEST_CASE("a global batch that does not divide over the ranks is one clear error") {
  const fs::path config = write_config("indivisible");
  const auto r = run_trainer(
      "run " + config.string() + " devices.world_size=3 --out " + (kRoot / "indivisible").string(),
      true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("train.batch_size") &&
                        Catch::Contains("does not divide over 3 ranks"));
  CHECK_THAT(r.out, !Catch::Contains("starting"));
  // A model error too: once, before any rank starts, with the exit code of a config error.
  const auto model = run_trainer("run " + config.string() +
                                     " devices.world_size=2 model.layers[5].out_features=3 --out " +
                                     (kRoot / "model_error").string(),
                                 true);
  INFO(model.out);
  CHECK(model.code == 2);
  const auto first = model.out.find("the last layer gives 3 outputs");
  REQUIRE(first != std::string::npos);
  CHECK(model.out.find("the last layer gives 3 outputs", first + 1) == std::string::npos);
  CHECK_THAT(model.out, !Catch::Contains("starting"));
  CHECK_FALSE(fs::exists(kRoot / "model_error"));
}

TEST_CASE(
    "a killed rank ends the job with an error naming it; summary.json keeps what the run "
    "trained") {
  const fs::path config = write_config("killed");
  const fs::path dir = kRoot / "killed_run";
  fs::remove_all(dir);
  // A finished run, extended: the rank is killed in its second session.
  REQUIRE(run_trainer("run " + config.string() + " devices.world_size=2 train.max_steps=2 --out " +
                      dir.string())
              .code == 0);
  const auto recorded = fs::file_size(dir / "metrics.jsonl");
  BackgroundRun run(
      "TRAINER_COLLECTIVE_TIMEOUT=20",
      "run --resume " + dir.string() + " train.max_steps=100000 checkpoint.every_steps=3",
      "killed");
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (fs::file_size(dir / "metrics.jsonl") <= recorded + 400 &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const pid_t victim = find_rank(1, dir.string());
  REQUIRE(victim > 0);
  const auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(kill(victim, SIGKILL) == 0);
  const int code = run.wait(30);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  INFO(run.output());
  CHECK(code > 0);
  CHECK(took < 25);
  CHECK_THAT(run.output(), Catch::Contains("rank 1"));
  const nlohmann::json summary = read_json(dir / "summary.json");
  CHECK(summary["status"] == "failed");
  CHECK_THAT(summary["error"].get<std::string>(),
             Catch::Contains("a rank of the job was killed by signal 9") &&
                 Catch::Contains("trainer run --resume " + dir.string()));
  // What a resume goes on from, and the finished session's record.
  CHECK(summary["steps"].get<std::int64_t>() >= 3);
  CHECK(fs::exists(summary["last_checkpoint"].get<std::string>()));
  CHECK(summary["earlier_summary"]["status"] == "complete");
  CHECK(summary["earlier_summary"]["steps"] == 2);
}

TEST_CASE("a rank that fails alone: the launcher records the job's failure in summary.json") {
  const fs::path data = kRoot / "failing_rank_images";
  const fs::path dir = kRoot / "failing_rank";
  fs::remove_all(data);
  fs::remove_all(dir);
  trainer::data::testing::write_image_class(data / "a", "x", 20, 8);
  trainer::data::testing::write_image_class(data / "b", "y", 200, 8);
  // Unshuffled, rank 1 reads the odd positions: the damaged image is its alone.
  std::ofstream(data / "a/x/1.png") << "not an image";
  const fs::path config = kRoot / "failing_rank.yaml";
  std::ofstream(config) << "name: failing_rank\n"
                           "data:\n"
                           "  train: {type: image_folder, root: "
                        << data.string()
                        << ", size: [3, 3]}\n"
                           "  shuffle: false\n"
                           "  workers: 0\n"
                           "model:\n"
                           "  layers: [{type: flatten}, {type: linear, out_features: 2}]\n"
                           "train: {batch_size: 4, epochs: 1}\n"
                           "backend: {threads: 1}\n";
  const auto r =
      run_trainer("run " + config.string() + " devices.world_size=2 --out " + dir.string(), true);
  INFO(r.out);
  CHECK(r.code != 0);
  CHECK_THAT(r.out, Catch::Contains("1.png"));
  CHECK_THAT(r.out, Catch::Contains("[rank 1] error: "));  // where the summary points
  const nlohmann::json summary = read_json(dir / "summary.json");
  CHECK(summary["status"] == "failed");
  // The rank's own error, naming the file, and how to go on.
  const std::string error = summary["error"].get<std::string>();
  CHECK_THAT(error, Catch::Contains("a rank of the job failed (mpirun exit code") &&
                        Catch::Contains(": [rank 1] error: data loader: ") &&
                        Catch::Contains("1.png") &&
                        Catch::Contains("trainer run --resume " + dir.string() +
                                        " goes on from the last checkpoint"));
  std::stringstream log;
  log << std::ifstream(dir / "train.log").rdbuf();
  CHECK_THAT(log.str(), Catch::Contains("[rank 1] error: data loader: "));
}

TEST_CASE("a resume the ranks refuse leaves the run's summary.json as it was") {
  const fs::path config = write_config("refused");
  const fs::path dir = kRoot / "refused_run";
  fs::remove_all(dir);
  REQUIRE(
      run_trainer("run " + config.string() + " devices.world_size=2 --out " + dir.string()).code ==
      0);
  std::ifstream before_file(dir / "summary.json");
  const std::string before((std::istreambuf_iterator<char>(before_file)), {});
  // Another batch: other steps per epoch than the checkpoint's, refused by every rank.
  const auto refused =
      run_trainer("run --resume " + dir.string() + " train.batch_size=64 train.max_steps=12", true);
  INFO(refused.out);
  CHECK(refused.code != 0);
  CHECK_THAT(refused.out, Catch::Contains("steps per epoch"));
  std::ifstream after_file(dir / "summary.json");
  const std::string after((std::istreambuf_iterator<char>(after_file)), {});
  CHECK(after == before);
}

TEST_CASE("a resume's data error is reported once, before any rank starts") {
  const fs::path config = write_config("resume_checked");
  const fs::path dir = kRoot / "resume_checked_run";
  fs::remove_all(dir);
  REQUIRE(run_trainer("run " + config.string() + " devices.world_size=2 train.max_steps=4 --out " +
                      dir.string())
              .code == 0);
  // Evaluation samples of another shape than the training samples.
  const auto r = run_trainer(
      "run --resume " + dir.string() + " 'data.eval.shape=[1, 4, 4]' train.max_steps=8", true);
  INFO(r.out);
  CHECK(r.code == 2);
  REQUIRE(r.out.find("data.eval") != std::string::npos);
  CHECK(r.out.find("error:", r.out.find("error:") + 1) == std::string::npos);  // one error, once
  CHECK_THAT(r.out, !Catch::Contains("rank"));
}

TEST_CASE("a hung rank ends the job after the collective timeout, named by the others") {
  const fs::path config = write_config("hung");
  const fs::path dir = kRoot / "hung_run";
  fs::remove_all(dir);
  // A checkpoint every 4 steps: stopped then, rank 1 leaves rank 0 in the
  // barrier after the write, which waits under the collective timeout (the
  // checkpoint's own, an hour by default, is for the ranks waiting on rank 0).
  BackgroundRun run("TRAINER_COLLECTIVE_TIMEOUT=4",
                    "run " + config.string() +
                        " devices.world_size=2 train.max_steps=100000 --out " + dir.string(),
                    "hung");
  REQUIRE(wait_for_training(dir, 60));
  const pid_t victim = find_rank(1, dir.string());
  REQUIRE(victim > 0);
  REQUIRE(kill(victim, SIGSTOP) == 0);
  const int code = run.wait(30);
  if (code < 0) kill(victim, SIGKILL);
  INFO(run.output());
  CHECK(code > 0);
  // Stopped while computing: it never reached the collective; stopped while
  // waiting in one: it reached it and went silent. Either way it is named.
  CHECK_THAT(run.output(), Catch::Contains("[rank 0] error: ") &&
                               Catch::Contains("did not complete within") &&
                               (Catch::Contains("rank 1 (last reached collective") ||
                                Catch::Contains("rank 1 (silent for")));
  // The stopped rank, woken as the job ends, does not count its own stop
  // as the others' delay and blame the interconnect.
  CHECK_THAT(run.output(), !Catch::Contains("the interconnect or MPI is stuck"));
  // The run's record says why it failed, as rank 0 saw it.
  const nlohmann::json summary = read_json(dir / "summary.json");
  CHECK(summary["status"] == "failed");
  CHECK_THAT(summary["error"].get<std::string>(),
             Catch::Contains("did not complete within") && Catch::Contains("rank 1"));
  CHECK(summary["steps"].get<std::int64_t>() > 0);
}

TEST_CASE("the ranks wait for a slow checkpoint write under its own timeout") {
  // The root writes each checkpoint 4 s late (a stand-in for slow storage)
  // while the collective timeout is 2 s: the others wait for the write, not
  // in the next step's reduction, so the job goes on.
  const fs::path config = write_config("slow_checkpoint", "checkpoint: {every_steps: 2}\n");
  const fs::path dir = kRoot / "slow_checkpoint_run";
  fs::remove_all(dir);
  BackgroundRun run(
      "TRAINER_COLLECTIVE_TIMEOUT=2 TRAINER_INJECT_CHECKPOINT_DELAY=4",
      "run " + config.string() + " devices.world_size=2 train.max_steps=4 --out " + dir.string(),
      "slow_checkpoint");
  const int code = run.wait(90);
  INFO(run.output());
  REQUIRE(code == 0);
  CHECK(train_losses(dir).size() == 4);
  CHECK(fs::exists(dir / "checkpoints/step-00000002/model.safetensors"));
  CHECK(fs::exists(dir / "checkpoints/step-00000004/model.safetensors"));
  CHECK(read_json(dir / "distributed.json")["checkpoint_timeout_s"] == 3600);

  // Past TRAINER_CHECKPOINT_TIMEOUT the root is named as the one missing.
  const fs::path stuck = kRoot / "stuck_checkpoint_run";
  fs::remove_all(stuck);
  BackgroundRun failing(
      "TRAINER_CHECKPOINT_TIMEOUT=2 TRAINER_INJECT_CHECKPOINT_DELAY=6",
      "run " + config.string() + " devices.world_size=2 train.max_steps=4 --out " + stuck.string(),
      "stuck_checkpoint");
  const int failed = failing.wait(90);
  INFO(failing.output());
  CHECK(failed > 0);
  CHECK_THAT(failing.output(), Catch::Contains("the wait for rank 0 to write the checkpoint") &&
                                   Catch::Contains("rank 0 (last reached collective") &&
                                   Catch::Contains("timeout: TRAINER_CHECKPOINT_TIMEOUT, 2 s"));
}
