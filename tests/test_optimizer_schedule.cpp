// labels: cpu
// Optimizer updates (CPU vector ops) against the textbook update rules, and the
// learning-rate schedules at their defining points.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "ops/kernel.h"
#include "runner/train/schedule.h"

using namespace trainer;

namespace {

struct Reference {
  std::vector<double> p, m, v;
};

// Three steps of one optimizer on a 4-element parameter, compared with a
// double-precision transcription of the published update rules.
void check_optimizer(OptimizerKind kind, bool nesterov, float weight_decay) {
  std::vector<float> p = {0.5f, -1.0f, 2.0f, 0.0f}, m(4, 0.0f), v(4, 0.0f), g(4);
  Reference ref{{0.5, -1.0, 2.0, 0.0}, std::vector<double>(4, 0), std::vector<double>(4, 0)};
  OptimizerStep o;
  o.kind = kind;
  o.lr = 0.1f;
  o.momentum = 0.9f;
  o.nesterov = nesterov;
  o.weight_decay = weight_decay;
  for (int t = 1; t <= 3; ++t) {
    for (int i = 0; i < 4; ++i) g[i] = 0.3f * static_cast<float>(i + t) - 0.5f;
    o.step = t;
    ParamSlot slot{p.data(), g.data(), m.data(), kind == OptimizerKind::sgd ? nullptr : v.data(),
                   4,        true};
    cpu_backend().vector_ops().optimizer_step({slot}, o);
    for (int i = 0; i < 4; ++i) {
      double grad = g[i];
      double& w = ref.p[i];
      if (kind == OptimizerKind::sgd) {
        grad += weight_decay * w;
        ref.m[i] = t == 1 ? grad : 0.9 * ref.m[i] + grad;  // PyTorch: buf = g at the first step
        w -= 0.1 * (nesterov ? grad + 0.9 * ref.m[i] : ref.m[i]);
      } else {
        if (kind == OptimizerKind::adamw)
          w *= 1 - 0.1 * weight_decay;
        else
          grad += weight_decay * w;
        ref.m[i] = 0.9 * ref.m[i] + 0.1 * grad;
        ref.v[i] = 0.999 * ref.v[i] + 0.001 * grad * grad;
        const double mhat = ref.m[i] / (1 - std::pow(0.9, t));
        const double vhat = ref.v[i] / (1 - std::pow(0.999, t));
        w -= 0.1 * mhat / (std::sqrt(vhat) + 1e-8);
      }
    }
  }
  for (int i = 0; i < 4; ++i) CHECK(p[i] == Approx(ref.p[i]).epsilon(1e-5).margin(1e-6));
}

}  // namespace

TEST_CASE("SGD with momentum, nesterov and weight decay follows the update rule") {
  check_optimizer(OptimizerKind::sgd, false, 0.0f);
  check_optimizer(OptimizerKind::sgd, true, 0.01f);
}

TEST_CASE("Adam and AdamW follow the update rule with bias correction") {
  check_optimizer(OptimizerKind::adam, false, 0.0f);
  check_optimizer(OptimizerKind::adam, false, 0.01f);
  check_optimizer(OptimizerKind::adamw, false, 0.05f);
}

TEST_CASE("sum of squares detects non-finite gradients") {
  std::vector<float> a = {3.0f, 4.0f}, b = {NAN};
  bool finite = true;
  CHECK(cpu_backend().vector_ops().sum_squares({{a.data(), {2}, DType::f32}}, finite) == 25.0);
  CHECK(finite);
  cpu_backend().vector_ops().sum_squares({{a.data(), {2}, DType::f32}, {b.data(), {1}, DType::f32}},
                                         finite);
  CHECK_FALSE(finite);
}

TEST_CASE("learning-rate schedules") {
  config::ScheduleConfig s;
  using train::learning_rate;
  s.type = "constant";
  CHECK(learning_rate(s, 0.1, 50, 100) == Approx(0.1));
  s.type = "step";
  s.step_size = 10;
  s.gamma = 0.5;
  CHECK(learning_rate(s, 0.1, 9, 100) == Approx(0.1));
  CHECK(learning_rate(s, 0.1, 25, 100) == Approx(0.025));
  s.type = "multistep";
  s.milestones = {30, 60};
  CHECK(learning_rate(s, 0.1, 29, 100) == Approx(0.1));
  CHECK(learning_rate(s, 0.1, 60, 100) == Approx(0.1 * 0.25));
  s.type = "cosine";
  s.min_lr = 0.0;
  CHECK(learning_rate(s, 0.1, 0, 100) == Approx(0.1));
  CHECK(learning_rate(s, 0.1, 50, 100) == Approx(0.05));
  CHECK(learning_rate(s, 0.1, 100, 100) == Approx(0.0).margin(1e-12));
  s.warmup_steps = 10;
  CHECK(learning_rate(s, 0.1, 0, 110) == Approx(0.01));
  CHECK(learning_rate(s, 0.1, 9, 110) == Approx(0.1));
  CHECK(learning_rate(s, 0.1, 60, 110) == Approx(0.05));
  s.type = "linear";
  s.warmup_steps = 0;
  s.min_lr = 0.02;
  CHECK(learning_rate(s, 0.1, 50, 100) == Approx(0.06));
  s.type = "onecycle";
  s.max_lr = 1.0;
  s.pct_start = 0.3;
  CHECK(learning_rate(s, 0.1, 0, 100) == Approx(1.0 / 25));
  CHECK(learning_rate(s, 0.1, 30, 100) == Approx(1.0));
  CHECK(learning_rate(s, 0.1, 100, 100) == Approx(1e-4));
}
