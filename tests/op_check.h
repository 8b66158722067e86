// Reusable checks of op kernels on any backend: attributes with defaults,
// running one op instance (forward/backward) from host data, a gradient check
// against central finite differences, a comparison of a backend against a
// reference backend (the CPU), and straightforward reference loops for the
// forward of conv2d, pooling, linear and batchnorm.
//
// A backend's test only needs a `Backend&`: upload, run and download go
// through Backend::allocate/copy_to_device/copy_to_host.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/half.h"
#include "ops/kernel.h"
#include "ops/op.h"

namespace trainer::testing {

// ---------------------------------------------------------------- attributes

// The attributes of `def` with every default filled from its FieldSpecs, then
// `overrides` applied. Only the YAML forms the op defaults use are parsed.
inline Attrs make_attrs(const OpDef& def, const std::map<std::string, FieldValue>& overrides) {
  Attrs attrs;
  for (const auto& f : def.attrs) {
    if (f.default_yaml.empty()) continue;
    const std::string& y = f.default_yaml;
    switch (f.type) {
      case FieldType::boolean:
        attrs.set(f.name, y == "true");
        break;
      case FieldType::integer:
        attrs.set(f.name, std::int64_t{std::stoll(y)});
        break;
      case FieldType::number:
        attrs.set(f.name, std::stod(y));
        break;
      case FieldType::int_list: {
        if (y.front() != '[') {
          attrs.set(f.name, std::int64_t{std::stoll(y)});
          break;
        }
        std::vector<std::int64_t> list;
        std::size_t pos = 1;
        while (pos < y.size() && y[pos] != ']') {
          std::size_t used = 0;
          list.push_back(std::stoll(y.substr(pos), &used));
          pos += used;
          while (pos < y.size() && (y[pos] == ',' || y[pos] == ' ')) ++pos;
        }
        attrs.set(f.name, list);
        break;
      }
      default:
        attrs.set(f.name, y);
        break;
    }
  }
  for (const auto& [name, value] : overrides) attrs.set(name, value);
  return attrs;
}

// ---------------------------------------------------------------- host data

struct HostTensor {
  Shape shape;
  DType dtype = DType::f32;
  std::vector<float> f;         // dtype f32
  std::vector<std::int64_t> i;  // dtype i64

  static HostTensor zeros(const Shape& s, DType t = DType::f32) {
    HostTensor h;
    h.shape = s;
    h.dtype = t;
    if (t == DType::i64)
      h.i.assign(static_cast<std::size_t>(numel(s)), 0);
    else
      h.f.assign(static_cast<std::size_t>(numel(s)), 0.0f);
    return h;
  }
  std::size_t bytes() const { return dtype == DType::i64 ? i.size() * 8 : f.size() * 4; }
  const void* data() const {
    return dtype == DType::i64 ? static_cast<const void*>(i.data()) : f.data();
  }
  void* data() { return dtype == DType::i64 ? static_cast<void*>(i.data()) : f.data(); }
};

// float -> bf16 -> float, round to nearest even (what oneDNN's conversion does).
inline float bf16_round(float v) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xffff0000u);
}

inline float half_round(float v) {
  return cpu::round_to_half(v);
}

inline HostTensor rounded(const HostTensor& t, float (*round)(float)) {
  HostTensor r = t;
  for (auto& v : r.f) v = round(v);
  return r;
}

// Rounds a float32 tensor's values to the nearest of a 16-bit type (bf16 or
// f16); other tensors are left alone.
inline void round_to(HostTensor& t, DType type) {
  if (t.dtype != DType::f32) return;
  t = rounded(t, type == DType::bf16 ? bf16_round : half_round);
}

inline void fill_uniform(std::vector<float>& v, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  for (auto& x : v) x = d(rng);
}

// ---------------------------------------------------------------- one op instance

