// labels: cpu
// Mixed-precision pieces: fp16 rounding against the compiler's own fp16
// conversion, the loss scaler's state machine, and the bf16 and emulated-fp16
// paths of the matmul-like kernels (linear, conv2d) against references
// computed from inputs rounded the same way.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "cpu_bf16.h"
#include "ops/cpu/half.h"
#include "runner/train/loss_scale.h"
#include "tests/op_check.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

float compiler_half(float v) {
  return static_cast<float>(static_cast<_Float16>(v));
}

bool same_float(float a, float b) {
  return std::isnan(a) ? std::isnan(b)
                       : std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// The low-precision run's gradients against the float32 run's for one random
// incoming gradient (both after their forward): dx and dw within `tolerance`.
// Returns both sets for further checks.
std::pair<OpRun::Grads, OpRun::Grads> check_gradients_near_f32(OpRun& low, OpRun& f32,
                                                               std::uint64_t seed, double tolerance,
                                                               const std::string& what) {
  HostTensor dy = HostTensor::zeros(low.signature().output);
  std::mt19937_64 rng(seed);
  fill_uniform(dy.f, rng, -1, 1);
  auto g = low.backward(dy);
  auto g32 = f32.backward(dy);
  check_close(g.inputs[0].f, g32.inputs[0].f, tolerance, tolerance, what + " dx");
  check_close(g.params[0].f, g32.params[0].f, tolerance, tolerance, what + " dw");
  return {std::move(g), std::move(g32)};
}

config::LossScaleConfig scaling(double init, std::int64_t growth_interval,
                                std::int64_t hysteresis = 1, double min_scale = 1,
                                std::int64_t patience = 3) {
  config::LossScaleConfig c;
  c.init_scale = init;
  c.growth_interval = growth_interval;
  c.hysteresis = hysteresis;
  c.min_scale = min_scale;
  c.collapse_patience = patience;
  return c;
}

}  // namespace

TEST_CASE("fp16 rounding matches the compiler's fp16 conversion bit for bit") {
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f,
                  -0.0f,
                  1.0f,
                  -1.0f,
                  65504.0f,
                  65519.0f,
                  65520.0f,
                  -65520.0f,
                  70000.0f,
                  1e-8f,
                  5.9604645e-8f,
                  2.9802322e-8f,
                  8.940697e-8f,
                  6.1035156e-5f,
                  6.1e-5f,
                  1.00048828125f,
                  1.00146484375f,
                  3.14159265f,
                  inf,
                  -inf,
                  std::numeric_limits<float>::quiet_NaN()}) {
    INFO(v);
    CHECK(same_float(cpu::round_to_half(v), compiler_half(v)));
  }
  std::mt19937 rng(5);
  int mismatches = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float v = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (!same_float(cpu::round_to_half(v), compiler_half(v)) && ++mismatches < 5) {
      INFO(v);
      CHECK(cpu::round_to_half(v) == compiler_half(v));
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("dynamic loss scaling grows after clean steps and backs off on overflow") {
  train::LossScaler s(scaling(1024, 3), true);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 1024);
  CHECK(s.update(true));
  CHECK(s.scale() == 2048);  // three clean steps
  CHECK_FALSE(s.update(false));
  CHECK(s.scale() == 1024);  // halved at once (hysteresis 1)
  CHECK(s.skipped_steps() == 1);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 1024);  // the overflow restarted the count
  CHECK(s.update(true));
  CHECK(s.scale() == 2048);
}

TEST_CASE("hysteresis tolerates consecutive overflows before backing off") {
  train::LossScaler s(scaling(256, 100, 2), true);
  CHECK_FALSE(s.update(false));
  CHECK(s.scale() == 256);
  CHECK(s.update(true));  // a clean step restores the tolerance
  CHECK_FALSE(s.update(false));
  CHECK(s.scale() == 256);
  CHECK_FALSE(s.update(false));
  CHECK(s.scale() == 128);
  CHECK(s.skipped_steps() == 3);
}

TEST_CASE("overflows at the minimum scale collapse the scaler; a clean step resets the count") {
  train::LossScaler s(scaling(4, 100, 1, 1, 2), true);
  CHECK_FALSE(s.update(false));  // 4 -> 2
  CHECK_FALSE(s.update(false));  // 2 -> 1
  CHECK_FALSE(s.collapsed());
  CHECK_FALSE(s.update(false));  // at the minimum: 1
  CHECK(s.scale() == 1);
  CHECK_FALSE(s.collapsed());
  CHECK(s.update(true));
  CHECK_FALSE(s.update(false));
  CHECK_FALSE(s.collapsed());
  CHECK_FALSE(s.update(false));
  CHECK(s.collapsed());
  CHECK(s.collapsed_at_step() == 6);
  CHECK_FALSE(s.update(false));
  CHECK(s.collapsed_at_step() == 6);  // still the step the run of overflows reached patience
  CHECK(s.update(true));
  CHECK(s.collapsed());  // a clean step after the collapse does not hide it from a later read
  CHECK(s.collapsed_at_step() == 6);
}

