// labels: cpu
// Activations, dropout, add, concat, flatten/reshape and the losses on the CPU
// backend: forward values against formulas, gradients against finite
// differences, dropout replay and eval identity, loss padding rows and ignore_index.
#include <catch2/catch.hpp>

#include <cmath>

#include "ops/cpu/onednn.h"
#include "tests/op_check.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

// Keeps every value at least 0.05 from zero, where relu-like ops have a kink.
void away_from_zero(HostTensor& t) {
  for (float& v : t.f) v = v < 0 ? v - 0.05f : v + 0.05f;
}

double reference_activation(const std::string& op, double x) {
  if (op == "relu") return std::max(x, 0.0);
  if (op == "leaky_relu") return x > 0 ? x : 0.2 * x;
  if (op == "sigmoid") return 1 / (1 + std::exp(-x));
  if (op == "tanh") return std::tanh(x);
  if (op == "gelu") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (op == "gelu_tanh")
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  if (op == "silu") return x / (1 + std::exp(-x));
  return NAN;
}

}  // namespace

TEST_CASE("activations: forward values and gradients") {
  for (const std::string op :
       {"relu", "leaky_relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu"}) {
    INFO(op);
    std::map<std::string, FieldValue> attrs;
    if (op == "leaky_relu") attrs["slope"] = 0.2;
    if (op == "gelu_tanh") attrs["approximate"] = std::string("tanh");
    OpRun run(cpu_backend(), {op == "gelu_tanh" ? "gelu" : op, attrs, {{3, 5, 7}}});
    for (float& v : run.inputs[0].f) v *= 3.0f;
    away_from_zero(run.inputs[0]);
    const auto y = run.forward();
    std::vector<double> want;
    for (float v : run.inputs[0].f) want.push_back(reference_activation(op, v));
    check_close(y.f, want, 1e-5, 1e-6, op + " y");
    check_gradients(run);
  }
}

TEST_CASE("dropout: inverted scaling, replay with the same seed, identity in eval") {
  const double p = 0.3;
  OpRun run(cpu_backend(), {"dropout", {{"p", p}}, {{64, 50}}});
  for (float& v : run.inputs[0].f) v = 1.0f + std::abs(v);  // never zero
  const auto a = run.forward(true, 42);
  const auto b = run.forward(true, 42);
  const auto c = run.forward(true, 43);
  CHECK(a.f == b.f);
  CHECK(a.f != c.f);
  std::size_t zeros = 0;
  for (std::size_t k = 0; k < a.f.size(); ++k) {
    if (a.f[k] == 0.0f)
      ++zeros;
    else
      CHECK(a.f[k] == Approx(run.inputs[0].f[k] / (1 - p)));
  }
  // 3200 draws: the fraction dropped is p within 5 standard deviations (0.04).
  CHECK(std::abs(static_cast<double>(zeros) / a.f.size() - p) < 0.04);
  CHECK(run.forward(false).f == run.inputs[0].f);
  GradCheckOptions o;
  o.seed = 42;
  check_gradients(run, o);
}