// What to run: an op, its attribute overrides and its input shapes/dtypes.
struct OpCase {
  std::string op;
  std::map<std::string, FieldValue> attrs;
  std::vector<Shape> inputs;
  std::vector<DType> input_dtypes;  // empty: all f32
  DType compute = DType::f32;       // matmul-like ops: the mixed-precision compute type
  // The stored format of the inputs and the output (element-wise ops keep
  // their input's); the host tensors are in that storage order.
  TensorFormat format;
  bool short_batches = false;  // KernelContext::short_batches
  bool deterministic = false;  // KernelContext::deterministic
};

// Device memory of one tensor, released on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& b, std::size_t bytes) : backend_(&b), bytes_(bytes) {
    ptr_ = bytes ? b.allocate(bytes) : nullptr;
  }
  ~DeviceBuffer() {
    if (ptr_) backend_->release(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* src) {
    if (bytes_) backend_->copy_to_device(ptr_, src, bytes_);
  }
  void download(void* dst) const {
    if (bytes_) backend_->copy_to_host(dst, ptr_, bytes_);
  }
  // Fills with NaN (float32 view) so a value that should have been written or
  // should not have been read shows up in the results.
  void poison() {
    std::vector<float> nan(bytes_ / 4 + 1, std::numeric_limits<float>::quiet_NaN());
    upload(nan.data());
  }

 private:
  Backend* backend_;
  std::size_t bytes_;
  void* ptr_ = nullptr;
};

// One op instance compiled on one backend, with host copies of its inputs and
// parameters (random by default; tests may overwrite them before running).
class OpRun {
 public:
  // `collective`: the ranks a kernel that reduces inside a step (SyncBN) sums over.
  OpRun(Backend& backend, const OpCase& c, std::uint64_t data_seed = 1, bool training = true,
        Collective* collective = nullptr)
      : backend_(backend), op_case_(c) {
    def_ = op_registry().find(c.op);
    REQUIRE(def_ != nullptr);
    attrs_ = make_attrs(*def_, c.attrs);
    sig_ = def_->signature(c.inputs, attrs_);
    std::mt19937_64 rng(data_seed);
    for (std::size_t k = 0; k < c.inputs.size(); ++k) {
      const DType t = k < c.input_dtypes.size() ? c.input_dtypes[k] : DType::f32;
      inputs.push_back(HostTensor::zeros(c.inputs[k], t));
      fill_uniform(inputs.back().f, rng, -1.0f, 1.0f);
    }
    for (const auto& p : sig_.params) {
      params.push_back(HostTensor::zeros(p.shape));
      const bool variance = p.name.find("var") != std::string::npos;
      fill_uniform(params.back().f, rng, variance ? 0.5f : -1.0f, 1.5f - (variance ? 0.0f : 0.5f));
    }
    ctx_.op = def_;
    ctx_.attrs = &attrs_;
    ctx_.inputs = c.inputs;
    for (const auto& p : sig_.params) ctx_.param_decls.push_back({nullptr, p.shape, DType::f32});
    ctx_.output = sig_.output;
    ctx_.training = training;
    ctx_.compute = c.compute;
    ctx_.collective = collective;
    ctx_.short_batches = c.short_batches;
    ctx_.deterministic = c.deterministic;
    if (!(c.format == TensorFormat{})) {
      ctx_.input_formats.assign(c.inputs.size(), c.format);
      ctx_.output_format = c.format;
    }
    kernel_ = backend.make_kernel(ctx_);
    for (const auto& h : inputs)
      input_bufs_.push_back(std::make_unique<DeviceBuffer>(backend, h.bytes()));
    for (const auto& h : params)
      param_bufs_.push_back(std::make_unique<DeviceBuffer>(backend, h.bytes()));
    for (const auto& h : inputs)
      grad_input_bufs_.push_back(std::make_unique<DeviceBuffer>(backend, h.bytes()));
    for (const auto& h : params)
      grad_param_bufs_.push_back(std::make_unique<DeviceBuffer>(backend, h.bytes()));
    output_buf_ =
        std::make_unique<DeviceBuffer>(backend, static_cast<std::size_t>(numel(sig_.output)) * 4);
    grad_output_buf_ = std::make_unique<DeviceBuffer>(backend, output_buf_->bytes());
    for (std::size_t b : kernel_->saved_bytes())
      saved_bufs_.push_back(std::make_unique<DeviceBuffer>(backend, b));
    workspace_ = std::make_unique<DeviceBuffer>(backend, kernel_->workspace_bytes());
    step_values_ = std::make_unique<DeviceBuffer>(backend, sizeof(StepValues));
  }

