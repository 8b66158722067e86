// labels: gpu
// The CUDA VectorOps against the CPU ones on the same data: SGD (momentum,
// nesterov, weight decay), Adam and AdamW over several parameters in one call
// (one with its own learning-rate factor), the gradient norm with non-finite
// detection, accumulate, fill, average and swap (aligned and unaligned, lengths
// that are not multiples of 4 or of the chunk size), and rounding to bf16
// (alone and in the optimizer's weight copies).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "gpu_skip.h"
#include "ops/kernel.h"

#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/cuda_backend.h"

namespace {

using trainer::Backend;

std::vector<float> random_vector(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Host copies of one parameter with gradient and two state buffers.
struct HostParam {
  std::vector<float> param, grad, s0, s1;
  bool decay;
  float lr_scale = 1.0f;
};

// Runs the step on `backend` over copies of `host`, returns the results.
std::vector<HostParam> run_step(Backend& backend, std::vector<HostParam> host,
                                const trainer::OptimizerStep& step, bool with_state) {
  std::vector<void*> allocations;
  auto upload = [&](std::vector<float>& v) {
    auto* p = static_cast<float*>(backend.allocate(v.size() * 4 + 16));
    allocations.push_back(p);
    backend.copy_to_device(p, v.data(), v.size() * 4);
    return p;
  };
  std::vector<trainer::ParamSlot> slots;
  for (auto& h : host) {
    trainer::ParamSlot s;
    s.param = upload(h.param);
    s.grad = upload(h.grad);
    s.state0 = with_state ? upload(h.s0) : nullptr;
    s.state1 = step.kind != trainer::OptimizerKind::sgd ? upload(h.s1) : nullptr;
    s.size = static_cast<std::int64_t>(h.param.size());
    s.weight_decay = h.decay;
    s.lr_scale = h.lr_scale;
    slots.push_back(s);
  }
  backend.vector_ops().optimizer_step(slots, step);
  backend.vector_ops().optimizer_step(slots, step);  // twice: state carries over
  for (std::size_t i = 0; i < host.size(); ++i) {
    backend.copy_to_host(host[i].param.data(), slots[i].param, host[i].param.size() * 4);
    if (slots[i].state0)
      backend.copy_to_host(host[i].s0.data(), slots[i].state0, host[i].s0.size() * 4);
    if (slots[i].state1)
      backend.copy_to_host(host[i].s1.data(), slots[i].state1, host[i].s1.size() * 4);
  }
  for (void* p : allocations) backend.release(p);
  return host;
}

void check_close(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i);
    REQUIRE(a[i] == Approx(b[i]).epsilon(1e-5).margin(1e-6));
  }
}

}  // namespace

TEST_CASE("CUDA optimizer steps equal the CPU ones") {
  std::mt19937 rng(5);
  std::vector<HostParam> params;
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{40001}}) {
    HostParam h{random_vector(n, rng), random_vector(n, rng), random_vector(n, rng), {}, n != 7};
    h.s1.resize(n);
    for (auto& v : h.s1) v = std::abs(std::uniform_real_distribution<float>(0.f, 1.f)(rng));
    h.lr_scale = n == 4096 ? 0.1f : 1.0f;  // model.lr_scale on one of them
    params.push_back(h);
  }
  Backend& gpu = trainer::cuda_backend(0);
  Backend& cpu = trainer::cpu_backend();

  trainer::OptimizerStep step;
  step.lr = 0.05f;
  step.weight_decay = 0.01f;
  step.grad_scale = 0.5f;
  step.step = 3;
  for (auto kind :
       {trainer::OptimizerKind::sgd, trainer::OptimizerKind::adam, trainer::OptimizerKind::adamw}) {
    for (bool nesterov : {false, true}) {
      step.kind = kind;
      step.momentum = 0.9f;
      step.nesterov = nesterov;
      const bool with_state = true;
      const auto want = run_step(cpu, params, step, with_state);
      const auto got = run_step(gpu, params, step, with_state);
      for (std::size_t i = 0; i < params.size(); ++i) {
        INFO("optimizer " << static_cast<int>(kind) << " nesterov " << nesterov << " param " << i);
        check_close(got[i].param, want[i].param);
        check_close(got[i].s0, want[i].s0);
        check_close(got[i].s1, want[i].s1);
      }
    }
  }
  step.kind = trainer::OptimizerKind::sgd;  // plain SGD without a momentum buffer
  step.momentum = 0.0f;
  const auto want = run_step(cpu, params, step, false);
  const auto got = run_step(gpu, params, step, false);
  for (std::size_t i = 0; i < params.size(); ++i) check_close(got[i].param, want[i].param);
}

