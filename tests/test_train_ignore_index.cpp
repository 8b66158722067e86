// labels: cpu
// Rows whose label is the cross-entropy loss's ignore_index count nowhere:
// the evaluation's loss is the mean over the set's other rows whatever the
// batch size, and its accuracy and the training window's leave them out of
// hits and rows alike; data labelled -100 (PyTorch's ignore_index) is taken,
// and a label the loss does not ignore is refused naming the setting.
// Checked against values computed here from fixed weights (model.init_from).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/collective.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/config/load.h"
#include "runner/train/devices.h"
#include "runner/train/session.h"
#include "runner/train/trainer.h"
#include "test_resume_fixtures.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

// One linear layer, 2 inputs -> 3 classes, with these weights.
const double kWeight[3][2] = {{1.0, -1.0}, {0.5, 2.0}, {-1.0, 0.25}};
const double kBias[3] = {0.1, -0.2, 0.3};
const double kInputs[7][2] = {{1, 0}, {0, 1}, {1, 1}, {2, -1}, {-1, 2}, {0.5, 0.5}, {3, 1}};

std::string tensor_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

void write_weights(const std::string& path) {
  checkpoint::Safetensors file;
  std::vector<float> weight, bias(kBias, kBias + 3);
  for (const auto& row : kWeight) weight.insert(weight.end(), row, row + 2);
  file.tensors.push_back({"fc.bias", "F32", {3}, tensor_bytes(bias)});
  file.tensors.push_back({"fc.weight", "F32", {3, 2}, tensor_bytes(weight)});
  write_text(path, checkpoint::encode_safetensors(file));
}

void write_csv(const std::string& path, const std::vector<int>& labels) {
  std::string text = "a,b,y\n";
  for (std::size_t r = 0; r < labels.size(); ++r)
    text += std::to_string(kInputs[r][0]) + "," + std::to_string(kInputs[r][1]) + "," +
            std::to_string(labels[r]) + "\n";
  write_text(path, text);
}

// The expected loss and accuracy: means over the rows whose label is not `ignored`.
struct Expected {
  double loss = 0, accuracy = 0;
};
Expected expected(const std::vector<int>& labels, int ignored) {
  double loss = 0;
  int counted = 0, hits = 0;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    if (labels[r] == ignored) continue;
    double z[3], largest = -1e300;
    int best = 0;
    for (int k = 0; k < 3; ++k) {
      z[k] = kWeight[k][0] * kInputs[r][0] + kWeight[k][1] * kInputs[r][1] + kBias[k];
      if (z[k] > largest) largest = z[k], best = k;
    }
    double sum = 0;
    for (double v : z) sum += std::exp(v - largest);
    loss += largest + std::log(sum) - z[labels[r]];
    hits += best == labels[r];
    ++counted;
  }
  return {loss / counted, static_cast<double>(hits) / counted};
}

// A config training and evaluating on `csv` with the weights of `weights`.
std::string config_text(const std::string& csv, const std::string& weights,
                        const std::string& loss) {
  return "name: ignore\nseed: 1\n"
         "data:\n"
         "  train: {type: csv, path: " +
         csv + ", classes: 3}\n  eval: {type: csv, path: " + csv +
         ", classes: 3}\n  shuffle: false\n  drop_last: false\n  workers: 0\n"
         "model:\n  layers: [{type: linear, name: fc, out_features: 3}]\n  loss: " +
         loss + "\n  init_from: " + weights +
         "\n"
         "optimizer: {type: sgd, lr: 1.0e-30}\n"
         "train: {batch_size: 7, max_steps: 1, log_every: 1}\n"
         "backend: {threads: 1}\n";
}

// The evaluation of the model's fixed weights at eval batch `batch`, in this process.
train::EvalResult evaluate_at(const std::string& config_path, int batch) {
  const config::Config config =
      config::load_config(config_path, {"train.batch_size=" + std::to_string(batch)});
  const train::Session session = train::prepare_session(config);
  auto program = train::compile(session, train::select_backend(config));
  SingleProcess alone;
  return train::evaluate(session, *program, alone);
}

// tmp/c.yaml: the fixed weights (w.safetensors) on `labels` (d.csv), label 0 ignored.
void write_ignoring_case(const TempDir& tmp, const std::vector<int>& labels) {
  write_weights(tmp / "w.safetensors");
  write_csv(tmp / "d.csv", labels);
  write_text(tmp / "c.yaml", config_text(tmp / "d.csv", tmp / "w.safetensors",
                                         "{type: cross_entropy, ignore_index: 0}"));
}

}  // namespace

