// labels: cpu train
// The learning-rate range test: its reading (smoothing, the 4 x divergence
// rule, a non-finite loss, the steepest fall) on loss curves of known shape,
// and `trainer lr-find` end to end on the MLP config: a run directory whose
// rate rises exponentially over the steps, a suggestion inside the range, a
// run that diverges read up to where it did, and flags it refuses.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/train/lr_range.h"
#include "tests/run_command.h"
#include "tests/test_data_fixtures.h"
#include "tests/test_image_fixtures.h"

using Catch::Matchers::Contains;
using trainer::data::testing::TempDir;
using trainer::testing::run_trainer;
using trainer::train::RangeTestPoint;
using trainer::train::read_range_test;
using trainer::train::why_no_suggestion;

namespace {

// 100 rates from 1e-6 to 1e2; the loss falls from 3 to 1 around 1e-3 (a
// logistic in log10(lr)), then climbs steeply past 1.
std::vector<RangeTestPoint> curve() {
  std::vector<RangeTestPoint> points;
  for (int k = 0; k < 100; ++k) {
    const double decade = -6.0 + 8.0 * k / 99.0;
    double loss = 1.0 + 2.0 / (1.0 + std::exp(4.0 * (decade + 3.0)));
    if (decade > 0) loss += 50.0 * decade;
    points.push_back({std::pow(10.0, decade), loss});
  }
  return points;
}

}  // namespace

TEST_CASE("the range test's reading: smoothed, cut where it diverges, steepest fall") {
  const auto points = curve();
  const auto r = read_range_test(points);
  REQUIRE(r.diverged_at.has_value());
  CHECK(points[*r.diverged_at].lr > 1.0);  // the climb past 1
  CHECK(r.points.size() == *r.diverged_at);
  REQUIRE(r.smoothed.size() == r.points.size());
  CHECK(r.smoothed[0] == Approx(points[0].loss));  // bias-corrected from the start
  REQUIRE(r.suggested.has_value());
  REQUIRE(r.lowest.has_value());
  // The moving average lags the fall: its steepest point comes after the
  // loss's own (1e-3), and before the lowest smoothed loss.
  const double suggested = r.points[*r.suggested].lr;
  CHECK(suggested > 1e-3);
  CHECK(suggested < 1e-1);
  CHECK(*r.suggested < *r.lowest);

  CHECK_FALSE(r.non_finite);  // the 4 x rule cut it

  // A non-finite loss ends the range at once, and says so.
  auto nan_at = points;
  nan_at[60].loss = NAN;
  const auto cut = read_range_test(nan_at);
  REQUIRE(cut.diverged_at.has_value());
  CHECK(*cut.diverged_at == 60);
  CHECK(cut.non_finite);
  CHECK(cut.points.size() == 60);

  // Steps that hold the rate (fp16 loss scaling skips them) are passed over:
  // the reading is that of the rising rates alone.
  std::vector<RangeTestPoint> with_held;
  for (std::size_t k = 0; k < points.size(); ++k) {
    with_held.push_back(points[k]);
    if (k % 7 == 3) with_held.push_back({points[k].lr, points[k].loss * 0.9});
  }
  const auto held = read_range_test(with_held);
  REQUIRE(held.suggested.has_value());
  CHECK(held.points.size() == r.points.size());
  CHECK(held.points[*held.suggested].lr == r.points[*r.suggested].lr);

  // A loss that climbs past its lowest and falls again, faster than it fell
  // before (batchnorm can pull a diverging network back), is read up to its
  // lowest only: 200 rates over 1e-6 .. 1e1, a slow fall to 1e-1, a climb to
  // 1, then a steep fall to a loss above the lowest (the smoothed loss falls
  // fastest there: read past its lowest, the suggestion would be about 1.5).
  std::vector<RangeTestPoint> recovers;
  for (int k = 0; k < 200; ++k) {
    const double decade = -6.0 + 7.0 * k / 199.0;
    const double loss = decade <= -1  ? 3.0 - 0.4 * (decade + 6.0)
                        : decade <= 0 ? 1.0 + 4.0 * (decade + 1.0)
                                      : std::max(1.6, 5.0 - 20.0 * decade);
    recovers.push_back({std::pow(10.0, decade), loss});
  }
  const auto back = read_range_test(recovers);
  REQUIRE(back.suggested.has_value());
  CHECK_FALSE(back.diverged_at.has_value());
  CHECK(*back.suggested < *back.lowest);
  CHECK(back.points[*back.suggested].lr < 1e-1);

  // A loss that only rises gives no suggestion; neither do too few points.
  std::vector<RangeTestPoint> rising;
  for (int k = 0; k < 50; ++k) rising.push_back({std::pow(10.0, -6 + 0.1 * k), 1.0 + 0.01 * k});
  CHECK_FALSE(read_range_test(rising).suggested.has_value());
  CHECK_FALSE(read_range_test({points.begin(), points.begin() + 4}).suggested.has_value());
  // And each says why.
  CHECK(why_no_suggestion(r).empty());
  CHECK_THAT(why_no_suggestion(read_range_test(rising)), Contains("never fell"));
  CHECK_THAT(why_no_suggestion(read_range_test({points.begin(), points.begin() + 4})),
             Contains("only 4 steps"));
  // One that falls at its second point and rises after: it fell, too early to read.
  auto early = rising;
  early[1].loss = 0.5;
  const auto fell_early = read_range_test(early);
  CHECK_FALSE(fell_early.suggested.has_value());
  CHECK_THAT(why_no_suggestion(fell_early), Contains("lowest at step 2 of 50") &&
                                                Contains("too early in the range") &&
                                                !Contains("never fell"));
  // Diverged within its first steps: its rates are too high from the start;
  // too few steps without divergence: more steps.
  CHECK_THAT(why_no_suggestion(read_range_test({{1e-3, 2.0}, {1e-2, 2.1}, {1e-1, NAN}})),
             Contains("only 2 steps before the range diverged") && Contains("lower --min-lr"));
  CHECK_THAT(why_no_suggestion(read_range_test({{1e-3, 2.0}, {1e-2, 2.1}})),
             Contains("only 2 steps to read; raise --steps"));
}

