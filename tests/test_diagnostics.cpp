// labels: cpu
#include <catch2/catch.hpp>
#include "runner/config/diagnostics.h"
using trainer::config::nearest;
TEST_CASE("nearest suggests the closest name") {
  CHECK(nearest("optimzer", {"optimizer", "output", "model"}) == "optimizer");
  CHECK(nearest("lr", {"lr", "momentum"}) == "lr");
  CHECK(nearest("zzzzzzzz", {"optimizer", "model"}).empty());
}

TEST_CASE("nearest takes a word cut short for the one name it begins") {
  CHECK(nearest("eval.acc", {"eval.loss", "eval.accuracy", "eval.top5"}) == "eval.accuracy");
  CHECK(nearest("out_feat", {"out_features", "bias", "init"}) == "out_features");
  // Too short, or the beginning of several names: no guess.
  CHECK(nearest("ev", {"eval.accuracy"}).empty());
  CHECK(nearest("eval.", {"eval.loss", "eval.accuracy", "eval.top5"}).empty());
}