TEST_CASE("the evaluation leaves ignored rows out of its loss and accuracy, at any batch size") {
  TempDir tmp("eval-ignore-index");
  const std::vector<int> labels = {0, 1, 2, 0, 1, 0, 2};
  write_ignoring_case(tmp, labels);
  const Expected want = expected(labels, 0);
  // Batches of 2 (the first has no counted row), 3 and the whole set.
  for (int batch : {2, 3, 7}) {
    INFO("eval batch " << batch);
    const train::EvalResult got = evaluate_at(tmp / "c.yaml", batch);
    CHECK(got.samples == 7);
    CHECK(got.loss == Approx(want.loss).epsilon(1e-6));
    CHECK(got.accuracy == Approx(want.accuracy).epsilon(1e-12));
  }
}

TEST_CASE("the training window's accuracy leaves ignored rows out") {
  TempDir tmp("train-ignore-index");
  const std::vector<int> labels = {0, 1, 2, 0, 1, 0, 2};
  write_ignoring_case(tmp, labels);
  REQUIRE(run_to_end(run_args(tmp / "c.yaml", tmp / "run"), tmp / "run.log") == 0);
  const Expected want = expected(labels, 0);
  const auto train = metrics_records(tmp / "run", "train");
  REQUIRE(train.size() == 1);
  CHECK(train[0]["loss"].get<double>() == Approx(want.loss).epsilon(1e-6));
  CHECK(train[0]["accuracy"].get<double>() == Approx(want.accuracy).epsilon(1e-12));
  const auto eval = metrics_records(tmp / "run", "eval");
  REQUIRE(eval.size() == 1);
  CHECK(eval[0]["loss"].get<double>() == Approx(want.loss).epsilon(1e-6));
  CHECK(eval[0]["accuracy"].get<double>() == Approx(want.accuracy).epsilon(1e-12));
}

TEST_CASE("a step whose every label is ignored has no loss, and the window's mean leaves it out") {
  TempDir tmp("train-ignore-step");
  // Steps of 2 rows: {1, 2}, {0, 0} (all ignored), {1, 0}, {2}.
  const std::vector<int> labels = {1, 2, 0, 0, 1, 0, 2};
  write_ignoring_case(tmp, labels);
  const auto loss_of = [&](std::vector<int> rows) {
    std::vector<int> only(labels.size(), 0);
    for (int r : rows) only[static_cast<std::size_t>(r)] = labels[static_cast<std::size_t>(r)];
    return expected(only, 0).loss;
  };
  const std::vector<std::string> steps = {"train.batch_size=2", "train.max_steps=4"};
  // One record per step: the second has none.
  std::vector<std::string> each = steps;
  each.push_back("train.log_every=1");
  REQUIRE(run_to_end(run_args(tmp / "c.yaml", tmp / "each", each), tmp / "each.log") == 0);
  const auto records = metrics_records(tmp / "each", "train");
  REQUIRE(records.size() == 4);
  CHECK(records[0]["loss"].get<double>() == Approx(loss_of({0, 1})).epsilon(1e-6));
  CHECK_FALSE(records[1].contains("loss"));
  CHECK(records[2]["loss"].get<double>() == Approx(loss_of({4})).epsilon(1e-6));
  CHECK(read_text(tmp / "each.log").find("step 2/4: loss none (every label ignored)") !=
        std::string::npos);
  // One record for the four: the mean of the three steps' losses.
  std::vector<std::string> window = steps;
  window.push_back("train.log_every=4");
  REQUIRE(run_to_end(run_args(tmp / "c.yaml", tmp / "window", window), tmp / "window.log") == 0);
  const auto one = metrics_records(tmp / "window", "train");
  REQUIRE(one.size() == 1);
  CHECK(one[0]["loss"].get<double>() ==
        Approx((loss_of({0, 1}) + loss_of({4}) + loss_of({6})) / 3).epsilon(1e-6));
}

TEST_CASE("labels -100 are rows the default loss ignores; another ignore_index refuses them") {
  TempDir tmp("data-ignore-label");
  write_weights(tmp / "w.safetensors");
  const std::vector<int> labels = {1, -100, 2, 0, -100, 1, 2};
  write_csv(tmp / "d.csv", labels);
  write_text(tmp / "c.yaml",
             config_text(tmp / "d.csv", tmp / "w.safetensors", "{type: cross_entropy}"));
  const Expected want = expected(labels, -100);
  const train::EvalResult got = evaluate_at(tmp / "c.yaml", 3);
  CHECK(got.samples == 7);
  CHECK(got.loss == Approx(want.loss).epsilon(1e-6));
  CHECK(got.accuracy == Approx(want.accuracy).epsilon(1e-12));
  REQUIRE(run_to_end(run_args(tmp / "c.yaml", tmp / "run"), tmp / "run.log") == 0);

  const int code = run_to_end(
      run_args(tmp / "c.yaml", tmp / "other", {"model.loss.ignore_index=0"}), tmp / "other.log");
  CHECK(code != 0);
  CHECK_THAT(read_text(tmp / "other.log"),
             Catch::Contains("label -100 in row 1 of batch 0 (epoch 0) is outside the model's 3 "
                             "classes and is not the loss's ignore_index 0 (set "
                             "model.loss.ignore_index to it"));
}
