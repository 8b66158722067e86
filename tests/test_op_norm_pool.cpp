// labels: cpu
// batchnorm, layernorm, maxpool2d, avgpool2d and global_avgpool on the CPU
// backend: forward against reference loops (batchnorm in training and eval,
// running statistics updated like PyTorch), gradients against finite differences.
#include <catch2/catch.hpp>

#include <numeric>

#include "tests/op_check.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

using Ints = std::vector<std::int64_t>;

// Distinct values per tensor, at least 0.03 apart (3 finite-difference steps),
// so no max window has a tie that a perturbation could flip.
void distinct_values(HostTensor& t, std::uint64_t seed) {
  std::vector<float> v(t.f.size());
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = 0.03f * static_cast<float>(k) - 0.5f;
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  t.f = v;
}

}  // namespace

TEST_CASE("batchnorm training forward and running statistics match the reference") {
  for (const Shape& x : std::vector<Shape>{{4, 3, 5, 7}, {9, 5}, {1, 2, 3, 3}}) {
    INFO("batchnorm x " << to_string(x));
    const double momentum = 0.3, eps = 1e-3;
    OpRun run(cpu_backend(), {"batchnorm", {{"momentum", momentum}, {"eps", eps}}, {x}});
    std::vector<double> rm(run.params[2].f.begin(), run.params[2].f.end());
    std::vector<double> rv(run.params[3].f.begin(), run.params[3].f.end());
    const auto want = batchnorm_reference(run.inputs[0], run.params[0].f, run.params[1].f, rm, rv,
                                          true, momentum, eps);
    const auto y = run.forward(true);
    check_close(y.f, want, 1e-4, 1e-4, "batchnorm y");
    check_close(run.params[2].f, rm, 1e-5, 1e-6, "running_mean");
    check_close(run.params[3].f, rv, 1e-5, 1e-6, "running_var");
    // Eval uses the running statistics and leaves them alone.
    const auto eval_want = batchnorm_reference(run.inputs[0], run.params[0].f, run.params[1].f, rm,
                                               rv, false, momentum, eps);
    const auto y_eval = run.forward(false);
    check_close(y_eval.f, eval_want, 1e-4, 1e-4, "batchnorm eval y");
    check_close(run.params[3].f, rv, 1e-5, 1e-6, "running_var after eval");
  }
}

TEST_CASE("batchnorm in an eval-only program uses the running statistics") {
  OpRun run(cpu_backend(), {"batchnorm", {}, {{3, 4, 2, 2}}}, 5, /*training=*/false);
  std::vector<double> rm(run.params[2].f.begin(), run.params[2].f.end());
  std::vector<double> rv(run.params[3].f.begin(), run.params[3].f.end());
  const auto want = batchnorm_reference(run.inputs[0], run.params[0].f, run.params[1].f, rm, rv,
                                        false, 0.1, 1e-5);
  check_close(run.forward(false).f, want, 1e-4, 1e-4, "batchnorm eval y");
}

TEST_CASE("batchnorm with activation relu equals batchnorm then relu") {
  // Both kernels: oneDNN's (fuse_norm_relu) and SyncBN's own loops.
  for (bool sync : {false, true})
    for (const Shape& x : std::vector<Shape>{{4, 16, 5, 3}, {7, 5}}) {
      INFO("sync " << sync << " x " << to_string(x));
      OpRun fused(cpu_backend(),
                  {"batchnorm", {{"sync", sync}, {"activation", std::string("relu")}}, {x}});
      OpRun plain(cpu_backend(), {"batchnorm", {{"sync", sync}}, {x}});
      OpRun relu(cpu_backend(), {"relu", {}, {x}});
      plain.inputs = fused.inputs;
      plain.params = fused.params;
      const auto y = fused.forward(true);
      const auto z = plain.forward(true);
      relu.inputs = {z};
      const auto want = relu.forward(true);
      check_close(y.f, want.f, 0, 0, "y");
      check_close(fused.params[2].f, plain.params[2].f, 0, 0, "running_mean");
      check_close(fused.params[3].f, plain.params[3].f, 0, 0, "running_var");
      HostTensor dy = HostTensor::zeros(x);
      std::mt19937_64 rng(3);
      fill_uniform(dy.f, rng, -1.0f, 1.0f);
      const auto g = fused.backward(dy);
      const auto dz = relu.backward(dy).inputs[0];
      const auto want_g = plain.backward(dz);
      check_close(g.inputs[0].f, want_g.inputs[0].f, 1e-5, 1e-6, "dx");
      check_close(g.params[0].f, want_g.params[0].f, 1e-5, 1e-6, "dweight");
      check_close(g.params[1].f, want_g.params[1].f, 1e-5, 1e-6, "dbias");
      const auto y_eval = fused.forward(false);
      relu.inputs = {plain.forward(false)};
      check_close(y_eval.f, relu.forward(false).f, 0, 0, "eval y");
    }
}