TEST_CASE("static loss scaling skips overflowing steps and keeps its scale") {
  config::LossScaleConfig c = scaling(65536, 1, 1, 1, 2);
  c.static_scale = 128;
  train::LossScaler s(c, true);
  CHECK(s.scale() == 128);
  for (int i = 0; i < 5; ++i) CHECK(s.update(true));
  CHECK(s.scale() == 128);
  CHECK_FALSE(s.update(false));
  CHECK(s.scale() == 128);
  CHECK_FALSE(s.update(false));
  CHECK(s.collapsed());
}

TEST_CASE("a disabled scaler has scale 1 and applies every step") {
  train::LossScaler s(scaling(65536, 1), false);
  CHECK(s.scale() == 1);
  CHECK(s.update(false));
  CHECK(s.skipped_steps() == 0);
  CHECK(s.to_json().empty());
}

TEST_CASE("the scaler's state survives a checkpoint round trip") {
  train::LossScaler a(scaling(1024, 3, 2), true);
  a.update(true);
  a.update(false);
  train::LossScaler b(scaling(1024, 3, 2), true);
  b.restore(a.to_json(), 2);
  for (bool finite : {false, true, true, true, true, false, false}) {
    CHECK(a.update(finite) == b.update(finite));
    CHECK(a.scale() == b.scale());
  }
  CHECK(a.skipped_steps() == b.skipped_steps());
  CHECK(b.state().steps == 9);
  CHECK(b.state().last_overflow_step == 9);
  CHECK(b.state().last_overflow_scale == a.state().last_overflow_scale);
  // A checkpoint of a run without loss scaling: the initial scale, the step count kept.
  train::LossScaler c(scaling(1024, 3, 2), true);
  c.restore(nlohmann::json::object(), 7);
  CHECK(c.scale() == 1024);
  CHECK(c.state().steps == 7);
}

TEST_CASE("bf16 linear computes on bf16-rounded inputs and weights with float32 results") {
  if (!cpu_computes_bf16()) return;
  OpCase c{"linear", {{"out_features", std::int64_t{24}}}, {{9, 40}}};
  c.compute = DType::bf16;
  OpRun run(cpu_backend(), c);
  OpRun f32(cpu_backend(), {"linear", {{"out_features", std::int64_t{24}}}, {{9, 40}}});
  f32.inputs = run.inputs;
  f32.params = run.params;
  const auto y = run.forward();
  const auto want = linear_reference(rounded(run.inputs[0], bf16_round),
                                     rounded(run.params[0], bf16_round), run.params[1].f);
  check_close(y.f, want, 1e-5, 1e-5, "bf16 linear y");
  // ...and that is not what float32 computes: the bf16 path really ran.
  const auto y32 = f32.forward();
  double largest = 0;
  for (std::size_t i = 0; i < y.f.size(); ++i)
    largest = std::max(largest, static_cast<double>(std::abs(y.f[i] - y32.f[i])));
  CHECK(largest > 1e-5);
  // Gradients: close to float32's, within bf16's precision.
  const auto [g, g32] = check_gradients_near_f32(run, f32, 3, 3e-2, "bf16 linear");
  check_close(g.params[1].f, g32.params[1].f, 3e-2, 3e-2, "bf16 linear db");
}