TEST_CASE("CUDA clipping inside the update equals the CPU's") {
  std::mt19937 rng(6);
  std::vector<HostParam> params;
  for (std::size_t n : {std::size_t{5}, std::size_t{40001}})
    params.push_back({random_vector(n, rng), random_vector(n, rng), random_vector(n, rng),
                      std::vector<float>(n, 0.5f), true});
  Backend& gpu = trainer::cuda_backend(0);
  Backend& cpu = trainer::cpu_backend();
  trainer::OptimizerStep step;
  step.kind = trainer::OptimizerKind::adamw;
  step.lr = 0.01f;
  step.grad_scale = 0.5f;
  for (double clip : {1.0, 1e9}) {  // biting, and never biting
    INFO("clip " << clip);
    step.clip_norm = clip;
    const auto want = run_step(cpu, params, step, true);
    const auto got = run_step(gpu, params, step, true);
    for (std::size_t i = 0; i < params.size(); ++i) check_close(got[i].param, want[i].param);
  }
  CHECK_FALSE(gpu.vector_ops().nonfinite_weights_seen());
  params[1].grad[17] = NAN;
  run_step(gpu, params, step, true);
  CHECK(gpu.vector_ops().nonfinite_weights_seen());
  CHECK_FALSE(gpu.vector_ops().nonfinite_weights_seen());
  // Without clipping the update itself notices them, as the CPU's does.
  step.clip_norm = 0;
  run_step(gpu, params, step, true);
  CHECK(gpu.vector_ops().nonfinite_weights_seen());
  CHECK_FALSE(gpu.vector_ops().nonfinite_weights_seen());
  params[1].grad[17] = 0.25f;
  run_step(gpu, params, step, true);
  CHECK_FALSE(gpu.vector_ops().nonfinite_weights_seen());
}

TEST_CASE("CUDA loss scaling inside the update equals the CPU's (skip; unscale; schedule)") {
  // Adam over five steps of gradients computed at the loss scale; the second
  // step's overflow is skipped on the device, and the scale grows after two
  // clean steps. Weights, moments and the scaler's state must match the CPU.
  std::mt19937 rng(8);
  const std::vector<std::size_t> sizes = {5, 40001};
  trainer::LossScaleRule rule;
  rule.growth_interval = 2;
  trainer::LossScaleState start;
  start.scale = 1024;
  // Learning rate and beta1 by applied update (a one-cycle momentum cycle).
  const std::vector<trainer::ScheduledUpdate> schedule = {
      {0.02f, 0.95f}, {0.015f, 0.9f}, {0.01f, 0.85f}, {0.005f, 0.9f}, {0.001f, 0.95f}};
  trainer::OptimizerStep step;
  step.kind = trainer::OptimizerKind::adamw;
  step.weight_decay = 0.01f;
  step.clip_norm = 100.0;  // bites: the unscaled gradients have a norm near 115
  std::vector<std::vector<std::vector<float>>> grads(5);  // [step][param]
  for (int s = 0; s < 5; ++s)
    for (std::size_t n : sizes) {
      auto g = random_vector(n, rng);
      for (auto& x : g) x *= 1024.0f;
      grads[s].push_back(g);
    }
  grads[1][1][17] = std::numeric_limits<float>::infinity();

  struct Result {
    std::vector<std::vector<float>> params, moments;
    trainer::LossScaleState state;
  };
  auto run = [&](Backend& backend, bool device) {
    std::vector<std::vector<float>> host_params, host_grads, host_m, host_v;
    for (std::size_t n : sizes) {
      host_params.push_back(random_vector(n, rng));
      host_grads.emplace_back(n, 0.0f);
      host_m.emplace_back(n, 0.0f);
      host_v.emplace_back(n, 0.0f);
    }
    std::vector<void*> allocations;
    auto place = [&](std::vector<float>& v) {
      if (!device) return v.data();
      auto* p = static_cast<float*>(backend.allocate(v.size() * 4));
      allocations.push_back(p);
      backend.copy_to_device(p, v.data(), v.size() * 4);
      return p;
    };
    std::vector<trainer::ParamSlot> slots;
    for (std::size_t i = 0; i < sizes.size(); ++i)
      slots.push_back({place(host_params[i]), place(host_grads[i]), place(host_m[i]),
                       place(host_v[i]), static_cast<std::int64_t>(sizes[i]), true});
    trainer::VectorOps& ops = backend.vector_ops();
    ops.start_loss_scaling(rule, start);
    ops.set_schedule(0, schedule);
    for (int s = 0; s < 5; ++s) {
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        if (device)
          backend.copy_to_device(slots[i].grad, grads[s][i].data(), sizes[i] * 4);
        else
          std::copy(grads[s][i].begin(), grads[s][i].end(), host_grads[i].begin());
      }
      ops.optimizer_step(slots, step);
    }
    Result r;
    r.state = ops.loss_scale_state();
    ops.stop_loss_scaling();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (device) {
        backend.copy_to_host(host_params[i].data(), slots[i].param, sizes[i] * 4);
        backend.copy_to_host(host_m[i].data(), slots[i].state0, sizes[i] * 4);
      }
      r.params.push_back(host_params[i]);
      r.moments.push_back(host_m[i]);
    }
    for (void* p : allocations) backend.release(p);
    return r;
  };
  const std::mt19937 params_seed = rng;
  const Result want = run(trainer::cpu_backend(), false);
  rng = params_seed;  // the same initial weights
  const Result got = run(trainer::cuda_backend(0), true);
  CHECK(want.state.skipped == 1);
  CHECK(want.state.last_overflow_step == 2);
  CHECK(got.state.steps == want.state.steps);
  CHECK(got.state.skipped == want.state.skipped);
  CHECK(got.state.scale == want.state.scale);
  CHECK(got.state.clean_steps == want.state.clean_steps);
  CHECK(got.state.last_overflow_step == want.state.last_overflow_step);
  CHECK(got.state.last_overflow_scale == want.state.last_overflow_scale);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("param " << i);
    check_close(got.params[i], want.params[i]);
    check_close(got.moments[i], want.moments[i]);
  }
}