TEST_CASE("batchnorm and layernorm gradients match finite differences") {
  for (const Shape& x : std::vector<Shape>{{4, 3, 5, 3}, {7, 5}, {2, 3, 1, 5}}) {
    INFO("batchnorm x " << to_string(x));
    OpRun run(cpu_backend(), {"batchnorm", {}, {x}});
    check_gradients(run);
  }
  for (const Shape& x : std::vector<Shape>{{5, 7}, {2, 3, 9}, {3, 1}}) {
    INFO("layernorm x " << to_string(x));
    OpRun run(cpu_backend(), {"layernorm", {}, {x}});
    check_gradients(run);
  }
}

TEST_CASE("layernorm forward normalises each row") {
  OpRun run(cpu_backend(), {"layernorm", {{"eps", 1e-5}}, {{4, 6}}});
  const auto y = run.forward();
  std::vector<double> want(y.f.size());
  for (int r = 0; r < 4; ++r) {
    double mean = 0, var = 0;
    for (int k = 0; k < 6; ++k) mean += run.inputs[0].f[r * 6 + k] / 6.0;
    for (int k = 0; k < 6; ++k) var += std::pow(run.inputs[0].f[r * 6 + k] - mean, 2) / 6.0;
    for (int k = 0; k < 6; ++k)
      want[r * 6 + k] =
          (run.inputs[0].f[r * 6 + k] - mean) / std::sqrt(var + 1e-5) * run.params[0].f[k] +
          run.params[1].f[k];
  }
  check_close(y.f, want, 1e-4, 1e-4, "layernorm y");
}

TEST_CASE("max and average pooling: forward against reference loops, gradients") {
  struct PoolCase {
    Shape x;
    Ints kernel, stride, padding;
  };
  const std::vector<PoolCase> cases = {
      {{2, 3, 8, 8}, {2, 2}, {0, 0}, {0, 0}},  // stride = kernel
      {{1, 2, 7, 9}, {3, 3}, {2, 2}, {1, 1}},  // overlapping, padded, odd
      {{2, 1, 6, 5}, {3, 2}, {1, 2}, {1, 0}},  // asymmetric
  };
  // max, average, average with count_include_pad.
  for (const int kind : {0, 1, 2}) {
    const bool max = kind == 0, count_pad = kind == 2;
    const std::string op = max ? "maxpool2d" : "avgpool2d";
    for (const auto& c : cases) {
      INFO(op << (count_pad ? " count_include_pad" : "") << " x " << to_string(c.x) << " kernel "
              << c.kernel[0] << "x" << c.kernel[1]);
      std::map<std::string, FieldValue> attrs = {
          {"kernel", c.kernel}, {"stride", c.stride}, {"padding", c.padding}};
      if (!max) attrs["count_include_pad"] = count_pad;
      OpRun run(cpu_backend(), {op, attrs, {c.x}});
      distinct_values(run.inputs[0], 3);
      const auto y = run.forward();
      const std::int64_t sh = c.stride[0] ? c.stride[0] : c.kernel[0];
      const std::int64_t sw = c.stride[1] ? c.stride[1] : c.kernel[1];
      check_close(y.f,
                  pool2d_reference(run.inputs[0], run.signature().output, max, c.kernel[0],
                                   c.kernel[1], sh, sw, c.padding[0], c.padding[1], count_pad),
                  1e-6, 1e-6, op + " y");
      check_gradients(run);
      // Eval forward (no workspace) gives the same values.
      check_close(run.forward(false).f, y.f, 0, 0, op + " eval y");
    }
  }
}

TEST_CASE("avgpool2d count_include_pad divides a padded corner by the whole window") {
  // Ones, 3x3 windows, padding 1: the corner window covers 4 inputs of 9.
  for (const bool count_pad : {false, true}) {
    OpRun run(cpu_backend(), {"avgpool2d",
                              {{"kernel", Ints{3}},
                               {"stride", Ints{1}},
                               {"padding", Ints{1}},
                               {"count_include_pad", count_pad}},
                              {{1, 1, 4, 4}}});
    std::fill(run.inputs[0].f.begin(), run.inputs[0].f.end(), 1.0f);
    const auto y = run.forward();
    CHECK(y.f[0] == Approx(count_pad ? 4.0 / 9.0 : 1.0));  // corner
    CHECK(y.f[1] == Approx(count_pad ? 6.0 / 9.0 : 1.0));  // edge
    CHECK(y.f[5] == Approx(1.0));                          // inside
  }
}

TEST_CASE("global_avgpool forward and gradients") {
  OpRun run(cpu_backend(), {"global_avgpool", {}, {{3, 4, 5, 3}}});
  const auto y = run.forward();
  for (int p = 0; p < 12; ++p) {
    double s = 0;
    for (int k = 0; k < 15; ++k) s += run.inputs[0].f[p * 15 + k];
    CHECK(y.f[p] == Approx(s / 15).epsilon(1e-5));
  }
  check_gradients(run);
}
