// The end-to-end check of a short last training batch (data.drop_last:
// false) through a model with batchnorm, on any device: a conv -> batchnorm
// -> relu -> global_avgpool -> linear model trained by whole `trainer run`s.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/safetensors.h"
#include "tests/run_command.h"
#include "tests/test_data_fixtures.h"

namespace trainer::testing::short_batch {

using trainer::data::testing::npy_bytes;
using trainer::data::testing::TempDir;
using trainer::data::testing::write_bytes;
using trainer::data::testing::write_text;

constexpr int kSamples = 10, kChannels = 3, kSide = 4, kClasses = 3;

// Samples [first, first + count) of a fixed random data set as x.npy / y.npy in `dir`.
inline void write_samples(const TempDir& tmp, const std::string& name, int first, int count) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> x(kSamples * kChannels * kSide * kSide);
  for (auto& v : x) v = normal(rng);
  std::vector<std::int64_t> y(kSamples);
  for (int i = 0; i < kSamples; ++i) y[static_cast<std::size_t>(i)] = (i * 7) % kClasses;
  const std::size_t per = kChannels * kSide * kSide;
  const std::string shape = "(" + std::to_string(count) + ", " + std::to_string(kChannels) + ", " +
                            std::to_string(kSide) + ", " + std::to_string(kSide) + ")";
  write_bytes(tmp.file(name + "_x.npy"),
              npy_bytes("<f4", shape, x.data() + first * per, count * per * sizeof(float)));
  write_bytes(tmp.file(name + "_y.npy"), npy_bytes("<i8", "(" + std::to_string(count) + ",)",
                                                   y.data() + first, count * sizeof(std::int64_t)));
}

// A one-epoch run on data `name` in batches of `batch` on `devices`
// (deterministic algorithms), optionally from `init` weights.
inline std::string config_text(const TempDir& tmp, const std::string& name, int batch,
                               const std::string& devices, const std::string& init = "") {
  return "seed: 3\n"
         "data:\n"
         "  train: {type: npy, x: " +
         tmp.file(name + "_x.npy") + ", y: " + tmp.file(name + "_y.npy") +
         "}\n"
         "  shuffle: false\n"
         "  drop_last: false\n"
         "model:\n" +
         (init.empty() ? "" : "  init_from: " + init + "\n") +
         "  layers:\n"
         "    - {type: conv2d, name: conv, out_channels: 16, kernel: 3, padding: 1, bias: false}\n"
         "    - {type: batchnorm, name: bn}\n"
         "    - {type: relu}\n"
         "    - {type: global_avgpool}\n"
         "    - {type: linear, name: fc, out_features: 3}\n"
         "  loss: {type: cross_entropy}\n"
         "optimizer: {type: sgd, lr: 0.5, momentum: 0}\n"
         "train: {epochs: 1, batch_size: " +
         std::to_string(batch) +
         ", log_every: 1}\n"
         "deterministic: true\n"
         "devices: " +
         devices + "\n";
}

// Runs `config` into tmp/<name>.run; returns the run directory.
inline std::filesystem::path run(const TempDir& tmp, const std::string& name,
                                 const std::string& config) {
  write_text(tmp.file(name + ".yaml"), config);
  const std::filesystem::path dir = tmp.file(name + ".run");
  const auto r = run_trainer("run " + tmp.file(name + ".yaml") + " --out " + dir.string(), true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  return dir;
}

inline std::string final_weights(const std::filesystem::path& dir) {
  return (dir / "checkpoints" / "last" / "model.safetensors").string();
}

// The loss of the last training record of a run.
inline double last_loss(const std::filesystem::path& dir) {
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  double loss = -1;
  while (std::getline(metrics, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record["split"] == "train") loss = record["loss"].get<double>();
  }
  return loss;
}

inline std::vector<float> floats_of(const checkpoint::StoredTensor& t) {
  std::vector<float> v(t.bytes.size() / sizeof(float));
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
  return v;
}

// 10 samples in batches of 4 (4, 4, then 2 real rows of 4) train like 8
// samples in batches of 4 followed, from those weights, by the last 2 as a
// batch of 2: the last step's loss, the final weights and the running
// statistics agree within `tolerance` (relative, with a tenth of it absolute).
inline void check_short_batch_trains_like_its_rows(const std::string& devices, double tolerance) {
  TempDir tmp;
  write_samples(tmp, "all", 0, kSamples);
  write_samples(tmp, "first8", 0, 8);
  write_samples(tmp, "last2", 8, 2);
  const auto padded = run(tmp, "padded", config_text(tmp, "all", 4, devices));
  const auto first = run(tmp, "first", config_text(tmp, "first8", 4, devices));
  const auto last = run(tmp, "last", config_text(tmp, "last2", 2, devices, final_weights(first)));

  CHECK(last_loss(padded) == Approx(last_loss(last)).epsilon(tolerance / 10));
  const auto got = checkpoint::read_safetensors(final_weights(padded));
  const auto want = checkpoint::read_safetensors(final_weights(last));
  REQUIRE(got.tensors.size() == want.tensors.size());
  for (const char* name :
       {"conv.weight", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "fc.weight"}) {
    INFO(name);
    const auto* g = got.find(name);
    const auto* w = want.find(name);
    REQUIRE(g != nullptr);
    REQUIRE(w != nullptr);
    const auto a = floats_of(*g), b = floats_of(*w);
    REQUIRE(a.size() == b.size());
    int misses = 0;
    for (std::size_t k = 0; k < a.size(); ++k)
      if (std::abs(a[k] - b[k]) > tolerance / 10 + tolerance * std::abs(b[k])) ++misses;
    CHECK(misses == 0);
  }
}

}  // namespace trainer::testing::short_batch
