// labels: cpu
// Optimizer updates (CPU vector ops) against the textbook update rules, and the
// learning-rate schedules at their defining points.
#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>
#include <vector>

#include "ops/cpu/onednn.h"
#include "ops/kernel.h"
#include "runner/train/schedule.h"

using namespace trainer;

namespace {

struct Reference {
  std::vector<double> p, m, v;
};

// Three steps of one optimizer on an n-element parameter, compared with a
// double-precision transcription of the published update rules. Long
// parameters are split over the threads (vector_ops.cpp parallel_chunks).
void check_optimizer(OptimizerKind kind, bool nesterov, float weight_decay, std::size_t n = 4,
                     float momentum = 0.9f) {
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  Reference ref{std::vector<double>(n), std::vector<double>(n, 0), std::vector<double>(n, 0)};
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = 0.5f - 0.75f * static_cast<float>(i % 5);
    ref.p[i] = p[i];
  }
  OptimizerStep o;
  o.kind = kind;
  o.lr = 0.1f;
  o.momentum = momentum;
  o.nesterov = nesterov;
  o.weight_decay = weight_decay;
  const bool sgd_buffer = kind == OptimizerKind::sgd && momentum != 0.0f;
  for (int t = 1; t <= 3; ++t) {
    for (std::size_t i = 0; i < n; ++i) g[i] = 0.3f * static_cast<float>(i % 7 + t) - 0.5f;
    o.step = t;
    ParamSlot slot{p.data(),
                   g.data(),
                   kind == OptimizerKind::sgd && !sgd_buffer ? nullptr : m.data(),
                   kind == OptimizerKind::sgd ? nullptr : v.data(),
                   static_cast<std::int64_t>(n),
                   true};
    cpu_backend().vector_ops().optimizer_step({slot}, o);
    for (std::size_t i = 0; i < n; ++i) {
      double grad = g[i];
      double& w = ref.p[i];
      if (kind == OptimizerKind::sgd) {
        grad += weight_decay * w;
        if (!sgd_buffer) {
          w -= 0.1 * grad;
          continue;
        }
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
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != Approx(ref.p[i]).epsilon(1e-5).margin(1e-6)) ++wrong;
  CHECK(wrong == 0);
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

TEST_CASE("long parameters are updated by every thread, the tail included") {
  cpu::set_cpu_threads(2);
  const std::size_t n = 100003;  // above the parallel threshold, not a multiple of 16
  check_optimizer(OptimizerKind::sgd, false, 0.01f, n);
  check_optimizer(OptimizerKind::sgd, true, 0.01f, n);
  check_optimizer(OptimizerKind::sgd, false, 0.01f, n, 0.0f);
  check_optimizer(OptimizerKind::adam, false, 0.01f, n);
  check_optimizer(OptimizerKind::adamw, false, 0.05f, n);
}

TEST_CASE("sum of squares detects non-finite gradients") {
  std::vector<float> a = {3.0f, 4.0f}, b = {NAN};
  bool finite = true;
  CHECK(cpu_backend().vector_ops().sum_squares({{a.data(), {2}, DType::f32}}, finite) == 25.0);
  CHECK(finite);
  cpu_backend().vector_ops().sum_squares({{a.data(), {2}, DType::f32}, {b.data(), {1}, DType::f32}},
                                         finite);
  CHECK_FALSE(finite);
  // Large finite values: their squares overflow float32 sums, not the double
  // sum, so the gradients count as finite (as on a GPU) and the norm is right.
  std::vector<float> large(2048, 1e18f);
  const double total =
      cpu_backend().vector_ops().sum_squares({{large.data(), {2048}, DType::f32}}, finite);
  CHECK(finite);
  CHECK(total == Approx(2048 * 1e36).epsilon(1e-6));
  // ...and the sum is exact in every lane and in the tail.
  std::vector<float> odd(1027);
  for (std::size_t i = 0; i < odd.size(); ++i) odd[i] = static_cast<float>(i % 7);
  double want = 0;
  for (float v : odd) want += static_cast<double>(v) * v;
  CHECK(cpu_backend().vector_ops().sum_squares({{odd.data(), {1027}, DType::f32}}, finite) == want);
}

TEST_CASE("a backend holds at most kMaxScheduledUpdates updates' schedule ahead") {
  VectorOps& ops = cpu_backend().vector_ops();
  const ScheduledUpdate update{0.1f, 0.9f};
  CHECK_NOTHROW(ops.set_schedule(0, std::vector<ScheduledUpdate>(kMaxScheduledUpdates, update)));
  CHECK_THROWS_AS(
      ops.set_schedule(0, std::vector<ScheduledUpdate>(kMaxScheduledUpdates + 1, update)),
      std::invalid_argument);
  ops.set_schedule(0, {});
}

TEST_CASE("clipping inside the update scales the gradients by the clipped norm") {
  // Two parameters whose gradients have the global norm 5 * 2 = 10 after
  // grad_scale 2: SGD without momentum moves each by lr * g * grad_scale * clip factor.
  VectorOps& ops = cpu_backend().vector_ops();
  for (double clip : {4.0, 100.0}) {
    INFO("clip " << clip);
    std::vector<float> p1 = {1.0f, 1.0f}, g1 = {3.0f, 0.0f}, p2 = {1.0f}, g2 = {4.0f};
    std::vector<ParamSlot> slots = {{p1.data(), g1.data(), nullptr, nullptr, 2},
                                    {p2.data(), g2.data(), nullptr, nullptr, 1}};
    OptimizerStep step;
    step.lr = 0.1f;
    step.grad_scale = 2.0f;
    step.clip_norm = clip;
    ops.optimizer_step(slots, step);
    const double scale = clip < 10 ? 2.0 * clip / (10.0 + 1e-6) : 2.0;
    CHECK(p1[0] == static_cast<float>(1.0f - 0.1f * (3.0f * static_cast<float>(scale))));
    CHECK(p1[1] == 1.0f);
    CHECK(p2[0] == static_cast<float>(1.0f - 0.1f * (4.0f * static_cast<float>(scale))));
    CHECK_FALSE(ops.nonfinite_weights_seen());
  }
  // Non-finite gradients are remembered until asked for, once.
  std::vector<float> p = {1.0f}, g = {NAN};
  OptimizerStep step;
  step.clip_norm = 1.0;
  ops.optimizer_step({{p.data(), g.data(), nullptr, nullptr, 1}}, step);
  g[0] = 1.0f;
  ops.optimizer_step({{p.data(), g.data(), nullptr, nullptr, 1}}, step);
  CHECK(ops.nonfinite_weights_seen());
  CHECK_FALSE(ops.nonfinite_weights_seen());
  // Without clipping each optimizer's update notices them as it applies
  // them, in a slot long enough to be split across threads too.
  step.clip_norm = 0;
  step.step = 1;
  for (const auto& [kind, momentum, nesterov] :
       {std::tuple{OptimizerKind::sgd, 0.0f, false}, std::tuple{OptimizerKind::sgd, 0.9f, false},
        std::tuple{OptimizerKind::sgd, 0.9f, true}, std::tuple{OptimizerKind::adam, 0.0f, false},
        std::tuple{OptimizerKind::adamw, 0.0f, false}}) {
    step.kind = kind;
    step.momentum = momentum;
    step.nesterov = nesterov;
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{1} << 17}) {
      INFO("optimizer " << static_cast<int>(kind) << " momentum " << momentum << " nesterov "
                        << nesterov << ", slot of " << n);
      std::vector<float> q(n, 1.0f), h(n, 0.5f), s0(n, 0.0f), s1(n, 0.0f);
      const bool stateful = kind != OptimizerKind::sgd || momentum > 0;
      const ParamSlot slot{q.data(), h.data(), stateful ? s0.data() : nullptr,
                           kind != OptimizerKind::sgd ? s1.data() : nullptr, n};
      ops.optimizer_step({slot}, step);
      CHECK_FALSE(ops.nonfinite_weights_seen());
      h[n - 1] = INFINITY;
      ops.optimizer_step({slot}, step);
      CHECK(ops.nonfinite_weights_seen());
      CHECK_FALSE(ops.nonfinite_weights_seen());
    }
  }
  // A finite gradient whose square overflows Adam's second moment: the
  // weight stays finite (m / inf = 0), the run is lost all the same.
  std::vector<float> q = {1.0f, 1.0f}, h = {0.5f, 1e30f}, s0(2, 0.0f), s1(2, 0.0f);
  step.kind = OptimizerKind::adam;
  ops.optimizer_step({{q.data(), h.data(), s0.data(), s1.data(), 2}}, step);
  CHECK(std::isfinite(q[1]));
  CHECK(std::isinf(s1[1]));
  CHECK(ops.nonfinite_weights_seen());
}

TEST_CASE("loss scaling inside the update skips overflowing steps and holds the schedule") {
  // Adam over the gradients g1, inf, g2 computed at the loss scale: the scaled
  // run must equal a plain one over g1, g2 divided by the scale each was
  // computed at, with the learning rates, beta1 and Adam steps of updates 1
  // and 2.
  VectorOps& ops = cpu_backend().vector_ops();
  const std::vector<ScheduledUpdate> schedule = {{0.1f, 0.9f}, {0.05f, 0.8f}, {0.02f, 0.7f}};
  LossScaleRule rule;
  rule.growth_interval = 100;
  LossScaleState start;
  start.scale = 8;
  OptimizerStep step;
  step.kind = OptimizerKind::adam;
  step.lr = 1.0f;     // overridden by the table
  step.beta1 = 0.5f;  // so is beta1
  step.step = 7;      // and by the count of applied updates

  std::vector<float> p = {1.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f), g;
  const ParamSlot slot{p.data(), nullptr, m.data(), v.data(), 2, true};
  auto scaled_step = [&](std::vector<float> grad) {
    g = std::move(grad);
    ParamSlot s = slot;
    s.grad = g.data();
    ops.optimizer_step({s}, step);
  };
  ops.start_loss_scaling(rule, start);
  ops.set_schedule(0, schedule);
  std::vector<float> seed(3);
  ops.fill_loss_seed({seed.data(), {3}, DType::f32}, 0.5);
  CHECK(seed[2] == 4.0f);
  scaled_step({8.0f, -16.0f});
  CHECK(ops.loss_scale_state().steps == 1);
  const std::vector<float> after_first = p;
  scaled_step({INFINITY, 1.0f});
  CHECK(p == after_first);                    // skipped: weights and moments untouched
  CHECK_FALSE(ops.nonfinite_weights_seen());  // the scaler's to handle, not a divergence
  const LossScaleState skipped = ops.loss_scale_state();
  CHECK(skipped.scale == 4);
  CHECK(skipped.skipped == 1);
  CHECK(skipped.last_overflow_step == 2);
  CHECK(skipped.last_overflow_scale == 8);
  ops.fill_loss_seed({seed.data(), {3}, DType::f32}, 0.5);
  CHECK(seed[0] == 2.0f);  // the seed follows the scale
  scaled_step({2.0f, 4.0f});
  CHECK(ops.loss_scale_state().steps == 3);
  ops.stop_loss_scaling();
  ops.fill_loss_seed({seed.data(), {3}, DType::f32}, 0.5);
  CHECK(seed[1] == 0.5f);  // unscaled again

  std::vector<float> q = {1.0f, -2.0f}, qm(2, 0.0f), qv(2, 0.0f);
  std::vector<float> g1 = {1.0f, -2.0f}, g2 = {0.5f, 1.0f};  // g / the scale
  OptimizerStep plain = step;
  plain.lr = 0.1f;
  plain.beta1 = 0.9f;
  plain.step = 1;
  ops.optimizer_step({{q.data(), g1.data(), qm.data(), qv.data(), 2, true}}, plain);
  plain.lr = 0.05f;
  plain.beta1 = 0.8f;
  plain.step = 2;
  ops.optimizer_step({{q.data(), g2.data(), qm.data(), qv.data(), 2, true}}, plain);
  CHECK(p == q);
  CHECK(m == qm);
  CHECK(v == qv);

  // A window that starts later: 4 updates applied of 5 steps, so the next
  // update takes the window's first rate and momentum.
  LossScaleState later;
  later.scale = 2;
  later.steps = 5;
  later.skipped = 1;
  OptimizerStep sgd;
  sgd.lr = 1.0f;  // overridden by the window
  std::vector<float> w = {1.0f}, wg = {2.0f};
  ops.start_loss_scaling(rule, later);
  ops.set_schedule(4, {{0.25f, 0.5f}, {0.5f, 0.6f}});
  // Momentum 0.5 on an empty buffer: the buffer is the gradient itself.
  std::vector<float> buffer = {0.0f};
  ops.optimizer_step({{w.data(), wg.data(), buffer.data(), nullptr, 1}}, sgd);
  CHECK(w[0] == 1.0f - 0.25f * (2.0f / 2.0f));
  CHECK(buffer[0] == 1.0f);
  // The next applied update: the window's second rate and momentum.
  wg = {4.0f};
  ops.optimizer_step({{w.data(), wg.data(), buffer.data(), nullptr, 1}}, sgd);
  CHECK(buffer[0] == Approx(0.6 * 1.0 + 4.0 / 2.0));
  CHECK(w[0] == Approx(0.75 - 0.5 * 2.6));
  ops.stop_loss_scaling();
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
  // Values of torch.optim.lr_scheduler.OneCycleLR(max_lr, total_steps, pct_start,
  // cycle_momentum=False) at the same steps.
  CHECK(learning_rate(s, 0.1, 0, 100) == Approx(0.04));
  CHECK(learning_rate(s, 0.1, 1, 100) == Approx(0.042813780565907456));
  CHECK(learning_rate(s, 0.1, 29, 100) == Approx(1.0));
  CHECK(learning_rate(s, 0.1, 50, 100) == Approx(0.793893450575732));
  CHECK(learning_rate(s, 0.1, 99, 100) == Approx(4e-6));
  s.max_lr = 0;  // optimizer.lr is the peak
  CHECK(learning_rate(s, 0.1, 1, 10) == Approx(0.052));
  CHECK(learning_rate(s, 0.1, 2, 10) == Approx(0.1));
  CHECK(learning_rate(s, 0.1, 5, 10) == Approx(0.06112620219362893));
  CHECK(learning_rate(s, 0.1, 9, 10) == Approx(4e-7));
  // A rise shorter than one step starts at the peak, never dividing by zero.
  s.pct_start = 0.1;
  CHECK(learning_rate(s, 0.1, 0, 10) == Approx(0.1));
  CHECK(std::isfinite(learning_rate(s, 0.1, 0, 1)));
  // The range test: optimizer.lr at the first step, max_lr at the last, a
  // constant factor between steps (1e-6 -> 1 over 7 steps: x10 each).
  s.type = "range_test";
  s.max_lr = 1.0;
  CHECK(learning_rate(s, 1e-6, 0, 7) == Approx(1e-6));
  CHECK(learning_rate(s, 1e-6, 3, 7) == Approx(1e-3));
  CHECK(learning_rate(s, 1e-6, 6, 7) == Approx(1.0));
  CHECK(learning_rate(s, 1e-6, 9, 7) == Approx(1.0));  // past the end: stays at max_lr
  CHECK(learning_rate(s, 1e-6, 0, 1) == Approx(1e-6));
}

TEST_CASE("one-cycle momentum: OneCycleLR's cycle_momentum") {
  config::ScheduleConfig s;
  using train::scheduled_momentum;
  // Not cycled: the optimizer's own, whatever the step.
  s.type = "onecycle";
  CHECK(scheduled_momentum(s, 0.9, 0, 100) == 0.9);
  CHECK(scheduled_momentum(s, 0.9, 29, 100) == 0.9);
  s.type = "cosine";
  s.cycle_momentum = true;
  CHECK(scheduled_momentum(s, 0.9, 29, 100) == 0.9);
  // Values of the momentum (SGD) and of betas[0] (Adam) that
  // torch.optim.lr_scheduler.OneCycleLR(total_steps, pct_start=0.3,
  // cycle_momentum=True) sets at the same steps (base 0.85, max 0.95).
  s.type = "onecycle";
  s.pct_start = 0.3;
  struct Reference {
    std::int64_t step, total;
    double momentum;
  };
  const Reference torch_values[] = {{0, 100, 0.95},
                                    {1, 100, 0.9497068978577179},
                                    {9, 100, 0.9280593532681191},
                                    {14, 100, 0.9027069454292709},
                                    {29, 100, 0.85},
                                    {30, 100, 0.8500503466729342},
                                    {50, 100, 0.8706107373853763},
                                    {98, 100, 0.9499496533270657},
                                    {99, 100, 0.95},
                                    {1, 10, 0.9},
                                    {2, 10, 0.85},
                                    {5, 10, 0.8888739533021842},
                                    {9, 10, 0.95}};
  for (const double optimizer_momentum : {0.0, 0.9})
    for (const Reference& r : torch_values) {
      INFO("step " << r.step << " of " << r.total);
      CHECK(scheduled_momentum(s, optimizer_momentum, r.step, r.total) == Approx(r.momentum));
    }
  // Other bounds.
  s.base_momentum = 0.5;
  s.max_momentum = 0.7;
  CHECK(scheduled_momentum(s, 0.9, 0, 10) == Approx(0.7));
  CHECK(scheduled_momentum(s, 0.9, 2, 10) == Approx(0.5));
}