TEST_CASE("CUDA sum_squares equals the CPU one and detects inf and NaN") {
  std::mt19937 rng(9);
  Backend& gpu = trainer::cuda_backend(0);
  std::vector<std::vector<float>> host = {random_vector(3, rng), random_vector(70000, rng),
                                          random_vector(1025, rng)};
  std::vector<trainer::TensorRef> cpu_refs, gpu_refs;
  std::vector<void*> allocations;
  for (auto& h : host) {
    void* p = gpu.allocate(h.size() * 4);
    allocations.push_back(p);
    gpu.copy_to_device(p, h.data(), h.size() * 4);
    const trainer::Shape shape{static_cast<std::int64_t>(h.size())};
    cpu_refs.push_back({h.data(), shape, trainer::DType::f32});
    gpu_refs.push_back({p, shape, trainer::DType::f32});
  }
  bool cpu_finite = false, gpu_finite = false;
  const double want = trainer::cpu_backend().vector_ops().sum_squares(cpu_refs, cpu_finite);
  const double got = gpu.vector_ops().sum_squares(gpu_refs, gpu_finite);
  CHECK(cpu_finite);
  CHECK(gpu_finite);
  CHECK(got == Approx(want).epsilon(1e-6));

  for (float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    gpu.copy_to_device(static_cast<float*>(allocations[1]) + 12345, &bad, 4);
    gpu.vector_ops().sum_squares(gpu_refs, gpu_finite);
    CHECK_FALSE(gpu_finite);
  }
  for (void* p : allocations) gpu.release(p);

  // Squares past float32's range but finite values: finite on both, the same norm.
  std::vector<float> large(70000, 1e18f);
  void* p = gpu.allocate(large.size() * 4);
  gpu.copy_to_device(p, large.data(), large.size() * 4);
  const trainer::Shape shape{static_cast<std::int64_t>(large.size())};
  const double want_large = trainer::cpu_backend().vector_ops().sum_squares(
      {{large.data(), shape, trainer::DType::f32}}, cpu_finite);
  const double got_large =
      gpu.vector_ops().sum_squares({{p, shape, trainer::DType::f32}}, gpu_finite);
  gpu.release(p);
  CHECK(cpu_finite);
  CHECK(gpu_finite);
  CHECK(got_large == Approx(want_large).epsilon(1e-9));
}