TEST_CASE("trainer lr-find: a short run with a rising rate, read and suggested") {
  TempDir tmp;
  const std::string dir = tmp.file("find");
  // 40 steps up to 100: plain SGD with momentum diverges well before the end.
  const auto r = run_trainer(
      "lr-find configs/fashion_mnist_mlp.yaml --steps 40 --min-lr 1e-5 "
      "--max-lr 100 train.max_steps=7 optimizer.momentum=0.9 name=shirts --out " +
          dir,
      true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("suggested: optimizer.lr=") != std::string::npos);
  // An override of a setting it forces is named, with the flag that sets it; others are not.
  CHECK(r.out.find("warning: lr-find sets train.max_steps: the override 'train.max_steps=7' is "
                   "replaced (--steps sets it)\n") != std::string::npos);
  CHECK(r.out.find("optimizer.momentum=0.9' is replaced") == std::string::npos);
  // The name is taken, with "-lr-find" after it.
  CHECK(r.out.find("name=shirts' is replaced") == std::string::npos);
  std::ifstream config_file(dir + "/config.yaml");
  const std::string resolved((std::istreambuf_iterator<char>(config_file)), {});
  CHECK(resolved.find("\nname: shirts-lr-find\n") != std::string::npos);
  std::ifstream in(dir + "/lr_find.json");
  REQUIRE(in.good());
  const auto reading = nlohmann::json::parse(in);
  const auto& lrs = reading["lr"];
  REQUIRE(lrs.size() >= 10);
  // The logged rate of step k is 1e-5 * (1e7)^(k / 39), and the run's config
  // says how it got there.
  for (std::size_t k = 0; k < lrs.size(); ++k)
    CHECK(lrs[k].get<double>() == Approx(1e-5 * std::pow(1e7, k / 39.0)).epsilon(1e-5));
  REQUIRE(reading["suggested_lr"].is_number());
  const double suggested = reading["suggested_lr"].get<double>();
  CHECK(suggested > 1e-5);
  CHECK(suggested < 100);
  CHECK(reading["diverged_at_step"].is_number());
  CHECK(reading["loss"].size() == lrs.size());
  std::ifstream config(dir + "/config.yaml");
  const std::string text((std::istreambuf_iterator<char>(config)), {});
  CHECK(text.find("type: range_test") != std::string::npos);
  // The rates as given, in their shortest form (not 1.0000000000000001e-05).
  CHECK(text.find("lr: 1e-05\n") != std::string::npos);
  CHECK(text.find("max_lr: 100\n") != std::string::npos);
}

