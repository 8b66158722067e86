// labels: mpi
// Plain batchnorm (`sync: false`) on 2 CPU ranks: each rank's running
// statistics follow its own batches, and the ranks average them, so that
// both evaluate with the same statistics and the checkpoint holds them. The
// run's last evaluation is then what `trainer eval` finds in its last
// checkpoint, and a run resumed from a checkpoint that the run that went on
// did not write ends bit for bit like it.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_command.h"

namespace fs = std::filesystem;
using trainer::testing::run_trainer;

namespace {

const fs::path kRoot = fs::temp_directory_path() / "trainer_test_dist_bn_buffers";

// A CNN with plain batchnorm on NCHW and on [N, C]; 4 steps per epoch.
fs::path write_config() {
  fs::create_directories(kRoot);
  const fs::path path = kRoot / "plain_bn.yaml";
  std::ofstream(path) << R"(name: plain_bn
seed: 5
deterministic: true
data:
  train: {type: synthetic, shape: [3, 8, 8], classes: 4, size: 512, seed: 1}
  eval: {type: synthetic, shape: [3, 8, 8], classes: 4, size: 128, seed: 2}
  workers: 1
model:
  layers:
    - {type: conv2d, name: conv1, out_channels: 8, kernel: 3, padding: 1, bias: false}
    - {type: batchnorm, name: bn1}
    - {type: relu}
    - {type: maxpool2d, kernel: 2}
    - {type: flatten}
    - {type: linear, name: fc1, out_features: 16, bias: false}
    - {type: batchnorm, name: bn2}
    - {type: relu}
    - {type: linear, name: fc2, out_features: 4}
  loss: {type: cross_entropy}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
train: {batch_size: 128, max_steps: 8, log_every: 1}
backend: {threads: 1}
)";
  return path;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::vector<nlohmann::json> eval_records(const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record["split"] == "eval") records.push_back(record);
  }
  return records;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void train(const std::string& args) {
  const auto r = run_trainer("run " + args, true);
  INFO(r.out);
  REQUIRE(r.code == 0);
}

}  // namespace

TEST_CASE("2 ranks average plain batchnorm's running statistics: eval and resume agree") {
  const fs::path config = write_config();
  const fs::path full = kRoot / "full", part = kRoot / "part";
  for (const auto& d : {full, part}) fs::remove_all(d);
  const std::string cfg = config.string() + " devices.world_size=2";
  train(cfg + " --out " + full.string());

  // The last checkpoint evaluated alone gives the run's own final evaluation
  // (up to the order of the shards' sums); before, it held rank 0's
  // statistics while rank 1 had evaluated with its own (2.2e-3 apart here).
  const double final_loss = read_json(full / "summary.json")["final_eval"]["loss"].get<double>();
  const auto evaluated = run_trainer("eval " + full.string() + " --json");
  INFO(evaluated.out);
  REQUIRE(evaluated.code == 0);
  const double checkpoint_loss = nlohmann::json::parse(evaluated.out)["loss"].get<double>();
  CHECK(std::abs(checkpoint_loss - final_loss) <= 1e-12 * final_loss);

  // Stopped after step 6, inside epoch 1, where the run that goes on neither
  // evaluates nor checkpoints: resumed to step 8, it ends with the same bits
  // (the statistics agree at every step, not only where a checkpoint or an
  // evaluation averaged them; averaged only there, the means agree to
  // rounding but not bit for bit).
  train(cfg + " train.max_steps=6 --out " + part.string());
  train("--resume " + part.string() + " train.max_steps=8");
  const auto want = eval_records(full), got = eval_records(part);
  REQUIRE(want.size() == 2);  // the end of each epoch: steps 4 and 8
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("evaluation " << i << ": " << want[i].dump() << " vs " << got[i].dump());
    CHECK(got[i]["step"] == want[i]["step"]);
    CHECK(got[i]["loss"].get<double>() == want[i]["loss"].get<double>());
    CHECK(got[i]["accuracy"].get<double>() == want[i]["accuracy"].get<double>());
  }
  const std::string last = "checkpoints/step-00000008/model.safetensors";
  REQUIRE(fs::exists(full / last));
  CHECK(read_bytes(full / last) == read_bytes(part / last));
}
