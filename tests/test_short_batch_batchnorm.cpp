// labels: cpu
// A short last training batch (data.drop_last: false) with batchnorm, through
// whole runs: 10 samples in batches of 4 (4, 4, then 2 real rows of 4) train a
// conv -> batchnorm -> relu -> global_avgpool -> linear model as 8 samples in
// batches of 4 followed, from those weights, by the last 2 samples as a batch
// of 2: the last step's loss, the final weights (the convolution's included,
// whose gradient comes through batchnorm's input gradient) and the running
// statistics agree. And where a backend's batchnorm counts padding rows
// (CUDA's), a run that meets a short batch is refused at data.drop_last
// before it starts; short_batch_rows says when training meets one.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/config/load.h"
#include "runner/train/session.h"
#include "runner/train/session_checks.h"
#include "tests/test_data_fixtures.h"

using namespace trainer;
using trainer::data::testing::npy_bytes;
using trainer::data::testing::TempDir;
using trainer::data::testing::write_bytes;
using trainer::data::testing::write_text;
using trainer::testing::run_trainer;

namespace {

constexpr int kSamples = 10, kChannels = 3, kSide = 4, kClasses = 3;

// Samples [first, first + count) of a fixed random data set as x.npy / y.npy in `dir`.
void write_samples(const TempDir& tmp, const std::string& name, int first, int count) {
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

// A one-epoch run on data `name` in batches of `batch`, optionally from `init` weights.
std::string config_text(const TempDir& tmp, const std::string& name, int batch,
                        const std::string& init = "") {
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
         "devices: cpu\n";
}

// Runs `config` into tmp/<name>.run; returns the run directory.
std::filesystem::path run(const TempDir& tmp, const std::string& name, const std::string& config) {
  write_text(tmp.file(name + ".yaml"), config);
  const std::filesystem::path dir = tmp.file(name + ".run");
  const auto r = run_trainer("run " + tmp.file(name + ".yaml") + " --out " + dir.string(), true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  return dir;
}

std::string final_weights(const std::filesystem::path& dir) {
  return (dir / "checkpoints" / "last" / "model.safetensors").string();
}

// The loss of the last training record of a run.
double last_loss(const std::filesystem::path& dir) {
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  double loss = -1;
  while (std::getline(metrics, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record["split"] == "train") loss = record["loss"].get<double>();
  }
  return loss;
}

std::vector<float> floats_of(const checkpoint::StoredTensor& t) {
  std::vector<float> v(t.bytes.size() / sizeof(float));
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace

TEST_CASE("a short last batch trains batchnorm like a batch of its samples, end to end") {
  TempDir tmp;
  write_samples(tmp, "all", 0, kSamples);
  write_samples(tmp, "first8", 0, 8);
  write_samples(tmp, "last2", 8, 2);
  const auto padded = run(tmp, "padded", config_text(tmp, "all", 4));
  const auto first = run(tmp, "first", config_text(tmp, "first8", 4));
  const auto last = run(tmp, "last", config_text(tmp, "last2", 2, final_weights(first)));

  CHECK(last_loss(padded) == Approx(last_loss(last)).epsilon(1e-5));
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
      if (std::abs(a[k] - b[k]) > 1e-5 + 1e-4 * std::abs(b[k])) ++misses;
    CHECK(misses == 0);
  }
}

namespace {

// A backend whose batchnorm counts the padding rows of a short batch, as the
// CUDA backend's does; it is only asked, never run.
class PaddingCountingBackend final : public Backend {
 public:
  PaddingCountingBackend() : Backend("counting") {
    add_kernel(
        "batchnorm", [](const KernelContext&) -> std::unique_ptr<Kernel> { return nullptr; },
        PaddingRows::counted);
  }
  void* allocate(std::size_t) override { return nullptr; }
  void release(void*) override {}
  void copy_to_device(void*, const void*, std::size_t) override {}
  void copy_to_host(void*, const void*, std::size_t) override {}
  VectorOps& vector_ops() override { return cpu_backend().vector_ops(); }
};

// A session on `samples` synthetic samples with the given train/data settings.
struct Prepared {
  config::Config config;
  train::Session session;
};

Prepared prepare(int samples, const std::string& train,
                 const std::vector<std::string>& overrides = {}) {
  const config::Config c = config::load_config_text(
      "data:\n"
      "  train: {type: synthetic, shape: [3, 4, 4], classes: 3, size: " +
          std::to_string(samples) +
          "}\n"
          "  drop_last: false\n"
          "model:\n"
          "  layers:\n"
          "    - {type: conv2d, name: conv, out_channels: 4, kernel: 3, padding: 1}\n"
          "    - {type: batchnorm, name: bn}\n"
          "    - {type: global_avgpool}\n"
          "    - {type: linear, name: fc, out_features: 3}\n"
          "  loss: {type: cross_entropy}\n"
          "train: " +
          train + "\n",
      "short.yaml", overrides);
  return {c, train::prepare_session(c)};
}

std::int64_t short_rows(int samples, const std::string& train,
                        const std::vector<std::string>& overrides = {}) {
  const Prepared p = prepare(samples, train, overrides);
  return train::short_batch_rows(p.config, p.session);
}

}  // namespace

TEST_CASE("short_batch_rows: the real rows of the short micro-batch training meets") {
  CHECK(short_rows(10, "{batch_size: 4}") == 2);
  CHECK(short_rows(10, "{batch_size: 5}") == 0);
  CHECK(short_rows(10, "{batch_size: 4}", {"data.drop_last=true"}) == 0);
  // Micro-batches of 2 divide the 10 samples.
  CHECK(short_rows(10, "{batch_size: 4, micro_batch_size: 2}") == 0);
  // 10 samples in micro-batches of 3: 3, 3, 3, then 1 real row.
  CHECK(short_rows(10, "{batch_size: 6, micro_batch_size: 3}") == 1);
  CHECK(short_rows(11, "{batch_size: 6, micro_batch_size: 3}") == 2);
  // Two CPU ranks: shards of 5 samples in micro-batches of 2 (2, 2, 1).
  CHECK(short_rows(10, "{batch_size: 4}", {"devices.world_size=2"}) == 1);
}

TEST_CASE("a backend whose batchnorm counts padding rows refuses a run that meets a short batch") {
  const Prepared p = prepare(10, "{batch_size: 4}");
  PaddingCountingBackend counting;
  config::Diagnostics diags;
  train::check_short_batches(p.config, p.session, counting, diags);
  REQUIRE(diags.size() == 1);
  const config::Diagnostic& d = diags.list().front();
  INFO(diags.format_all());
  CHECK(d.key_path == "data.drop_last");
  CHECK(d.mark.line == 3);  // drop_last: false in short.yaml
  CHECK(d.message.find("last batch of 2 real rows (of 4)") != std::string::npos);
  CHECK(d.message.find("layer 'bn' (batchnorm)") != std::string::npos);
  CHECK(d.message.find("2 padding rows") != std::string::npos);
  CHECK(d.suggestion.find("data.drop_last: true") != std::string::npos);
  CHECK(d.suggestion.find("batch_size that divides 10") != std::string::npos);

  // The CPU kernels train a short batch exactly: nothing to refuse.
  config::Diagnostics cpu;
  train::check_short_batches(p.config, p.session, cpu_backend(), cpu);
  CHECK(cpu.empty());
  CHECK_FALSE(cpu_backend().counts_padding_rows("batchnorm"));
  // Nor without a short batch.
  const Prepared full = prepare(12, "{batch_size: 4}");
  config::Diagnostics none;
  train::check_short_batches(full.config, full.session, counting, none);
  CHECK(none.empty());
}
