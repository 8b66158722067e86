// labels: cpu
// Parameter initializers on a built graph: each one's bound or spread against
// its formula, and a bias drawn with its layer's weight's fan-in.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "runner/config/yaml_reader.h"
#include "runner/graph/builder.h"
#include "runner/graph/init.h"

using namespace trainer;
using namespace trainer::graph;

namespace {

Graph build(const std::string& layers) {
  config::Diagnostics diags;
  const config::Node model = config::parse_yaml("layers:\n" + layers, "model.yaml", diags);
  REQUIRE(diags.empty());
  ModelInput in;
  in.batch = 2;
  in.sample_shape = {3, 8, 8};
  in.num_classes = 10;
  Graph g = build_graph(model, in, diags);
  REQUIRE(diags.empty());
  return g;
}

std::vector<float> values_of(const Graph& g, const std::string& name) {
  for (const auto& p : g.params) {
    if (p.name != name) continue;
    std::vector<float> out;
    initialize_param(p, 1, out);
    return out;
  }
  FAIL("no parameter " << name);
  return {};
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double std_dev(const std::vector<float>& v) {
  double sum = 0, sq = 0;
  for (float x : v) sum += x, sq += static_cast<double>(x) * x;
  const double n = static_cast<double>(v.size()), mean = sum / n;
  return std::sqrt(sq / n - mean * mean);
}

// Uniform draws fill (-bound, bound): the largest is just under the bound.
void check_uniform(const std::vector<float>& v, double bound) {
  CHECK(max_abs(v) <= bound);
  CHECK(max_abs(v) > 0.97 * bound);
  CHECK(std_dev(v) == Approx(bound / std::sqrt(3.0)).epsilon(0.05));
}

}  // namespace

TEST_CASE("uniform_fan_in bounds weight and bias by 1/sqrt(fan_in), as PyTorch's default") {
  const Graph g = build(
      "  - {type: conv2d, name: conv, out_channels: 16, kernel: 3, init: uniform_fan_in,"
      " bias_init: uniform_fan_in}\n"
      "  - {type: flatten}\n"
      "  - {type: linear, name: fc, out_features: 10, init: uniform_fan_in,"
      " bias_init: uniform_fan_in}\n");
  const double conv_fan_in = 3 * 3 * 3, fc_fan_in = 16 * 6 * 6;
  check_uniform(values_of(g, "conv.weight"), 1 / std::sqrt(conv_fan_in));
  check_uniform(values_of(g, "fc.weight"), 1 / std::sqrt(fc_fan_in));
  // Biases: the weight's fan-in, not their own length.
  const auto conv_bias = values_of(g, "conv.bias"), fc_bias = values_of(g, "fc.bias");
  CHECK(max_abs(conv_bias) <= 1 / std::sqrt(conv_fan_in));
  CHECK(max_abs(conv_bias) > 0.5 / std::sqrt(conv_fan_in));
  CHECK(max_abs(fc_bias) <= 1 / std::sqrt(fc_fan_in));
  CHECK(max_abs(fc_bias) > 0.3 / std::sqrt(fc_fan_in));
}

TEST_CASE("the default weight init is kaiming_uniform (relu gain), biases start at zero") {
  const Graph g = build("  - {type: flatten}\n  - {type: linear, name: fc, out_features: 10}\n");
  check_uniform(values_of(g, "fc.weight"), std::sqrt(6.0 / 192));
  CHECK(max_abs(values_of(g, "fc.bias")) == 0.0);
}

TEST_CASE("normal initializers have their formula's spread") {
  const Graph g = build(
      "  - {type: flatten}\n"
      "  - {type: linear, name: a, out_features: 64, init: kaiming_normal}\n"
      "  - {type: linear, name: b, out_features: 10, init: xavier_normal}\n");
  CHECK(std_dev(values_of(g, "a.weight")) == Approx(std::sqrt(2.0 / 192)).epsilon(0.05));
  CHECK(std_dev(values_of(g, "b.weight")) == Approx(std::sqrt(2.0 / (64 + 10))).epsilon(0.08));
}