  const OpDef& def() const { return *def_; }
  const OpSignature& signature() const { return sig_; }
  Kernel& kernel() { return *kernel_; }

  // Uploads inputs and params, runs the forward and returns the output. Params
  // are downloaded back afterwards (running statistics change in training).
  HostTensor forward(bool training = true, std::uint64_t seed = 7, std::int64_t valid_rows = -1) {
    for (std::size_t k = 0; k < inputs.size(); ++k) input_bufs_[k]->upload(inputs[k].data());
    for (std::size_t k = 0; k < params.size(); ++k) param_bufs_[k]->upload(params[k].data());
    output_buf_->poison();
    KernelArgs a = args(training, seed, valid_rows);
    kernel_->forward(a);
    backend_.synchronize();
    HostTensor out = HostTensor::zeros(sig_.output);
    output_buf_->download(out.data());
    for (std::size_t k = 0; k < params.size(); ++k) param_bufs_[k]->download(params[k].data());
    return out;
  }

  struct Grads {
    std::vector<HostTensor> inputs;  // empty tensors where not wanted
    std::vector<HostTensor> params;
  };

  // Runs the backward right after a forward with the same settings. Forward
  // values the op does not declare in backward_reads are poisoned first, and
  // every gradient buffer is poisoned so a gradient not overwritten shows.
  // `want_inputs[k] == false` passes a null grad for input k.
  Grads backward(const HostTensor& grad_output, bool training = true, std::uint64_t seed = 7,
                 std::int64_t valid_rows = -1, std::vector<bool> want_inputs = {}) {
    if (!def_->reads(attrs_).inputs)
      for (std::size_t k = 0; k < inputs.size(); ++k)
        if (inputs[k].dtype == DType::f32) input_bufs_[k]->poison();
    if (!def_->reads(attrs_).output) output_buf_->poison();
    grad_output_buf_->upload(grad_output.data());
    for (auto& b : grad_input_bufs_) b->poison();
    for (auto& b : grad_param_bufs_) b->poison();
    KernelArgs a = args(training, seed, valid_rows);
    a.grad_output = {grad_output_buf_->get(), sig_.output, DType::f32};
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const bool nondiff = std::count(def_->non_differentiable_inputs.begin(),
                                      def_->non_differentiable_inputs.end(), static_cast<int>(k));
      const bool wanted = !nondiff && (k >= want_inputs.size() || want_inputs[k]);
      a.grad_inputs.push_back(
          {wanted ? grad_input_bufs_[k]->get() : nullptr, inputs[k].shape, DType::f32});
    }
    for (std::size_t k = 0; k < params.size(); ++k)
      a.grad_params.push_back({sig_.params[k].trainable ? grad_param_bufs_[k]->get() : nullptr,
                               params[k].shape, DType::f32});
    kernel_->backward(a);
    backend_.synchronize();
    Grads g;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      if (!a.grad_inputs[k]) {
        g.inputs.emplace_back();
        continue;
      }
      g.inputs.push_back(HostTensor::zeros(inputs[k].shape));
      grad_input_bufs_[k]->download(g.inputs.back().data());
    }
    for (std::size_t k = 0; k < params.size(); ++k) {
      if (!a.grad_params[k]) {
        g.params.emplace_back();
        continue;
      }
      g.params.push_back(HostTensor::zeros(params[k].shape));
      grad_param_bufs_[k]->download(g.params.back().data());
    }
    return g;
  }

  std::vector<HostTensor> inputs;
  std::vector<HostTensor> params;
  // Where the rows sit in the step's global batch (StepValues).
  std::int64_t first_position = 0;
  std::int64_t position_stride = 1;

 private:
  KernelArgs args(bool training, std::uint64_t seed, std::int64_t valid_rows) {
    KernelArgs a;
    for (std::size_t k = 0; k < inputs.size(); ++k)
      a.inputs.push_back({input_bufs_[k]->get(), inputs[k].shape, inputs[k].dtype});
    for (std::size_t k = 0; k < params.size(); ++k)
      a.params.push_back({param_bufs_[k]->get(), params[k].shape, DType::f32});
    a.output = {output_buf_->get(), sig_.output, DType::f32};
    for (auto& s : saved_bufs_) a.saved.push_back(s->get());
    a.workspace = workspace_->get();
    a.training = training;
    const StepValues values{seed, valid_rows, first_position, position_stride};
    step_values_->upload(&values);
    a.step = static_cast<const StepValues*>(step_values_->get());
    return a;
  }

  Backend& backend_;
  OpCase op_case_;
  const OpDef* def_ = nullptr;
  Attrs attrs_;
  OpSignature sig_;
  KernelContext ctx_;
  std::unique_ptr<Kernel> kernel_;
  std::vector<std::unique_ptr<DeviceBuffer>> input_bufs_, param_bufs_, grad_input_bufs_,
      grad_param_bufs_, saved_bufs_;
  std::unique_ptr<DeviceBuffer> output_buf_, grad_output_buf_, workspace_, step_values_;
};