TEST_CASE("dropout: an image stored blocked draws the mask of its plain layout") {
  // [2, 16, 3, 5] stored as [2, 16 / b, 3, 5, b]: element (n, c, h, w) keeps
  // or drops alike in both, whatever the block (CPUs differ in theirs; the
  // GPU stores plain).
  const Shape shape = {2, 16, 3, 5};
  OpRun plain(cpu_backend(), {"dropout", {{"p", 0.5}}, {shape}});
  for (float& v : plain.inputs[0].f) v = 1.0f;
  const auto want = plain.forward(true, 42);
  for (const int block : {8, 16}) {
    INFO("channel block " << block);
    OpCase c{"dropout", {{"p", 0.5}}, {shape}};
    c.format.channel_block = block;
    OpRun blocked(cpu_backend(), c);
    for (float& v : blocked.inputs[0].f) v = 1.0f;
    const auto got = blocked.forward(true, 42);
    std::size_t k = 0, mismatches = 0;
    for (std::int64_t n = 0; n < 2; ++n)
      for (std::int64_t cb = 0; cb < 16 / block; ++cb)
        for (std::int64_t hw = 0; hw < 15; ++hw)
          for (std::int64_t ci = 0; ci < block; ++ci, ++k) {
            const auto plain_index = static_cast<std::size_t>((n * 16 + cb * block + ci) * 15 + hw);
            if (got.f[k] != want.f[plain_index]) ++mismatches;
          }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("dropout: a row draws by its position in the step's batch, not in its micro-batch") {
  // 8 rows of [3, 5] as one batch; then as 2 micro-batches of 4 and as the
  // shards of 2 ranks (rows r, r + 2, ...), each saying where its rows sit.
  OpRun whole(cpu_backend(), {"dropout", {{"p", 0.5}}, {{8, 3, 5}}});
  for (float& v : whole.inputs[0].f) v = 1.0f;
  const auto all = whole.forward(true, 42);
  const std::size_t per_row = 15;
  auto check_rows = [&](std::int64_t first, std::int64_t stride) {
    INFO("first position " << first << ", stride " << stride);
    OpRun part(cpu_backend(), {"dropout", {{"p", 0.5}}, {{4, 3, 5}}});
    for (float& v : part.inputs[0].f) v = 1.0f;
    part.first_position = first;
    part.position_stride = stride;
    const auto got = part.forward(true, 42);
    for (std::size_t r = 0; r < 4; ++r) {
      const auto row = static_cast<std::size_t>(first + static_cast<std::int64_t>(r) * stride);
      const std::vector<float> want(
          all.f.begin() + static_cast<std::ptrdiff_t>(row * per_row),
          all.f.begin() + static_cast<std::ptrdiff_t>((row + 1) * per_row));
      const std::vector<float> have(got.f.begin() + static_cast<std::ptrdiff_t>(r * per_row),
                                    got.f.begin() + static_cast<std::ptrdiff_t>((r + 1) * per_row));
      CHECK(have == want);
    }
    return got;
  };
  const auto first_half = check_rows(0, 1);
  const auto second_half = check_rows(4, 1);
  check_rows(0, 2);
  check_rows(1, 2);
  // Two micro-batches at the same position would draw the same masks.
  CHECK(first_half.f != second_half.f);
}

TEST_CASE("add with activation relu: the clamped sum, gradients masked by the output") {
  for (const std::int64_t n : {std::int64_t{7}, std::int64_t{50003}}) {  // serial, and split
    INFO("n " << n);
    cpu::set_cpu_threads(2);
    OpRun run(cpu_backend(),
              {"add", {{"activation", std::string("relu")}}, {{2, n}, {2, n}, {2, n}}});
    const auto y = run.forward();
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < y.f.size(); ++k) {
      const float sum = run.inputs[0].f[k] + run.inputs[1].f[k] + run.inputs[2].f[k];
      if (y.f[k] != (sum > 0 ? sum : 0.0f)) ++wrong;
    }
    CHECK(wrong == 0);
    HostTensor dy = HostTensor::zeros({2, n});
    std::mt19937_64 rng(4);
    fill_uniform(dy.f, rng, -1.0f, 1.0f);
    const auto grads = run.backward(dy);
    for (const auto& g : grads.inputs) {
      wrong = 0;
      for (std::size_t k = 0; k < g.f.size(); ++k)
        if (g.f[k] != (y.f[k] > 0 ? dy.f[k] : 0.0f)) ++wrong;
      CHECK(wrong == 0);
    }
  }
}

// Every kernel that applies a relu turns a NaN into 0, as oneDNN's relu (a
// max with 0) does: the CUDA kernels follow the same rule, so both backends
// train alike (a run finds such NaNs in the weights, behind a finite loss).
TEST_CASE("a NaN that reaches a relu becomes 0 in every kernel that applies one") {
  const std::string relu = "relu";
  OpCase synced{"batchnorm", {{"activation", relu}, {"sync", true}}, {{2, 3, 2, 2}}};
  const OpCase cases[] = {
      {"relu", {}, {{2, 3}}},
      {"add", {{"activation", relu}}, {{2, 3}, {2, 3}}},
      {"linear", {{"out_features", std::int64_t{4}}, {"activation", relu}}, {{2, 3}}},
      {"batchnorm", {{"activation", relu}}, {{2, 3, 2, 2}}},
      synced};
  for (const OpCase& c : cases) {
    OpRun run(cpu_backend(), c);
    INFO(c.op << ": " << run.kernel().implementation());
    run.inputs[0].f[4] = std::nanf("");
    CHECK(run.forward().f[4] == 0.0f);
  }
}

TEST_CASE("add, concat, flatten and reshape: values and gradients") {
  {
    OpRun run(cpu_backend(), {"add", {}, {{2, 3, 5}, {2, 3, 5}, {2, 3, 5}}});
    const auto y = run.forward();
    for (std::size_t k = 0; k < y.f.size(); ++k)
      CHECK(y.f[k] == Approx(run.inputs[0].f[k] + run.inputs[1].f[k] + run.inputs[2].f[k]));
    check_gradients(run);
  }
  {
    // Long enough to be split over the threads, with a tail.
    cpu::set_cpu_threads(2);
    const std::int64_t n = 50003;
    OpRun run(cpu_backend(), {"add", {}, {{2, n}, {2, n}, {2, n}}});
    const auto y = run.forward();
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < y.f.size(); ++k)
      if (y.f[k] != run.inputs[0].f[k] + run.inputs[1].f[k] + run.inputs[2].f[k]) ++wrong;
    CHECK(wrong == 0);
    const auto grads = run.backward(y);
    for (const auto& g : grads.inputs) CHECK(g.f == y.f);  // the gradient of a sum: copied
  }
  {
    OpRun run(cpu_backend(), {"concat", {}, {{2, 3, 2, 2}, {2, 1, 2, 2}}});
    const auto y = run.forward();
    // Sample 1, channel 3 is the first channel of the second input.
    for (int k = 0; k < 4; ++k) CHECK(y.f[16 + 12 + k] == run.inputs[1].f[4 + k]);
    CHECK(y.f[16 + 5] == run.inputs[0].f[12 + 5]);
    check_gradients(run);
  }
  {
    OpRun run(cpu_backend(), {"concat", {{"axis", std::int64_t{-1}}}, {{3, 2}, {3, 4}, {3, 1}}});
    const auto y = run.forward();
    CHECK(y.f[7 + 2] == run.inputs[1].f[4]);
    CHECK(y.f[7 + 6] == run.inputs[2].f[1]);
    check_gradients(run);
  }
  for (const auto& c :
       std::vector<OpCase>{{"flatten", {}, {{2, 3, 4}}},
                           {"reshape", {{"shape", std::vector<std::int64_t>{4, -1}}}, {{2, 12}}}}) {
    OpRun run(cpu_backend(), c);
    CHECK(run.forward().f == run.inputs[0].f);
    check_gradients(run);
  }
}