TEST_CASE("bf16 conv2d computes on bf16-rounded inputs and weights") {
  if (!cpu_computes_bf16()) return;
  for (const ConvCase& cc :
       {ConvCase{{2, 8, 9, 9}, 16, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
        ConvCase{{3, 16, 8, 8}, 32, 1, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false}}) {
    OpCase c = conv_case(cc);
    c.compute = DType::bf16;
    OpRun run(cpu_backend(), c);
    const auto y = run.forward();
    const auto& o = run.signature().output;
    const std::vector<float> b = cc.bias ? run.params[1].f : std::vector<float>{};
    const auto want = conv2d_reference(
        rounded(run.inputs[0], bf16_round), rounded(run.params[0], bf16_round), b, o, cc.stride[0],
        cc.stride[1], cc.padding[0], cc.padding[1], cc.dilation[0], cc.dilation[1], cc.groups);
    check_close(y.f, want, 1e-4, 1e-4, "bf16 conv y");
    OpRun f32(cpu_backend(), conv_case(cc));
    f32.inputs = run.inputs;
    f32.params = run.params;
    f32.forward();
    check_gradients_near_f32(run, f32, 4, 5e-2, "bf16 conv");
  }
}

// The GPU tests' reference where the CPU has no bf16 (compare_backends): the
// float32 kernels on data rounded to bf16 give what the bf16 kernels give, up
// to the order of the sums. Unrounded data would not.
TEST_CASE("float32 on bf16-rounded data matches bf16 compute (the GPU tests' fallback reference)") {
  if (!cpu_computes_bf16()) return;
  const OpCase linear{"linear", {{"out_features", std::int64_t{24}}}, {{16, 40}}};
  const OpCase conv =
      conv_case(ConvCase{{4, 3, 10, 10}, 8, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true});
  for (const OpCase& wide : {linear, conv}) {
    INFO("op " << wide.op);
    OpCase low = wide;
    low.compute = DType::bf16;
    OpRun run(cpu_backend(), low, 3);
    OpRun ref(cpu_backend(), wide, 3);
    round_reference_data(ref, DType::bf16);
    run.inputs = ref.inputs;
    run.params = ref.params;
    compare_runs(run, ref, wide.op, 1e-4, 1e-4, true, -1, DType::bf16);

    OpRun unrounded(cpu_backend(), wide, 3);
    OpRun low_again(cpu_backend(), low, 3);
    const auto y32 = unrounded.forward();
    const auto y16 = low_again.forward();
    double largest = 0;
    for (std::size_t k = 0; k < y32.f.size(); ++k)
      largest = std::max(largest, static_cast<double>(std::abs(y32.f[k] - y16.f[k])));
    CHECK(largest > 1e-3);
  }
}

TEST_CASE("emulated fp16 linear rounds inputs, weights and results through fp16") {
  OpCase c{"linear", {{"out_features", std::int64_t{6}}}, {{5, 12}}};
  c.compute = DType::f16;
  OpRun run(cpu_backend(), c);
  const auto y = run.forward();
  for (float v : y.f) CHECK(cpu::round_to_half(v) == v);
  const auto exact = linear_reference(rounded(run.inputs[0], half_round),
                                      rounded(run.params[0], half_round), run.params[1].f);
  check_close(y.f, exact, 1e-3, 1e-3, "fp16 linear y");

  // Past fp16's range the output overflows to infinity, as it would in fp16.
  for (auto& v : run.inputs[0].f) v = 3000.0f;
  for (auto& v : run.params[0].f) v = 10.0f;
  const auto big = run.forward();
  for (float v : big.f) CHECK(std::isinf(v));
}

TEST_CASE("emulated fp16 turns an overflowing incoming gradient into inf gradients") {
  OpCase c = conv_case({{2, 3, 6, 6}, 4, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true});
  c.compute = DType::f16;
  OpRun run(cpu_backend(), c);
  run.forward();
  HostTensor dy = HostTensor::zeros(run.signature().output);
  for (auto& v : dy.f) v = 1e5f;  // beyond 65504
  const auto g = run.backward(dy);
  bool all_finite = true;
  for (float v : g.params[0].f) all_finite = all_finite && std::isfinite(v);
  CHECK_FALSE(all_finite);
  // A gradient within range stays finite.
  for (auto& v : dy.f) v = 1.0f;
  const auto ok = run.backward(dy);
  for (float v : ok.params[0].f) CHECK(std::isfinite(v));
}

TEST_CASE("emulated fp16 rounds each input before the product, not only the result") {
  // 1 + 3 * 2^-12 is not an fp16 value; it rounds to 1 + 2^-10. A difference
  // with -1 cancels the rest, so only a rounded input gives 2^-10.
  const float off_grid = 1.0f + 3.0f / 4096.0f;
  OpCase c{"linear", {{"out_features", std::int64_t{2}}, {"bias", false}}, {{1, 2}}};
  c.compute = DType::f16;
  OpRun run(cpu_backend(), c);
  run.inputs[0].f = {off_grid, -1.0f};
  run.params[0].f = {1.0f, 1.0f, 1.0f, -1.0f};
  const auto y = run.forward();
  CHECK(y.f[0] == 1.0f / 1024.0f);
  // The incoming gradient too: dx = dy W.
  HostTensor dy = HostTensor::zeros({1, 2});
  dy.f = {off_grid, -1.0f};
  const auto g = run.backward(dy);
  CHECK(g.inputs[0].f[0] == 1.0f / 1024.0f);
}
