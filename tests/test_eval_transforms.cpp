// labels: cpu
// The transforms evaluation samples get: by default every entry of
// data.transforms that acts on them (random_crop as a centre crop, flips
// dropped), and a normalize without mean/std uses the statistics the
// training pipeline computed, so a model trained on crops evaluates on crops.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;

namespace {

std::string cropping_experiment() {
  return "name: crop\n"
         "seed: 1\n"
         "data:\n"
         "  train: {type: synthetic, shape: [1, 12, 12], classes: 4, size: 200}\n"
         "  split: 0.2\n"
         "  transforms:\n"
         "    - {type: random_crop, size: 10}\n"
         "    - {type: random_flip}\n"
         "    - {type: scale}\n"
         "    - {type: normalize}\n"
         "  workers: 1\n"
         "model:\n"
         "  layers: [{type: flatten}, {type: linear, out_features: 4}]\n"
         "  loss: cross_entropy\n"
         "train: {epochs: 1, batch_size: 16}\n"
         "backend: {threads: 1}\n";
}

}  // namespace

TEST_CASE("the default eval transforms keep the crop as a centre crop and drop the flip") {
  TempDir tmp("eval-transforms");
  write_text(tmp / "crop.yaml", cropping_experiment());
  const auto printed = run_trainer("print-config " + tmp / "crop.yaml");
  REQUIRE(printed.code == 0);
  const std::string eval_list = printed.out.substr(printed.out.find("eval_transforms:"));
  CHECK(eval_list.find("random_crop") != std::string::npos);
  CHECK(eval_list.find("random_flip") == std::string::npos);

  // It trains and evaluates: the eval samples are cropped like the training ones.
  const auto run = run_trainer("run " + tmp / "crop.yaml" + " --out " + tmp / "run", true);
  INFO(run.out);
  REQUIRE(run.code == 0);
  const auto manifest = nlohmann::json::parse(read_text(tmp / "run/manifest.json"));
  const std::string train = manifest["transforms"]["train"], eval = manifest["transforms"]["eval"];
  CHECK(train.rfind("random_crop(10x10", 0) == 0);
  CHECK(eval.rfind("center_crop(10x10", 0) == 0);
  CHECK(eval.find("flip") == std::string::npos);
  // One normalize, computed once from the training set.
  const auto normalize_of = [](const std::string& s) { return s.substr(s.find("normalize(")); };
  CHECK(normalize_of(eval) == normalize_of(train));
}

TEST_CASE("an explicit empty eval_transforms list applies nothing to eval samples") {
  TempDir tmp("eval-transforms-empty");
  write_text(tmp / "crop.yaml", cropping_experiment());
  // Without the crop the eval samples keep their 12 x 12 shape, which the
  // model refuses: validate says so (it used to pass, and the run failed at
  // its first evaluation), and run refuses before training.
  for (const std::string& command :
       {"validate " + tmp / "crop.yaml", "run " + tmp / "crop.yaml" + " --out " + tmp / "run"}) {
    const auto r = run_trainer(command + " data.eval_transforms=[]", true);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find("data.eval_transforms: the evaluation samples are [1, 12, 12] after these "
                     "transforms, but the training samples are [1, 10, 10]") != std::string::npos);
  }
}

TEST_CASE("a run's config.yaml derives the eval transforms again from changed transforms") {
  TempDir tmp("eval-transforms-derived");
  write_text(tmp / "crop.yaml", cropping_experiment());
  REQUIRE(run_trainer("run " + tmp / "crop.yaml" + " --out " + tmp / "first").code == 0);
  // The derived list is in the resolved config as a comment, not as a value.
  const std::string resolved = read_text(tmp / "first/config.yaml");
  CHECK(resolved.find("  # eval_transforms:\n") != std::string::npos);
  CHECK(resolved.find("\n  eval_transforms:") == std::string::npos);

  // Started again from it with another crop size, evaluation crops to that size.
  const auto run = run_trainer("run " + tmp / "first/config.yaml" + " --out " + tmp / "second" +
                                   " data.transforms[0].size=8",
                               true);
  INFO(run.out);
  REQUIRE(run.code == 0);
  const auto manifest = nlohmann::json::parse(read_text(tmp / "second/manifest.json"));
  const std::string eval = manifest["transforms"]["eval"];
  CHECK(eval.rfind("center_crop(8x8", 0) == 0);
}

TEST_CASE(
    "a resolved config that writes the derived eval transforms out (older trainers) derives; a "
    "written one does not") {
  TempDir tmp("eval-transforms-older");
  write_text(tmp / "crop.yaml", cropping_experiment());
  const auto printed = run_trainer("print-config " + tmp / "crop.yaml");
  REQUIRE(printed.code == 0);
  // As an older trainer wrote it: the list as a value.
  std::string older;
  std::istringstream lines(printed.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("# derived from the values above") != std::string::npos) continue;
    if (line.rfind("  # ", 0) == 0) line.erase(2, 2);
    older += line + "\n";
  }
  REQUIRE(older.find("\n  eval_transforms:\n") != std::string::npos);
  write_text(tmp / "older.yaml", older);
  const auto again = run_trainer("print-config " + tmp / "older.yaml");
  REQUIRE(again.code == 0);
  CHECK(again.out.substr(again.out.find('\n')) == printed.out.substr(printed.out.find('\n')));
  // So it follows a changed crop, as the config it was resolved from does.
  const auto changed =
      run_trainer("print-config " + tmp / "older.yaml" + " data.transforms[0].size=8");
  CHECK(changed.out.find("  #   - type: random_crop\n  #     size: 8\n") != std::string::npos);

  // A config a person wrote (no "# resolved from" line) keeps the list it
  // gives, even one equal to the derived list, when an override changes the
  // transforms.
  write_text(tmp / "written.yaml", older.substr(older.find('\n') + 1));
  const auto written =
      run_trainer("print-config " + tmp / "written.yaml" + " data.transforms[0].size=8");
  REQUIRE(written.code == 0);
  CHECK(written.out.find("\n  eval_transforms:\n") != std::string::npos);
  CHECK(written.out.find("  #   - type: random_crop\n  #     size: 8\n") == std::string::npos);
}
