// labels: cpu
// One wrong label in data whose classes are inferred (no `classes:` on the
// source) is reported where it is, not as a model "set the last layer's size
// to <huge>": `trainer validate` on small CSV, NPY and IDX files. A label
// -100 (PyTorch's ignore_index) is a sample in no class, taken; any other
// negative label is refused.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "run_command.h"
#include "test_data_fixtures.h"

using namespace trainer::data::testing;
using Catch::Matchers::Contains;

namespace {

// Validates a config of `train` (and `eval`, when given) with a 3-class model;
// returns the output, having checked the exit code 2.
std::string validate_error(const TempDir& dir, const std::string& train,
                           const std::string& eval = "") {
  const std::string config = dir.file("labels.yaml");
  write_text(config, "name: labels\ndata:\n  train: " + train + "\n" +
                         (eval.empty() ? "" : "  eval: " + eval + "\n") +
                         "model:\n  layers: [{type: flatten}, {type: linear, out_features: 3}]\n"
                         "train: {batch_size: 2}\n");
  const auto r = trainer::testing::run_trainer("validate " + config, true);
  CHECK(r.code == 2);
  return r.out;
}

}  // namespace

TEST_CASE("an inferred class count far above the model's names the largest label's place") {
  TempDir dir;
  const std::string csv = dir.file("a.csv");
  write_text(csv, "a,b,y\n1,2,0\n3,4,1\n\n5,6,99999999999\n7,8,2\n");
  const std::string out = validate_error(dir, "{type: csv, path: " + csv + "}");
  CHECK_THAT(out, Contains("error: data.train: the last layer gives 3 outputs, but data.train has "
                           "no `classes:` and its largest label, 99999999999 at line 5 of CSV "
                           "file '" +
                           csv + "', makes 100000000000 classes\n") &&
                      Contains("    check that label; set data.train.classes: 3") &&
                      !Contains("set the last layer's size to 100000000000\n"));

  const float x[8] = {};
  const std::int64_t y[4] = {0, 1, std::int64_t{1} << 40, 2};
  write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(4, 2)", x, sizeof x));
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(4,)", y, sizeof y));
  CHECK_THAT(validate_error(
                 dir, "{type: npy, x: " + dir.file("x.npy") + ", y: " + dir.file("y.npy") + "}"),
             Contains("its largest label, 1099511627776 at element 2 of NPY file '" +
                      dir.file("y.npy") + "'"));

  write_bytes(dir.file("i.idx"), idx_bytes({4, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  write_bytes(dir.file("l.idx"), idx_bytes({4}, {0, 1, 200, 2}));
  const std::string idx =
      "{type: idx, images: " + dir.file("i.idx") + ", labels: " + dir.file("l.idx") + "}";
  CHECK_THAT(validate_error(dir, idx),
             Contains("its largest label, 200 at sample 2 of IDX labels '" + dir.file("l.idx") +
                      "' (byte offset 10), makes 201 classes"));

  // An evaluation set's largest label is named too.
  write_bytes(dir.file("good.idx"), idx_bytes({4}, {0, 1, 2, 2}));
  const std::string good =
      "{type: idx, images: " + dir.file("i.idx") + ", labels: " + dir.file("good.idx") + "}";
  CHECK_THAT(validate_error(dir, good, idx),
             Contains("data.eval: it has 201 classes (its largest label, 200, is at sample 2 of "
                      "IDX labels '" +
                      dir.file("l.idx") + "' (byte offset 10)), but the model predicts"));
}

TEST_CASE("a label of INT64_MAX is named like any other huge label, not taken as a target") {
  TempDir dir;
  const float x[8] = {};
  const std::int64_t y[4] = {0, 1, std::numeric_limits<std::int64_t>::max(), 2};
  write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(4, 2)", x, sizeof x));
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(4,)", y, sizeof y));
  const std::string npy = "{type: npy, x: " + dir.file("x.npy") + ", y: " + dir.file("y.npy") + "}";
  CHECK_THAT(validate_error(dir, npy),
             Contains("its largest label, 9223372036854775807 at element 2 of NPY file '" +
                      dir.file("y.npy") + "'") &&
                 Contains("makes 9223372036854775808 classes") && !Contains("regression"));
}

// The backends' tensors have at most 6 dimensions, the batch one of them: a
// source of samples with more is refused at its key by validate and plan
// alike, naming the file and the shape (not a bare "plain_md: rank 8").
TEST_CASE("samples of more than 5 dimensions are refused at the source, naming the file") {
  TempDir dir;
  const std::int64_t y[4] = {0, 1, 2, 0};
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(4,)", y, sizeof y));
  const float x[4 * 8] = {};
  write_bytes(dir.file("x6.npy"), npy_bytes("<f4", "(4, 1, 1, 1, 2, 2, 2)", x, sizeof x));
  const std::string npy =
      "{type: npy, x: " + dir.file("x6.npy") + ", y: " + dir.file("y.npy") + "}";
  const std::string expected = "error: data.train: the samples of NPY samples '" +
                               dir.file("x6.npy") + "' with labels '" + dir.file("y.npy") +
                               "' have shape [1, 1, 1, 2, 2, 2], 6 dimensions, but a sample has "
                               "at most 5";
  CHECK_THAT(validate_error(dir, npy), Contains(expected) && Contains("x.reshape(len(x), -1)"));
  const auto plan = trainer::testing::run_trainer("plan " + dir.file("labels.yaml"), true);
  CHECK(plan.code == 2);
  CHECK_THAT(plan.out, Contains(expected) && !Contains("plain_md"));

  // 5 dimensions are taken, and planned.
  write_bytes(dir.file("x5.npy"), npy_bytes("<f4", "(4, 1, 1, 2, 2, 2)", x, sizeof x));
  const std::string five =
      "{type: npy, x: " + dir.file("x5.npy") + ", y: " + dir.file("y.npy") + "}";
  const std::string config = dir.file("five.yaml");
  write_text(config, "name: five\ndata:\n  train: " + five +
                         "\nmodel:\n  layers: [{type: flatten}, {type: linear, out_features: "
                         "3}]\ntrain: {batch_size: 2}\n");
  const auto validated = trainer::testing::run_trainer("validate " + config, true);
  INFO(validated.out);
  CHECK(validated.code == 0);
  const auto planned = trainer::testing::run_trainer("plan " + config, true);
  INFO(planned.out);
  CHECK(planned.code == 0);

  // An evaluation set's samples are checked too.
  write_bytes(dir.file("i.idx"),
              idx_bytes({4, 1, 1, 1, 2, 2, 2, 2}, std::vector<std::uint8_t>(64)));
  write_bytes(dir.file("l.idx"), idx_bytes({4}, {0, 1, 2, 0}));
  const std::string idx =
      "{type: idx, images: " + dir.file("i.idx") + ", labels: " + dir.file("l.idx") + "}";
  CHECK_THAT(validate_error(dir, five, idx),
             Contains("error: data.eval: the samples of IDX images '" + dir.file("i.idx") +
                      "' with labels '" + dir.file("l.idx") +
                      "' have shape [1, 1, 1, 2, 2, 2, 2], 7 dimensions"));
}

TEST_CASE("a class count near the model's asks for the model's size first, and names the label") {
  TempDir dir;
  write_bytes(dir.file("i.idx"), idx_bytes({4, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  write_bytes(dir.file("l.idx"), idx_bytes({4}, {0, 1, 3, 2}));  // 4 classes, the model 3
  const std::string out = validate_error(
      dir, "{type: idx, images: " + dir.file("i.idx") + ", labels: " + dir.file("l.idx") + "}");
  CHECK_THAT(out, Contains("the last layer gives 3 outputs but the data has 4 classes (its "
                           "largest label, 3, is at sample 2 of IDX labels '" +
                           dir.file("l.idx") + "' (byte offset 10))") &&
                      Contains("set the last layer's size to 4, or check that label (if the "
                               "labels count from 1, as 1..3, they make one class more: class "
                               "labels count from 0)"));
  // One output for labels 0 and 1: PyTorch's binary way, which cross_entropy does not take.
  write_bytes(dir.file("l.idx"), idx_bytes({4}, {0, 1, 1, 0}));
  const auto binary = trainer::testing::run_trainer(
      "validate " + dir.file("labels.yaml") + " model.layers[1].out_features=1", true);
  CHECK(binary.code == 2);
  CHECK_THAT(binary.out, Contains("the last layer gives 1 outputs but the data has 2 classes") &&
                             Contains("set the last layer's size to 2: cross_entropy takes one "
                                      "output per class, two for a binary classifier") &&
                             !Contains("count from 1"));
}

TEST_CASE("a model of more outputs than a training set's labels reach is offered classes:") {
  TempDir dir;
  write_bytes(dir.file("i.idx"), idx_bytes({4, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  write_bytes(dir.file("l.idx"), idx_bytes({4}, {0, 1, 1, 0}));  // 2 classes, the model 3
  const std::string inferred =
      "{type: idx, images: " + dir.file("i.idx") + ", labels: " + dir.file("l.idx");
  CHECK_THAT(validate_error(dir, inferred + "}"),
             Contains("the last layer gives 3 outputs but the data has 2 classes (read off its "
                      "largest label, as data.train has no `classes:`)") &&
                 Contains("set the last layer's size to 2, or data.train.classes: 3 if the "
                          "training set lacks some of the classes"));
  // Declared classes are the user's word: only the model's size is offered.
  const std::string declared = validate_error(dir, inferred + ", classes: 2}");
  CHECK_THAT(declared, Contains("the last layer gives 3 outputs but the data has 2 classes\n") &&
                           Contains("set the last layer's size to 2\n"));
  const auto taken = trainer::testing::run_trainer(
      "validate " + dir.file("labels.yaml") + " data.train.classes=3", true);
  INFO(taken.out);
  CHECK(taken.code == 0);
}

TEST_CASE("a label -100 is a sample in no class; another negative label is refused") {
  TempDir dir;
  const auto validate = [&](const std::string& train) {
    const std::string config = dir.file("ignore.yaml");
    write_text(config, "name: ignore\ndata:\n  train: " + train +
                           "\nmodel:\n  layers: [{type: flatten}, {type: linear, out_features: "
                           "3}]\ntrain: {batch_size: 2}\n");
    return trainer::testing::run_trainer("validate " + config, true);
  };
  write_text(dir.file("a.csv"), "a,y\n1,0\n2,-100\n3,2\n4,1\n");
  const auto csv = validate("{type: csv, path: " + dir.file("a.csv") + "}");
  INFO(csv.out);
  CHECK(csv.code == 0);  // 3 classes, inferred from the other labels

  const float x[4] = {};
  const std::int64_t y[4] = {2, -100, 0, 1};
  write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(4, 1)", x, sizeof x));
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(4,)", y, sizeof y));
  const std::string npy = "{type: npy, x: " + dir.file("x.npy") + ", y: " + dir.file("y.npy");
  const auto taken = validate(npy + ", classes: 3}");
  INFO(taken.out);
  CHECK(taken.code == 0);

  write_text(dir.file("b.csv"), "a,y\n1,0\n2,-1\n");
  const auto refused = validate("{type: csv, path: " + dir.file("b.csv") + "}");
  CHECK(refused.code == 2);
  CHECK_THAT(refused.out, Contains("line 3: label '-1' is not a class in [0, inf) (nor -100, the "
                                   "label of an ignored sample)"));
  // A label that is no class for another reason says which.
  write_text(dir.file("c.csv"), "a,y\n1,0\n2,1.5\n");
  CHECK_THAT(validate("{type: csv, path: " + dir.file("c.csv") + "}").out,
             Contains("line 3: label '1.5' is not a whole number, so no class (for float targets "
                      "set regression: true on the source)"));
  write_text(dir.file("d.csv"), "a,y\n1,0\n2,9223372036854775807\n");
  CHECK_THAT(validate("{type: csv, path: " + dir.file("d.csv") + "}").out,
             Contains("line 3: label '9223372036854775807' is too large to be a class"));

  const std::int64_t none[4] = {-100, -100, -100, -100};
  write_bytes(dir.file("none.npy"), npy_bytes("<i8", "(4,)", none, sizeof none));
  const auto empty =
      validate("{type: npy, x: " + dir.file("x.npy") + ", y: " + dir.file("none.npy") + "}");
  CHECK(empty.code == 2);
  CHECK_THAT(empty.out, Contains("every label is -100 (an ignored sample): there is no class"));
  // With the classes given, nothing would train: a whole run of "loss none".
  const auto unscored = validate("{type: npy, x: " + dir.file("x.npy") +
                                 ", y: " + dir.file("none.npy") + ", classes: 3}");
  CHECK(unscored.code == 2);
  CHECK_THAT(unscored.out, Contains("every label is -100 (an ignored sample): no sample has a "
                                    "class to train on or score"));
}
