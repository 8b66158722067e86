// labels: cpu
// LossLog: per-step losses kept in backend memory and read back together, in
// order, also when more steps are recorded than it has room for; a run sizes
// it by the steps it takes, whatever its train.log_every.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/device_buffer.h"
#include "run_command.h"
#include "runner/train/loss_log.h"
#include "test_data_fixtures.h"

using namespace trainer;

TEST_CASE("the loss log returns every recorded loss in order, once") {
  Backend& backend = cpu_backend();
  DeviceBuffer loss(backend, sizeof(float));
  const TensorRef loss_ref{loss.data(), {1}, DType::f32};
  train::LossLog log(backend, 4);
  std::vector<float> expected;
  for (int step = 0; step < 11; ++step) {  // the log fills twice on the way
    const float value = 0.5f * static_cast<float>(step) - 1.25f;
    backend.copy_to_device(loss.data(), &value, sizeof value);
    log.record(loss_ref);
    expected.push_back(value);
    if (step == 2) {
      CHECK(log.read() == expected);
      expected.clear();
    }
  }
  CHECK(log.read() == expected);
  CHECK(log.read().empty());
  // Slots are cleared after each read: a recorded loss is not added to an old one.
  const float value = 3.0f;
  backend.copy_to_device(loss.data(), &value, sizeof value);
  log.record(loss_ref);
  CHECK(log.read() == std::vector<float>{3.0f});
}

TEST_CASE("a loss log asked for more room than it may hold takes its largest and works") {
  Backend& backend = cpu_backend();
  DeviceBuffer loss(backend, sizeof(float));
  const TensorRef loss_ref{loss.data(), {1}, DType::f32};
  train::LossLog log(backend, std::numeric_limits<std::size_t>::max());
  const float value = 0.25f;
  backend.copy_to_device(loss.data(), &value, sizeof value);
  log.record(loss_ref);
  log.record(loss_ref);
  CHECK(log.read() == std::vector<float>{0.25f, 0.25f});
}

namespace {

const std::string kTinyRun =
    "name: tiny\n"
    "data:\n"
    "  train: {type: synthetic, shape: [1, 4, 4], classes: 4, size: 64}\n"
    "  workers: 1\n"
    "model:\n"
    "  layers: [{type: flatten}, {type: linear, out_features: 4}]\n"
    "train: {max_steps: 5, batch_size: 8, micro_batch_size: 4}\n"
    "backend: {threads: 1}\n";

// The steps of a run directory's training records in metrics.jsonl.
std::vector<std::int64_t> train_record_steps(const std::string& run_dir) {
  std::vector<std::int64_t> steps;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record["split"] == "train") steps.push_back(record["step"].get<std::int64_t>());
  }
  return steps;
}

}  // namespace

TEST_CASE("a log_every beyond the run's steps logs the last step, without a window's memory") {
  data::testing::TempDir tmp;
  const std::string config = tmp.file("tiny.yaml");
  data::testing::write_text(config, kTinyRun);
  // The largest log_every; and one whose window of 2 micro-batches per step
  // would take 8 GB, run under a 3 GB address-space limit.
  for (const std::string& run :
       {testing::trainer_binary() + " run " + config + " train.log_every=9223372036854775807",
        "ulimit -v 3000000; " + testing::trainer_binary() + " run " + config +
            " train.log_every=1000000000"}) {
    INFO(run);
    const std::string dir = tmp.file("run" + std::to_string(run.size()));
    const auto r = testing::run_command("/bin/sh -c '" + run + " --out " + dir + "'");
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("step 5/5:") != std::string::npos);  // the last step's log line
    CHECK(train_record_steps(dir) == std::vector<std::int64_t>{5});
  }
}