TEST_CASE("trainer lr-find refuses a range, a step count or ranks it cannot test") {
  TempDir tmp;
  const std::string runs = tmp.file("runs");
  const std::string config = "configs/fashion_mnist_mlp.yaml output.dir=" + runs;
  // Rates are written as the config's messages write numbers (not 1.0000000000000001e-30).
  const std::string range =
      ": the range needs 1e-30 <= min-lr < max-lr <= 1e+30 (without the flags it runs from 1e-07 "
      "to 10)\n";
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--min-lr 1 --max-lr 0.5", "error: lr-find: --min-lr 1 and --max-lr 0.5" + range},
      {"--min-lr 1e-31 --max-lr 1e10",
       "error: lr-find: --min-lr 1e-31 and --max-lr 10000000000" + range},
      {"--min-lr 1e-30 --max-lr 1e31", "error: lr-find: --min-lr 1e-30 and --max-lr 1e+31" + range},
      {"--steps 5",
       "--steps: expected an integer >= 10 and <= 1000000, found '5': the range test reads the "
       "loss over 10 steps or more"},
      {"--steps 10000000000000",
       "--steps: expected an integer >= 10 and <= 1000000, found "
       "'10000000000000'"},
      {"devices.world_size=2", "one process"}};
  for (const auto& [flags, says] : refused) {
    INFO(flags);
    const auto r = run_trainer("lr-find " + config + " " + flags, true);
    CHECK(r.code == 2);
    CHECK(r.out.find(says) != std::string::npos);
  }
  // Nothing was trained: no run directory appeared.
  CHECK_FALSE(std::filesystem::exists(runs));
  // A directory that holds something: the run's refusal, and no word of a stop.
  const std::string taken = tmp.file("taken");
  std::filesystem::create_directories(taken);
  trainer::data::testing::write_text(taken + "/notes.txt", "mine\n");
  const auto r = run_trainer("lr-find " + config + " --out " + taken, true);
  CHECK(r.code == 2);
  CHECK(r.out.find("not empty") != std::string::npos);
  CHECK(r.out.find("stopped before the end") == std::string::npos);
}

TEST_CASE("trainer lr-find takes the longest run name a run takes") {
  TempDir tmp;
  const std::string name(200, 'n');
  const auto r = run_trainer("lr-find configs/fashion_mnist_mlp.yaml name=" + name +
                                 " --steps 10 --out " + tmp.file("find"),
                             true);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("suggested") != std::string::npos);
}

TEST_CASE("trainer lr-find warns of no setting it gives itself") {
  TempDir tmp;
  // lr-find on a model of 4 inputs and 3 classes, with `data` and `train` added.
  const auto output_of = [&](const std::string& name, const std::string& data_and_train) {
    const std::string config = tmp.file(name + ".yaml");
    trainer::data::testing::write_text(
        config, "model:\n  layers: [{type: linear, out_features: 3}]\n" + data_and_train);
    const auto r = run_trainer("lr-find " + config + " --steps 10 --out " + tmp.file(name), true);
    CHECK(r.code == 0);
    return r.out;
  };
  const std::string synthetic =
      "data:\n  train: {type: synthetic, shape: [4], classes: 3, size: 64}\n";
  // Without an evaluation set it sets no train.eval_batches, which would be
  // warned of as without effect.
  // (A config warning follows its position, "FILE:LINE:COL: warning:"; the
  // run's own, such as the loader's advice, start their line.)
  CHECK_THAT(output_of("no_eval", synthetic + "train: {batch_size: 8}\n"),
             !Catch::Contains(": warning:"));
  // Early stopping, which it turns off, is not warned of as without effect.
  CHECK_THAT(output_of("stopping", synthetic + "  split: 0.25\ntrain: {batch_size: 8, "
                                               "early_stopping: {patience: 3, metric: "
                                               "eval.accuracy, mode: max}}\n"),
             !Catch::Contains(": warning:"));
  // Nor is a setting of the schedule it replaces (its own warning says so).
  const std::string replaced =
      output_of("schedule", synthetic +
                                "train: {batch_size: 8}\nschedule: {type: cosine, "
                                "max_lr: 5}\n");
  CHECK_THAT(replaced, !Catch::Contains(": warning:"));
}

TEST_CASE("trainer lr-find fails like a run on an error that is not divergence") {
  // A damaged image met in the middle of the range is the data's fault, not
  // the rate's: exit 1 naming it, no reading and no suggestion.
  TempDir tmp;
  trainer::data::testing::write_image_folder(tmp.file("images"), 40, {"b/35.png"});
  const std::string config = tmp.file("folder.yaml");
  trainer::data::testing::write_text(
      config,
      "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 2}\n"
      "data:\n  train: {type: image_folder, root: " +
          tmp.file("images") +
          ", size: [3, 3]}\n  shuffle: false\n"
          "train: {batch_size: 8}\n");
  const auto r = run_trainer("lr-find " + config + " --steps 20 --out " + tmp.file("find"), true);
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("35.png") != std::string::npos);
  CHECK(r.out.find("suggested") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(tmp.file("find") + "/lr_find.json"));
  // The run's advice to resume would not read the range: lr-find says to run again.
  CHECK_THAT(r.out, Catch::Contains("trainer run --resume") &&
                        Catch::Contains("lr-find failed before the end of its range, so there "
                                        "is no reading: once the cause is mended, run lr-find "
                                        "again with another --out"));
}
