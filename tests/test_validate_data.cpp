// `trainer validate --data`: every sample of the training and evaluation data
// read once (data/read_every_sample, tested in test_data_scan), and the
// samples that cannot be read (a damaged image in an image folder) reported
// at their key before a run meets them; the content digests it prints are
// the ones a run records.
// labels: cpu
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_data_fixtures.h"
#include "test_image_fixtures.h"

using trainer::data::testing::linear_on_image_folder;
using trainer::data::testing::TempDir;
using trainer::data::testing::write_image_folder;
using trainer::data::testing::write_text;
using trainer::testing::run_trainer;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string read_file(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("validate --data names the damaged images at their key; plain validate does not read") {
  TempDir dir;
  write_image_folder(dir.file("train"), 6, {"b/4.png"});
  write_image_folder(dir.file("test"), 2, {"a/0.png", "a/1.png"});
  const std::string config = dir.file("folder.yaml");
  write_text(config,
             "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 2}\n"
             "data:\n"
             "  train: {type: image_folder, root: " +
                 dir.file("train") +
                 ", size: [3, 3]}\n"
                 "  eval: {type: image_folder, root: " +
                 dir.file("test") +
                 ", size: [3, 3]}\n"
                 "train: {batch_size: 4}\n");
  const auto plain = run_trainer("validate " + config, true);
  CHECK(plain.code == 0);
  CHECK(contains(plain.out, "ok"));

  const auto deep = run_trainer("validate " + config + " --data", true);
  INFO(deep.out);
  CHECK(deep.code == 2);
  CHECK(contains(deep.out, config + ":6:10: error: data.train: 1 of 12 training samples cannot be "
                                    "read\n  sample 10: "));
  CHECK(contains(deep.out, dir.file("train") + "/b/4.png"));
  CHECK(contains(deep.out, config + ":7:9: error: data.eval: 2 of 4 evaluation samples cannot be "
                                    "read\n  sample 0: "));
  CHECK(contains(deep.out, "2 errors"));
  CHECK_FALSE(contains(deep.out, "\nok"));
  // A normalize computing its statistics meets the first damaged image
  // before the scan: every one is listed still.
  const auto normalized =
      run_trainer("validate " + config + " --data 'data.transforms=[{type: normalize}]'", true);
  INFO(normalized.out);
  CHECK(normalized.code == 2);
  CHECK(contains(normalized.out, "error: data.train: 1 of 12 training samples cannot be read"));
  CHECK(contains(normalized.out, "error: data.eval: 2 of 4 evaluation samples cannot be read"));
  CHECK(contains(normalized.out, "\n2 errors\n"));  // the statistics' error is one of those listed
  // Without --data, the statistics' error is the data's, not the transforms'.
  const auto first_only =
      run_trainer("validate " + config + " 'data.transforms=[{type: normalize}]'", true);
  CHECK(first_only.code == 2);
  CHECK(contains(first_only.out, config +
                                     ":6:10: error: data.train: normalize's statistics "
                                     "cannot read a sample: cannot decode PNG image '" +
                                     dir.file("train") + "/b/4.png'"));
  CHECK_FALSE(contains(first_only.out, "data.transforms"));
  // An error that is not the data's reads no sample.
  const auto model_error =
      run_trainer("validate " + config + " --data model.layers[1].out_features=3", true);
  CHECK(model_error.code == 2);
  CHECK_FALSE(contains(model_error.out, "samples read"));
  CHECK_FALSE(contains(model_error.out, "cannot be read"));

  write_image_folder(dir.file("train"), 6);
  write_image_folder(dir.file("test"), 2);
  const auto repaired = run_trainer("validate " + config + " --data", true);
  INFO(repaired.out);
  CHECK(repaired.code == 0);
  CHECK(contains(repaired.out, "data: every sample read (12 training, 4 evaluation) in "));
  // With the digests a run records (and the ranks of a job compare).
  const auto run =
      run_trainer("run " + config + " train.max_steps=1 --out " + dir.file("run"), true);
  REQUIRE(run.code == 0);
  const auto manifest = nlohmann::json::parse(read_file(dir.file("run/manifest.json")));
  CHECK(contains(repaired.out, "; content digest: training " +
                                   manifest["data"]["train"]["content_digest"].get<std::string>() +
                                   ", evaluation " +
                                   manifest["data"]["eval"]["content_digest"].get<std::string>() +
                                   "\n"));

  // The held-out part of a split is read too, under data.split.
  write_image_folder(dir.file("train"), 6,
                     {"a/0.png", "a/1.png", "a/2.png", "a/3.png", "a/4.png", "a/5.png", "b/0.png",
                      "b/1.png", "b/2.png", "b/3.png", "b/4.png", "b/5.png"});
  const std::string split_config = dir.file("split.yaml");
  write_text(split_config,
             "model:\n  layers:\n    - {type: flatten}\n"
             "    - {type: linear, out_features: 2}\n"
             "data:\n  train: {type: image_folder, root: " +
                 dir.file("train") +
                 ", size: [3, 3]}\n  split: 0.25\n"
                 "train: {batch_size: 4}\n");
  const auto split = run_trainer("validate " + split_config + " --data", true);
  INFO(split.out);
  CHECK(split.code == 2);
  CHECK(contains(split.out, "error: data.train: 9 of 9 training samples cannot be read"));
  CHECK(
      contains(split.out, "error: data.split: 3 of 3 held-out evaluation samples cannot be read"));
}

// A damaged image a run meets before `validate --data` found it: the run
// fails with the loader's error, but first keeps the training up to the step
// whose batch cannot be read, so that the resume after the repair goes on
// from there and ends with the weights of a run that never met it.
TEST_CASE("a damaged image met mid-run keeps the steps before it; the repaired resume is exact") {
  for (const char* workers : {"0", "2"}) {
    INFO("data.workers=" << workers);
    TempDir dir;
    write_image_folder(dir.file("train"), 8);
    const std::string config = dir.file("folder.yaml");
    write_text(config,
               linear_on_image_folder(dir.file("train"), "train: {batch_size: 2, epochs: 2}\n"));
    const std::string overrides = std::string(" data.workers=") + workers;
    const auto straight =
        run_trainer("run " + config + overrides + " --out " + dir.file("straight") + " 2>&1", true);
    REQUIRE(straight.code == 0);

    write_image_folder(dir.file("train"), 8, {"b/4.png"});
    const std::string failed_dir = dir.file("failed");
    const auto failed =
        run_trainer("run " + config + overrides + " --out " + failed_dir + " 2>&1", true);
    INFO(failed.out);
    CHECK(failed.code == 1);
    CHECK(contains(failed.out, dir.file("train") + "/b/4.png"));
    const auto summary = nlohmann::json::parse(read_file(failed_dir + "/summary.json"));
    CHECK(summary["status"] == "failed");
    const std::int64_t steps = summary["steps"].get<std::int64_t>();
    REQUIRE(steps > 0);  // the damaged image is not in the first batch
    const std::string kept = summary["last_checkpoint"].get<std::string>();
    char step_folder[32];
    std::snprintf(step_folder, sizeof step_folder, "step-%08lld", static_cast<long long>(steps));
    CHECK(contains(kept, step_folder));
    // One error line, the loader's, then where the training is kept (what a
    // sweep records of a failed trial, and summary.json).
    CHECK(contains(failed.out, "error: data loader: sample "));
    CHECK(contains(failed.out, "; the training up to step " + std::to_string(steps) +
                                   " is kept in checkpoint " + kept +
                                   ": restore that file as it was (`trainer validate " +
                                   failed_dir + "/config.yaml --data` lists every sample"));
    CHECK(contains(failed.out, "`trainer run --resume " + failed_dir + "` goes on from there"));
    CHECK(contains(summary["error"].get<std::string>(), "is kept in checkpoint " + kept));

    write_image_folder(dir.file("train"), 8);
    const auto resumed = run_trainer("run --resume " + failed_dir + " 2>&1", true);
    INFO(resumed.out);
    REQUIRE(resumed.code == 0);
    CHECK(contains(resumed.out, "resuming from " + kept));
    // The digest changed with the file: said, and that this resume is exact.
    CHECK(contains(resumed.out,
                   "A file the run stopped at, unable to read it, and restored since "
                   "changes the digest too: it was never trained on, and the resume "
                   "is the exact one"));
    CHECK(read_file(failed_dir + "/checkpoints/last/model.safetensors") ==
          read_file(dir.file("straight") + "/checkpoints/last/model.safetensors"));
    // The checkpoint kept off the schedule goes once newer ones are saved: the
    // run keeps what the straight one keeps.
    const auto names = [](const std::string& run) {
      std::set<std::string> found;
      for (const auto& e : std::filesystem::directory_iterator(run + "/checkpoints"))
        found.insert(e.path().filename().string());
      return found;
    };
    CHECK(names(failed_dir) == names(dir.file("straight")));
  }
}
