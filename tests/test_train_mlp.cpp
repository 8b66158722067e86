// labels: cpu train
// End to end on the real Fashion-MNIST files: one epoch of the shipped MLP
// reaches the accuracy the issue asks for, and the run directory holds what a
// user reads (metrics.jsonl records, summary.json, the resolved config).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "run_command.h"

using trainer::testing::run_trainer;
namespace fs = std::filesystem;

TEST_CASE("one epoch of the MLP reaches 84% test accuracy") {
  const fs::path dir = fs::temp_directory_path() / "trainer_test_mlp_epoch";
  fs::remove_all(dir);
  const auto r = run_trainer(
      "run configs/fashion_mnist_mlp.yaml train.epochs=1 train.log_every=50 --out " + dir.string(),
      true);
  INFO(r.out);
  REQUIRE(r.code == 0);

  std::ifstream summary_file(dir / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  CHECK(summary["steps"] == 468);  // 60000 / 128, last partial batch dropped
  CHECK(summary["final_eval"]["accuracy"].get<double>() >= 0.84);
  CHECK(summary["final_eval"]["samples"] == 10000);

  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  int train_records = 0, eval_records = 0;
  while (std::getline(metrics, line)) {
    const auto record = nlohmann::json::parse(line);
    for (const char* key : {"step", "epoch", "split", "loss"}) CHECK(record.contains(key));
    if (record["split"] == "train") {
      ++train_records;
      CHECK(record.contains("samples_per_s"));
      CHECK(record.contains("data_wait_pct"));
    } else {
      ++eval_records;
      CHECK(record.contains("accuracy"));
      CHECK(record.contains("top5"));
    }
  }
  CHECK(train_records == 10);  // every 50 steps, plus the last step
  CHECK(eval_records == 1);

  // The resolved config in the run directory is itself a valid experiment.
  CHECK(run_trainer("validate " + (dir / "config.yaml").string()).code == 0);
  fs::remove_all(dir);
}