// ---------------------------------------------------------------- comparisons

// |a - b| <= atol + rtol * max(|a|, |b|) element-wise; reports the first few misses.
inline void check_close(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                        double atol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  int misses = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double g = got[k], w = want[k];
    const bool ok =
        std::isfinite(g) && std::abs(g - w) <= atol + rtol * std::max(std::abs(g), std::abs(w));
    if (!ok && misses++ < 5) {
      INFO(what << " [" << k << "]: got " << g << ", expected " << w);
      CHECK(ok);
    }
  }
  INFO(what << ": " << misses << " of " << got.size() << " values out of tolerance");
  CHECK(misses == 0);
}

inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                        double atol, const std::string& what) {
  check_close(got, std::vector<double>(want.begin(), want.end()), rtol, atol, what);
}

// ---------------------------------------------------------------- gradient check

struct GradCheckOptions {
  // Central differences in float32 with a step of 1e-2 on inputs of magnitude
  // ~1: the truncation error is eps^2/6 * f''' ~ 2e-5 relative, and the
  // rounding error of the float32 forward (relative ~1e-7 per output, summed
  // with random signs over at most a few thousand outputs) divided by 2 eps
  // stays near 1e-4 of the gradient scale. A relative tolerance of 1e-2 plus
  // an absolute one of 2e-3 times the largest gradient of the tensor therefore
  // passes correct kernels with a wide margin, while any wrong index, missing
  // term or factor (errors of 10% and more) fails. Inputs of ops with kinks
  // (relu, max) are kept at least 3 eps away from them by the tests.
  double eps = 1e-2;
  double rtol = 1e-2;
  double atol_scale = 2e-3;
  int samples_per_tensor = 24;  // finite differences on this many random elements
  bool training = true;
  std::uint64_t seed = 7;
  std::int64_t valid_rows = -1;
};

