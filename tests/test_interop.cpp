// labels: cpu train
// Interop: a checkpoint's model.safetensors, read by a few lines of Python
// (tests/test_interop.py) into the equivalent PyTorch module, gives the
// trainer's evaluation (loss, accuracy, top-5) on the same test samples.
// Skipped when /usr/bin/python3 has no torch or the Fashion-MNIST files are missing.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_resume_fixtures.h"

namespace fs = std::filesystem;

namespace {

const std::string kData = "/usr/share/datasets/fashion-mnist/";

std::string capture(const std::string& command) {
  return trainer::testing::run_command(command, false).out;
}

}  // namespace

std::string trainer_test_skip_reason() {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0)
    return "/usr/bin/python3 cannot import torch and numpy (install python3-torch)";
  if (!fs::exists(kData + "t10k-images-idx3-ubyte.gz")) return "no Fashion-MNIST under " + kData;
  return {};
}

TEST_CASE("PyTorch reproduces the trainer's evaluation from its safetensors checkpoint") {
  trainer::testing::TempDir tmp("interop");
  const auto r = trainer::testing::run_trainer(
      "run configs/fashion_mnist_cnn.yaml train.max_steps=4 train.eval_batches=2 backend.threads=2 "
      "--out " +
          (tmp / "cnn"),
      true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  nlohmann::json eval;
  for (const auto& line : trainer::testing::read_lines(tmp / "cnn/metrics.jsonl")) {
    const auto record = nlohmann::json::parse(line);
    if (record["split"] == "eval") eval = record;
  }
  REQUIRE(eval.is_object());

  const std::string out = capture(
      "/usr/bin/python3 tests/test_interop.py " + (tmp / "cnn/checkpoints/last/model.safetensors") +
      " " + kData + "t10k-images-idx3-ubyte.gz " + kData + "t10k-labels-idx1-ubyte.gz 2 128 2>&1");
  INFO(out);
  REQUIRE(out.rfind('{') != std::string::npos);
  const auto torch_eval = nlohmann::json::parse(out.substr(out.rfind('{')));
  CHECK(torch_eval["samples"] == eval["samples"]);
  CHECK(torch_eval["loss"].get<double>() == Approx(eval["loss"].get<double>()).epsilon(1e-4));
  CHECK(torch_eval["accuracy"].get<double>() ==
        Approx(eval["accuracy"].get<double>()).margin(1.5 / 256));
  CHECK(torch_eval["top5"].get<double>() == Approx(eval["top5"].get<double>()).margin(1.5 / 256));
}
