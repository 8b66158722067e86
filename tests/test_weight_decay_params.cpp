// labels: cpu
// optimizer.weight_decay_params: which parameters of a prepared session the
// optimizer decays (matrices by default; every trainable one with `all`).
#include <catch2/catch.hpp>

#include "runner/config/load.h"
#include "runner/train/session.h"

using namespace trainer;

namespace {

train::Session session_with(const std::string& optimizer_line) {
  const config::Config c = config::load_config_text(
      "data:\n"
      "  train: {type: synthetic, shape: [6], classes: 3, size: 32}\n"
      "model:\n"
      "  layers:\n"
      "    - {type: linear, out_features: 4, name: fc}\n"
      "    - {type: batchnorm, name: bn}\n"
      "    - {type: linear, out_features: 3, name: head}\n"
      "  loss: {type: cross_entropy}\n"
      "train: {batch_size: 8}\n" +
          optimizer_line,
      "decay.yaml");
  return train::prepare_session(c);
}

bool decays(const train::Session& s, const std::string& name) {
  for (const auto& p : s.graph.params)
    if (p.name == name) return p.weight_decay;
  FAIL("no parameter " << name);
  return false;
}

}  // namespace

TEST_CASE("by default weight decay acts on matrices only") {
  const auto s = session_with("optimizer: {type: adamw, weight_decay: 0.1}\n");
  CHECK(decays(s, "fc.weight"));
  CHECK(decays(s, "head.weight"));
  CHECK_FALSE(decays(s, "fc.bias"));
  CHECK_FALSE(decays(s, "bn.weight"));
  CHECK_FALSE(decays(s, "bn.bias"));
}

TEST_CASE("weight_decay_params: all decays every trainable parameter, never the statistics") {
  const auto s =
      session_with("optimizer: {type: sgd, weight_decay: 0.1, weight_decay_params: all}\n");
  for (const auto& p : s.graph.params) {
    INFO(p.name);
    CHECK(p.weight_decay == p.trainable);
  }
  CHECK(decays(s, "fc.bias"));
  CHECK(decays(s, "bn.weight"));
  CHECK_FALSE(decays(s, "bn.running_mean"));
}

TEST_CASE("weight_decay_params takes only the documented values") {
  CHECK_THROWS_WITH(
      session_with("optimizer: {weight_decay_params: biases}\n"),
      Catch::Contains("optimizer.weight_decay_params") && Catch::Contains("matrices"));
}