TEST_CASE("CUDA accumulate, fill, average and swap, aligned and unaligned") {
  std::mt19937 rng(3);
  Backend& gpu = trainer::cuda_backend(0);
  for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
    const std::size_t n = 1003;
    auto a = random_vector(n, rng), b = random_vector(n, rng);
    auto* da = static_cast<float*>(gpu.allocate((n + 4) * 4));
    auto* db = static_cast<float*>(gpu.allocate((n + 4) * 4));
    gpu.copy_to_device(da + offset, a.data(), n * 4);
    gpu.copy_to_device(db, b.data(), n * 4);
    const trainer::Shape shape{static_cast<std::int64_t>(n)};
    gpu.vector_ops().accumulate({da + offset, shape, trainer::DType::f32},
                                {db, shape, trainer::DType::f32});
    std::vector<float> got(n);
    gpu.copy_to_host(got.data(), da + offset, n * 4);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == a[i] + b[i]);
    gpu.vector_ops().fill({da + offset, shape, trainer::DType::f32}, 2.5f);
    gpu.copy_to_host(got.data(), da + offset, n * 4);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == 2.5f);
    // The averaged weights' step (average) as on the CPU, and their exchange (swap).
    gpu.copy_to_device(da + offset, a.data(), n * 4);
    gpu.vector_ops().set_average_weight(0.1f);
    gpu.vector_ops().average({da + offset, shape, trainer::DType::f32},
                             {db, shape, trainer::DType::f32});
    std::vector<float> want = a;
    trainer::VectorOps& cpu_ops = trainer::cpu_backend().vector_ops();
    cpu_ops.set_average_weight(0.1f);
    cpu_ops.average({want.data(), shape, trainer::DType::f32},
                    {b.data(), shape, trainer::DType::f32});
    gpu.copy_to_host(got.data(), da + offset, n * 4);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == Approx(want[i]).epsilon(1e-6));
    gpu.vector_ops().swap({da + offset, shape, trainer::DType::f32},
                          {db, shape, trainer::DType::f32});
    std::vector<float> swapped(n);
    gpu.copy_to_host(got.data(), da + offset, n * 4);
    gpu.copy_to_host(swapped.data(), db, n * 4);
    CHECK(got == b);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(swapped[i] == Approx(want[i]).epsilon(1e-6));
    gpu.release(da);
    gpu.release(db);
  }
}

// The bits the CPU rounds to (ops/cpu/vector_ops.cpp), written out here.
std::uint16_t bf16_rounded(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

TEST_CASE("CUDA bf16 rounding and the optimizer's bf16 copies match the CPU rule bit for bit") {
  std::mt19937 rng(17);
  Backend& gpu = trainer::cuda_backend(0);
  std::vector<float> values = random_vector(40003, rng);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.00390625f /* a tie */,
                            1.01171875f /* a tie */,
                            3.4e38f /* rounds to inf */,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            1e-40f /* subnormal */};
  std::copy(std::begin(specials), std::end(specials), values.begin());
  const std::size_t n = values.size();
  const trainer::Shape shape{static_cast<std::int64_t>(n)};
  auto* src = static_cast<float*>(gpu.allocate(n * 4));
  auto* dst = static_cast<std::uint16_t*>(gpu.allocate(n * 2));
  gpu.copy_to_device(src, values.data(), n * 4);
  gpu.vector_ops().round_to_bf16({src, shape, trainer::DType::f32},
                                 {dst, shape, trainer::DType::bf16});
  std::vector<std::uint16_t> got(n);
  gpu.copy_to_host(got.data(), dst, n * 2);
  for (std::size_t i = 0; i < n; ++i) {
    INFO("element " << i << " = " << values[i]);
    REQUIRE(got[i] == bf16_rounded(values[i]));
  }

  // One SGD step with the copy: the copy is the rounding of the updated value.
  std::vector<float> grad = random_vector(n, rng), param = random_vector(n, rng);
  auto* grad_d = static_cast<float*>(gpu.allocate(n * 4));
  gpu.copy_to_device(src, param.data(), n * 4);
  gpu.copy_to_device(grad_d, grad.data(), n * 4);
  trainer::ParamSlot slot;
  slot.param = src;
  slot.grad = grad_d;
  slot.size = static_cast<std::int64_t>(n);
  slot.bf16_copy = dst;
  trainer::OptimizerStep step;
  step.lr = 0.1f;
  gpu.vector_ops().optimizer_step({slot}, step);
  gpu.copy_to_host(param.data(), src, n * 4);
  gpu.copy_to_host(got.data(), dst, n * 2);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == bf16_rounded(param[i]));
  gpu.release(src);
  gpu.release(dst);
  gpu.release(grad_d);
}
#endif