// Gradient of L = sum(output * R) for a fixed random R, analytic (backward) vs
// central finite differences on sampled elements of every float input and
// every trainable parameter.
inline void check_gradients(OpRun& run, const GradCheckOptions& o = {}) {
  std::mt19937_64 rng(12345);
  HostTensor r = HostTensor::zeros(run.signature().output);
  fill_uniform(r.f, rng, -1.0f, 1.0f);
  if (run.def().is_loss) r.f[0] = 1.7f;  // the scale a loss receives
  auto loss = [&] {
    const HostTensor out = run.forward(o.training, o.seed, o.valid_rows);
    double l = 0;
    for (std::size_t k = 0; k < out.f.size(); ++k) l += static_cast<double>(out.f[k]) * r.f[k];
    return l;
  };
  // Parameters that are state (running statistics) must not drift between the
  // evaluations: keep a copy and restore before every forward.
  const std::vector<HostTensor> params0 = run.params;
  loss();
  const auto grads = run.backward(r, o.training, o.seed, o.valid_rows);
  auto fd_check = [&](std::vector<float>& values, const std::vector<float>& analytic,
                      const std::string& what) {
    REQUIRE(analytic.size() == values.size());
    double scale = 0;
    for (float g : analytic) scale = std::max(scale, static_cast<double>(std::abs(g)));
    std::vector<std::size_t> picks(values.size());
    for (std::size_t k = 0; k < picks.size(); ++k) picks[k] = k;
    std::shuffle(picks.begin(), picks.end(), rng);
    picks.resize(
        std::min<std::size_t>(picks.size(), static_cast<std::size_t>(o.samples_per_tensor)));
    std::vector<float> got;
    std::vector<double> want;
    for (std::size_t k : picks) {
      const float keep = values[k];
      values[k] = keep + static_cast<float>(o.eps);
      run.params = params0;
      const double plus = loss();
      values[k] = keep - static_cast<float>(o.eps);
      run.params = params0;
      const double minus = loss();
      values[k] = keep;
      // Divide by the step actually taken in float32.
      const double step = static_cast<double>(keep + static_cast<float>(o.eps)) -
                          static_cast<double>(keep - static_cast<float>(o.eps));
      want.push_back((plus - minus) / step);
      got.push_back(analytic[k]);
    }
    check_close(got, want, o.rtol, o.atol_scale * std::max(scale, 1e-3), what);
  };
  for (std::size_t k = 0; k < run.inputs.size(); ++k) {
    if (grads.inputs[k].f.empty()) continue;
    fd_check(run.inputs[k].f, grads.inputs[k].f,
             run.def().name + " d/d input " + std::to_string(k));
  }
  for (std::size_t k = 0; k < run.params.size(); ++k) {
    if (grads.params[k].f.empty()) continue;
    // A change of params must be kept through the forward: edit the copy restored before it.
    auto& saved = const_cast<std::vector<HostTensor>&>(params0);
    fd_check(saved[k].f, grads.params[k].f,
             run.def().name + " d/d " + run.signature().params[k].name);
  }
  run.params = params0;
}

// Runs the same case on `backend` and on `reference` (normally the CPU) with
// identical data and compares outputs, parameter updates and all gradients.
// Forward (then, in training, backward from one random incoming gradient) on
// both runs, which hold the same data: outputs, parameters after the forward
// and gradients within rtol/atol. `incoming`: a 16-bit type the incoming
// gradient is rounded to (see round_reference_data), or f32.
inline void compare_runs(OpRun& run, OpRun& ref, const std::string& op, double rtol, double atol,
                         bool training, std::int64_t valid_rows, DType incoming = DType::f32) {
  const auto out_ref = ref.forward(training, 11, valid_rows);
  const auto out = run.forward(training, 11, valid_rows);
  check_close(out.f, out_ref.f, rtol, atol, op + " output");
  for (std::size_t k = 0; k < ref.params.size(); ++k)
    check_close(run.params[k].f, ref.params[k].f, rtol, atol, op + " param after forward");
  if (!training) return;
  HostTensor r = HostTensor::zeros(ref.signature().output);
  std::mt19937_64 rng(99);
  fill_uniform(r.f, rng, -1.0f, 1.0f);
  if (incoming != DType::f32) round_to(r, incoming);
  const auto g_ref = ref.backward(r, training, 11, valid_rows);
  const auto g = run.backward(r, training, 11, valid_rows);
  for (std::size_t k = 0; k < g_ref.inputs.size(); ++k)
    check_close(g.inputs[k].f, g_ref.inputs[k].f, rtol, atol, op + " grad input");
  for (std::size_t k = 0; k < g_ref.params.size(); ++k)
    check_close(g.params[k].f, g_ref.params[k].f, rtol, atol, op + " grad param");
}

// A reference backend that cannot compute a case's 16-bit type (a CPU below
// AVX-512 has no bf16) runs the case in float32 instead, on inputs, parameters
// and incoming gradient rounded to that type: the products are then exact on
// both sides, and the results differ by the order of the sums and by what the
// 16-bit side rounds on the way out, as they do against a 16-bit reference.
inline void round_reference_data(OpRun& ref, DType type) {
  for (auto& t : ref.inputs) round_to(t, type);
  for (auto& t : ref.params) round_to(t, type);
}

