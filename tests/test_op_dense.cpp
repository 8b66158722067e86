// labels: cpu
// linear and conv2d on the CPU backend: forward against direct reference loops,
// gradients against finite differences on odd sizes, stride, padding, dilation,
// groups and without bias; null gradients are skipped.
#include <catch2/catch.hpp>

#include "ops/cpu/onednn.h"
#include "tests/op_check.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

const std::vector<ConvCase> conv_cases = {
    {{2, 3, 7, 9}, 4, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
    {{3, 4, 9, 8}, 6, 2, {3, 2}, {2, 1}, {1, 0}, {1, 1}, true},     // groups, stride, asym kernel
    {{1, 2, 11, 10}, 3, 1, {3, 3}, {2, 3}, {2, 1}, {2, 2}, false},  // dilation, no bias
    {{2, 6, 5, 5}, 6, 6, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},     // depthwise
    {{2, 5, 6, 7}, 3, 1, {1, 1}, {2, 2}, {0, 0}, {1, 1}, true},     // 1x1, stride 2
};

}  // namespace

TEST_CASE("linear forward matches the reference loop, gradients match finite differences") {
  for (auto [n, in, out, bias] : std::vector<std::tuple<int, int, int, bool>>{
           {5, 7, 3, true}, {1, 13, 9, false}, {17, 4, 11, true}}) {
    INFO("linear " << n << "x" << in << " -> " << out << " bias " << bias);
    OpRun run(cpu_backend(),
              {"linear", {{"out_features", std::int64_t{out}}, {"bias", bias}}, {{n, in}}});
    const auto y = run.forward();
    const std::vector<float> b = bias ? run.params[1].f : std::vector<float>{};
    check_close(y.f, linear_reference(run.inputs[0], run.params[0], b), 1e-5, 1e-5, "linear y");
    check_gradients(run);
  }
}

TEST_CASE("linear with an activation epilogue: forward against the reference, gradients") {
  for (const std::string act : {"relu", "gelu", "gelu_tanh"})
    for (bool bias : {true, false}) {
      INFO("linear + " << act << " bias " << bias);
      const OpCase c{"linear",
                     {{"out_features", std::int64_t{6}}, {"bias", bias}, {"activation", act}},
                     {{5, 9}}};
      // relu's kink: the finite differences need every pre-activation well
      // away from zero, so take the first data seed that gives that.
      const auto away_from_kink = [&](const OpRun& r) {
        const std::vector<float> b = bias ? r.params[1].f : std::vector<float>{};
        for (double z : linear_reference(r.inputs[0], r.params[0], b))
          if (std::abs(z) < 0.1) return false;
        return true;
      };
      std::uint64_t seed = 1;
      while (act == "relu" && seed < 500 && !away_from_kink(OpRun(cpu_backend(), c, seed))) ++seed;
      OpRun run(cpu_backend(), c, seed);
      REQUIRE((act != "relu" || away_from_kink(run)));
      const auto y = run.forward();
      const std::vector<float> b = bias ? run.params[1].f : std::vector<float>{};
      std::vector<double> want = linear_reference(run.inputs[0], run.params[0], b);
      for (double& z : want) {
        if (act == "relu") z = std::max(z, 0.0);
        if (act == "gelu") z = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
        if (act == "gelu_tanh")
          z = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
      }
      check_close(y.f, want, 1e-5, 1e-5, "linear + " + act);
      check_gradients(run);
      INFO(run.kernel().implementation());
      CHECK(run.kernel().implementation().find("+" + act) != std::string::npos);
    }
}

TEST_CASE("linear without an input gradient leaves the input gradient alone") {
  OpRun run(cpu_backend(), {"linear", {{"out_features", std::int64_t{3}}}, {{4, 5}}});
  run.forward();
  HostTensor r = HostTensor::zeros({4, 3});
  r.f.assign(r.f.size(), 1.0f);
  const auto g = run.backward(r, true, 7, -1, {false});
  CHECK(g.inputs[0].f.empty());
  // d bias = column sums of grad_output = 4 rows of ones.
  for (float v : g.params[1].f) CHECK(v == Approx(4.0f));
}

TEST_CASE("conv2d forward matches the direct reference loop") {
  for (const auto& c : conv_cases) {
    INFO("conv2d x " << to_string(c.x) << " groups " << c.groups);
    OpRun run(cpu_backend(), conv_case(c));
    const auto y = run.forward();
    const std::vector<float> b = c.bias ? run.params[1].f : std::vector<float>{};
    const auto want = conv2d_reference(run.inputs[0], run.params[0], b, run.signature().output,
                                       c.stride[0], c.stride[1], c.padding[0], c.padding[1],
                                       c.dilation[0], c.dilation[1], c.groups);
    check_close(y.f, want, 1e-5, 1e-5, "conv2d y");
    INFO(run.kernel().implementation());
    CHECK(run.kernel().implementation().rfind("onednn:", 0) == 0);
  }
}

TEST_CASE("conv2d gradients match finite differences") {
  for (const auto& c : conv_cases) {
    INFO("conv2d x " << to_string(c.x) << " groups " << c.groups);
    OpRun run(cpu_backend(), conv_case(c));
    check_gradients(run);
  }
}

TEST_CASE("conv2d on random shapes and attributes") {
  std::mt19937_64 rng(2024);
  auto pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int t = 0; t < 6; ++t) {
    const std::int64_t groups = pick(1, 3);
    ConvCase c{{pick(1, 3), groups * pick(1, 3), pick(5, 12), pick(5, 12)},
               groups * pick(1, 3),
               groups,
               {pick(1, 3), pick(1, 3)},
               {pick(1, 3), pick(1, 3)},
               {pick(0, 1), pick(0, 1)},
               {pick(1, 2), pick(1, 2)},
               pick(0, 1) == 1};
    INFO("conv2d x " << to_string(c.x) << " out " << c.out << " groups " << groups << " kernel "
                     << c.kernel[0] << "x" << c.kernel[1] << " stride " << c.stride[0] << ","
                     << c.stride[1] << " pad " << c.padding[0] << "," << c.padding[1] << " dil "
                     << c.dilation[0] << "," << c.dilation[1]);
    OpRun run(cpu_backend(), conv_case(c));
    const auto y = run.forward();
    const std::vector<float> b = c.bias ? run.params[1].f : std::vector<float>{};
    check_close(y.f,
                conv2d_reference(run.inputs[0], run.params[0], b, run.signature().output,
                                 c.stride[0], c.stride[1], c.padding[0], c.padding[1],
                                 c.dilation[0], c.dilation[1], c.groups),
                1e-5, 1e-5, "conv2d y");
    GradCheckOptions o;
    o.samples_per_tensor = 12;
    check_gradients(run, o);
  }
}

TEST_CASE("the CPU thread count can be set") {
  const int before = cpu::cpu_threads();
  REQUIRE(before >= 1);
  CHECK(cpu::set_cpu_threads(1));
  CHECK(cpu::cpu_threads() == 1);
  CHECK(cpu::set_cpu_threads(before));
  CHECK(cpu::cpu_threads() == before);
  CHECK_FALSE(cpu::set_cpu_threads(0));
}