TEST_CASE("cross_entropy: value, label smoothing, ignore_index, valid_rows, gradients") {
  const std::int64_t n = 6, k = 5;
  for (const double smoothing : {0.0, 0.1}) {
    INFO("label_smoothing " << smoothing);
    OpRun run(cpu_backend(), {"cross_entropy",
                              {{"label_smoothing", smoothing}, {"ignore_index", std::int64_t{-1}}},
                              {{n, k}, {n}},
                              {DType::f32, DType::i64}});
    for (float& v : run.inputs[0].f) v *= 3.0f;
    run.inputs[1].i = {0, 4, -1, 2, 3, 1};  // row 2 ignored
    auto reference = [&](std::int64_t rows) {
      double total = 0;
      int counted = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t label = run.inputs[1].i[r];
        if (label == -1) continue;
        double z = 0;
        for (std::int64_t c = 0; c < k; ++c) z += std::exp(run.inputs[0].f[r * k + c]);
        for (std::int64_t c = 0; c < k; ++c) {
          const double target = (c == label ? 1 - smoothing : 0) + smoothing / k;
          total -= target * (run.inputs[0].f[r * k + c] - std::log(z));
        }
        ++counted;
      }
      return total / counted;
    };
    CHECK(run.forward().f[0] == Approx(reference(n)).epsilon(1e-5));
    CHECK(run.forward(true, 7, 4).f[0] == Approx(reference(4)).epsilon(1e-5));
    check_gradients(run);
    GradCheckOptions padded;
    padded.valid_rows = 4;
    check_gradients(run, padded);
    // Padding rows and ignored rows get zero gradient.
    HostTensor g1 = HostTensor::zeros({1});
    g1.f[0] = 1.0f;
    run.forward(true, 7, 4);
    const auto g = run.backward(g1, true, 7, 4);
    for (std::int64_t c = 0; c < k; ++c) {
      CHECK(g.inputs[0].f[2 * k + c] == 0.0f);
      CHECK(g.inputs[0].f[5 * k + c] == 0.0f);
    }
    CHECK(g.inputs[1].f.empty());  // labels are not differentiable
  }
}

TEST_CASE("cross_entropy of very large logits keeps the loss") {
  // Equal logits give log(K) however large they are (computed next to 1e20,
  // log(K) was lost and the loss read 0).
  const std::int64_t k = 5;
  for (const double smoothing : {0.0, 0.1}) {
    INFO("label_smoothing " << smoothing);
    OpRun run(cpu_backend(), {"cross_entropy",
                              {{"label_smoothing", smoothing}},
                              {{2, k}, {2}},
                              {DType::f32, DType::i64}});
    for (float& v : run.inputs[0].f) v = 1e20f;
    run.inputs[1].i = {3, 0};
    CHECK(run.forward().f[0] == Approx(std::log(static_cast<double>(k))).epsilon(1e-6));
  }
}

TEST_CASE("cross_entropy rejects a label outside the classes") {
  OpRun run(cpu_backend(), {"cross_entropy", {}, {{2, 3}, {2}}, {DType::f32, DType::i64}});
  run.inputs[1].i = {1, 3};
  CHECK_THROWS_WITH(run.forward(), Catch::Contains("label 3 of row 1 is outside [0, 3)"));
}

TEST_CASE("mse: value over the valid rows and gradients") {
  OpRun run(cpu_backend(), {"mse", {}, {{4, 3}, {4, 3}}});
  double all = 0, first3 = 0;
  for (int k = 0; k < 12; ++k) {
    const double d = run.inputs[0].f[k] - run.inputs[1].f[k];
    all += d * d / 12;
    if (k < 9) first3 += d * d / 9;
  }
  CHECK(run.forward().f[0] == Approx(all).epsilon(1e-5));
  CHECK(run.forward(true, 7, 3).f[0] == Approx(first3).epsilon(1e-5));
  check_gradients(run);
  GradCheckOptions padded;
  padded.valid_rows = 3;
  check_gradients(run, padded);
}