// Runs case `c` on `backend` and on `reference` with the same random data
// (`prepare` may change the reference's before both copy it) and compares.
inline void compare_backends(Backend& backend, Backend& reference, const OpCase& c,
                             double rtol = 1e-4, double atol = 1e-5, bool training = true,
                             std::int64_t valid_rows = -1,
                             const std::function<void(OpRun&)>& prepare = {}) {
  const bool widens = c.compute != DType::f32 && !reference.supports_compute(c.compute);
  OpCase reference_case = c;
  if (widens) {
    WARN("the reference backend does not compute " << dtype_name(c.compute) << ": " << c.op
                                                   << " is compared with its float32 run on "
                                                   << dtype_name(c.compute) << "-rounded data");
    reference_case.compute = DType::f32;
  }
  OpRun ref(reference, reference_case, 3, training);
  OpRun run(backend, c, 3, training);
  if (prepare) prepare(ref);
  if (widens) round_reference_data(ref, c.compute);
  run.inputs = ref.inputs;
  run.params = ref.params;
  run.first_position = ref.first_position;
  run.position_stride = ref.position_stride;
  compare_runs(run, ref, c.op, rtol, atol, training, valid_rows, widens ? c.compute : DType::f32);
}

// ---------------------------------------------------------------- reference loops

// Direct convolution in double: x [N, C, H, W], w [O, C/g, kh, kw], b [O] or empty.
inline std::vector<double> conv2d_reference(const HostTensor& x, const HostTensor& w,
                                            const std::vector<float>& b, const Shape& out,
                                            std::int64_t sh, std::int64_t sw, std::int64_t ph,
                                            std::int64_t pw, std::int64_t dh, std::int64_t dw,
                                            std::int64_t groups) {
  const std::int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const std::int64_t o = out[1], ho = out[2], wo = out[3], kh = w.shape[2], kw = w.shape[3];
  const std::int64_t cg = c / groups, og = o / groups;
  std::vector<double> y(static_cast<std::size_t>(numel(out)));
  for (std::int64_t in = 0; in < n; ++in)
    for (std::int64_t oc = 0; oc < o; ++oc)
      for (std::int64_t oy = 0; oy < ho; ++oy)
        for (std::int64_t ox = 0; ox < wo; ++ox) {
          double acc = b.empty() ? 0.0 : b[static_cast<std::size_t>(oc)];
          const std::int64_t g = oc / og;
          for (std::int64_t ic = 0; ic < cg; ++ic)
            for (std::int64_t ky = 0; ky < kh; ++ky)
              for (std::int64_t kx = 0; kx < kw; ++kx) {
                const std::int64_t iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += static_cast<double>(x.f[static_cast<std::size_t>(
                           ((in * c + g * cg + ic) * h + iy) * wd + ix)]) *
                       w.f[static_cast<std::size_t>(((oc * cg + ic) * kh + ky) * kw + kx)];
              }
          y[static_cast<std::size_t>(((in * o + oc) * ho + oy) * wo + ox)] = acc;
        }
  return y;
}

// Max or average (padding excluded) pooling in double.
inline std::vector<double> pool2d_reference(const HostTensor& x, const Shape& out, bool max,
                                            std::int64_t kh, std::int64_t kw, std::int64_t sh,
                                            std::int64_t sw, std::int64_t ph, std::int64_t pw,
                                            bool count_pad = false) {
  const std::int64_t nc = x.shape[0] * x.shape[1], h = x.shape[2], wd = x.shape[3];
  const std::int64_t ho = out[2], wo = out[3];
  std::vector<double> y(static_cast<std::size_t>(numel(out)));
  for (std::int64_t p = 0; p < nc; ++p)
    for (std::int64_t oy = 0; oy < ho; ++oy)
      for (std::int64_t ox = 0; ox < wo; ++ox) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
        int count = 0;
        for (std::int64_t ky = 0; ky < kh; ++ky)
          for (std::int64_t kx = 0; kx < kw; ++kx) {
            const std::int64_t iy = oy * sh - ph + ky, ix = ox * sw - pw + kx;
            if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
            const double v = x.f[static_cast<std::size_t>((p * h + iy) * wd + ix)];
            acc = max ? std::max(acc, v) : acc + v;
            ++count;
          }
        if (count_pad) count = static_cast<int>(kh * kw);
        y[static_cast<std::size_t>((p * ho + oy) * wo + ox)] = max ? acc : acc / count;
      }
  return y;
}

// y = x W^T + b in double.
inline std::vector<double> linear_reference(const HostTensor& x, const HostTensor& w,
                                            const std::vector<float>& b) {
  const std::int64_t n = x.shape[0], in = x.shape[1], out = w.shape[0];
  std::vector<double> y(static_cast<std::size_t>(n * out));
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[static_cast<std::size_t>(o)];
      for (std::int64_t k = 0; k < in; ++k)
        acc += static_cast<double>(x.f[static_cast<std::size_t>(r * in + k)]) *
               w.f[static_cast<std::size_t>(o * in + k)];
      y[static_cast<std::size_t>(r * out + o)] = acc;
    }
  return y;
}

// Batch normalization in double over [N, C, (H*W)]. Training: batch statistics,
// and `running_mean`/`running_var` are updated in place (unbiased variance);
// eval: the running statistics are used.
inline std::vector<double> batchnorm_reference(const HostTensor& x, const std::vector<float>& gamma,
                                               const std::vector<float>& beta,
                                               std::vector<double>& running_mean,
                                               std::vector<double>& running_var, bool training,
                                               double momentum, double eps) {
  const std::int64_t n = x.shape[0], c = x.shape[1];
  const std::int64_t hw = x.shape.size() == 4 ? x.shape[2] * x.shape[3] : 1;
  const double m = static_cast<double>(n * hw);
  std::vector<double> y(x.f.size());
  for (std::int64_t ch = 0; ch < c; ++ch) {
    auto at = [&](std::int64_t in, std::int64_t k) {
      return static_cast<std::size_t>((in * c + ch) * hw + k);
    };
    double mean = running_mean[static_cast<std::size_t>(ch)];
    double var = running_var[static_cast<std::size_t>(ch)];
    if (training) {
      mean = 0;
      for (std::int64_t in = 0; in < n; ++in)
        for (std::int64_t k = 0; k < hw; ++k) mean += x.f[at(in, k)];
      mean /= m;
      var = 0;
      for (std::int64_t in = 0; in < n; ++in)
        for (std::int64_t k = 0; k < hw; ++k)
          var += (x.f[at(in, k)] - mean) * (x.f[at(in, k)] - mean);
      var /= m;
      auto& rm = running_mean[static_cast<std::size_t>(ch)];
      auto& rv = running_var[static_cast<std::size_t>(ch)];
      rm = (1 - momentum) * rm + momentum * mean;
      rv = (1 - momentum) * rv + momentum * var * m / std::max(m - 1, 1.0);
    }
    const double inv = 1.0 / std::sqrt(var + eps);
    for (std::int64_t in = 0; in < n; ++in)
      for (std::int64_t k = 0; k < hw; ++k)
        y[at(in, k)] = (x.f[at(in, k)] - mean) * inv * gamma[static_cast<std::size_t>(ch)] +
                       beta[static_cast<std::size_t>(ch)];
  }
  return y;
}

// One conv2d configuration, for the tests that sweep convolution shapes.
struct ConvCase {
  Shape x;
  std::int64_t out, groups;
  std::vector<std::int64_t> kernel, stride, padding, dilation;
  bool bias;
};

inline OpCase conv_case(const ConvCase& c) {
  return {"conv2d",
          {{"out_channels", c.out},
           {"kernel", c.kernel},
           {"stride", c.stride},
           {"padding", c.padding},
           {"dilation", c.dilation},
           {"groups", c.groups},
           {"bias", c.bias}},
          {c.x}};
}

}  // namespace trainer::testing
