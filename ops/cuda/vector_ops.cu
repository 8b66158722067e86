// CUDA vector work over all parameters: the optimizer step is ONE launch over a
// device table of parameter chunks (rewriting the bf16 weight copies in the
// same pass); the gradient norm reduces per block then in one block (a fixed
// order: deterministic); accumulate and fill are element-wise maps. With
// clipping or fp16 loss scaling the update queues the norm first, then one
// thread decides the update (decide_update: skip, unscale, clip, the loss
// scale's next value) into device memory for the update kernel: nothing is
// read back.
#include "ops/cuda/vector_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/low_precision.h"

namespace trainer::cuda {
namespace {

constexpr std::int64_t kChunk = 16384;  // elements per block of the multi-tensor launches

struct DeviceSlot {
  float* param;
  float* grad;
  float* state0;
  float* state1;
  unsigned short* bf16_copy;  // null: none; else rewritten from the updated values
  long long size;
  float decay_mask;  // 1: weight decay applies; 0: not
  float lr_scale;    // its learning rate is the step's times this
  int vectorized;    // the four float pointers 16-byte aligned, bf16_copy 8-byte aligned
  int unused;        // no padding: tables compare bytewise
};
static_assert(sizeof(DeviceSlot) == 5 * sizeof(void*) + sizeof(long long) + 4 * 4,
              "DeviceSlot has padding: its tables would not compare bytewise");

struct Chunk {
  long long slot;  // long long: no padding, so tables compare bytewise
  long long begin;
};

// The values the update kernel applies, decided.
struct Hyper {
  int kind;  // OptimizerKind
  float lr, momentum, weight_decay, beta1, beta2, eps, grad_scale;
  int nesterov;
  float bias_correction1, bias_correction2_sqrt;
  int apply;  // 0: the step is skipped (its gradients overflowed under loss scaling)
};

__host__ __device__ Hyper hyper_of(const OptimizerStep& set, const UpdateDecision& d) {
  const OptimizerStep o = applied(set, d);
  Hyper h{};
  h.kind = static_cast<int>(o.kind);
  h.lr = o.lr, h.momentum = o.momentum, h.weight_decay = o.weight_decay;
  h.beta1 = o.beta1, h.beta2 = o.beta2, h.eps = o.eps;
  h.grad_scale = o.grad_scale;
  h.nesterov = o.nesterov ? 1 : 0;
  const double t = static_cast<double>(o.step);
  h.bias_correction1 = static_cast<float>(1.0 - pow(static_cast<double>(o.beta1), t));
  h.bias_correction2_sqrt = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(o.beta2), t)));
  h.apply = d.apply ? 1 : 0;
  return h;
}

// The step as set on the host, and the Hyper the update applies: computed from
// it on the host, or by decide_kernel when the update measures the gradients.
struct StepParams {
  OptimizerStep step;
  Hyper hyper;
};

// The gradients' check before an update that clips or scales.
struct GradientCheck {
  double sum_squares;
  int nonfinite;         // this update's gradients hold inf or NaN
  int nonfinite_sticky;  // some applied update's gradients or weights were (unscaled runs), until
                         // read
};

// One thread: the update's decision from the check, applied to the loss
// scale's state when scaling (`scaling` non-null).
__global__ void decide_kernel(StepParams* params, GradientCheck* check, LossScaleRule rule,
                              LossScaleState* scaling, const ScheduleWindow* schedule) {
  const OptimizerStep o = params->step;
  const bool finite = check->nonfinite == 0 && isfinite(check->sum_squares);
  if (!scaling && !finite) check->nonfinite_sticky = 1;
  const UpdateDecision d =
      decide_update(o, sqrt(check->sum_squares), finite, rule, scaling, schedule);
  params->hyper = hyper_of(o, d);
}

// One element's update. `s0`, `s1`: its optimizer state, in registers (SGD:
// the momentum buffer, when `has_momentum`; Adam: the two moments). Values,
// not pointers: a pointer to a float4's member would put it in local memory.
__device__ __forceinline__ void update_one(const Hyper& h, float decay_mask, float& p, float g,
                                           bool has_momentum, float& s0, float& s1) {
  const float wd = h.weight_decay * decay_mask;
  if (h.kind == static_cast<int>(OptimizerKind::sgd)) {
    float d = g * h.grad_scale + wd * p;
    if (has_momentum) {
      const float buf = h.momentum * s0 + d;
      s0 = buf;
      d = h.nesterov ? d + h.momentum * buf : buf;
    }
    p -= h.lr * d;
    return;
  }
  const bool decoupled = h.kind == static_cast<int>(OptimizerKind::adamw);
  const float gi = g * h.grad_scale + (decoupled ? 0.0f : wd) * p;
  const float m = h.beta1 * s0 + (1.0f - h.beta1) * gi;
  const float v = h.beta2 * s1 + (1.0f - h.beta2) * gi * gi;
  s0 = m;
  s1 = v;
  const float decay = decoupled ? 1.0f - h.lr * wd : 1.0f;
  const float step_size = h.lr / h.bias_correction1;
  p = p * decay - step_size * m / (sqrtf(v) / h.bias_correction2_sqrt + h.eps);
}

// Element i of a slot, one at a time (the slot's unaligned ends); whether
// the weight (and Adam's second moment) written is finite.
__device__ __forceinline__ bool update_element(const Hyper& h, const DeviceSlot& s, long long i) {
  float p = s.param[i];
  float s0 = s.state0 ? s.state0[i] : 0.0f;
  float s1 = s.state1 ? s.state1[i] : 0.0f;
  update_one(h, s.decay_mask, p, s.grad[i], s.state0 != nullptr, s0, s1);
  s.param[i] = p;
  if (s.state0) s.state0[i] = s0;
  if (s.state1) s.state1[i] = s1;
  if (s.bf16_copy) s.bf16_copy[i] = bf16_bits(p);
  return isfinite(p) && isfinite(s1);
}

// The hyperparameters are read from device memory (set_optimizer_step, or
// decide_kernel), so a launch recorded in a CUDA graph uses the values of the
// step it replays. A weight or second moment written that is inf or NaN
// (inf or NaN gradients, or a step that overflowed) sets *nonfinite, under
// loss scaling too; the host reads it only in unscaled runs, as on the CPU.
__global__ void optimizer_kernel(const DeviceSlot* slots, const Chunk* chunks, const Hyper* hyper,
                                 int* nonfinite) {
  Hyper h = *hyper;
  if (!h.apply) return;
  const Chunk c = chunks[blockIdx.x];
  const DeviceSlot s = slots[c.slot];
  h.lr *= s.lr_scale;
  const long long end = min(c.begin + kChunk, s.size);
  bool bad = false;
  if (s.vectorized) {
    const long long vec_end = c.begin + (end - c.begin) / 4 * 4;
    const bool has0 = s.state0 != nullptr;
    for (long long i = c.begin + 4 * threadIdx.x; i < vec_end; i += 4 * blockDim.x) {
      float4 p = *reinterpret_cast<float4*>(s.param + i);
      const float4 g = *reinterpret_cast<const float4*>(s.grad + i);
      float4 a = has0 ? *reinterpret_cast<float4*>(s.state0 + i) : float4{};
      float4 b = s.state1 ? *reinterpret_cast<float4*>(s.state1 + i) : float4{};
      update_one(h, s.decay_mask, p.x, g.x, has0, a.x, b.x);
      update_one(h, s.decay_mask, p.y, g.y, has0, a.y, b.y);
      update_one(h, s.decay_mask, p.z, g.z, has0, a.z, b.z);
      update_one(h, s.decay_mask, p.w, g.w, has0, a.w, b.w);
      // An overflowing second moment leaves the weight finite (m / inf = 0).
      bad |= !isfinite(p.x) || !isfinite(p.y) || !isfinite(p.z) || !isfinite(p.w) ||
             !isfinite(b.x) || !isfinite(b.y) || !isfinite(b.z) || !isfinite(b.w);
      *reinterpret_cast<float4*>(s.param + i) = p;
      if (has0) *reinterpret_cast<float4*>(s.state0 + i) = a;
      if (s.state1) *reinterpret_cast<float4*>(s.state1 + i) = b;
      if (s.bf16_copy)  // four bf16 in one 8-byte store (vectorized: 8-byte aligned)
        *reinterpret_cast<uint2*>(s.bf16_copy + i) =
            make_uint2(bf16_bits(p.x) | static_cast<unsigned>(bf16_bits(p.y)) << 16,
                       bf16_bits(p.z) | static_cast<unsigned>(bf16_bits(p.w)) << 16);
    }
    for (long long i = vec_end + threadIdx.x; i < end; i += blockDim.x) {
      bad |= !update_element(h, s, i);
    }
  } else {
    for (long long i = c.begin + threadIdx.x; i < end; i += blockDim.x) {
      bad |= !update_element(h, s, i);
    }
  }
  if (bad) atomicOr(nonfinite, 1);
}

__global__ void swap_kernel(float* a, float* b, long long n) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float t = a[i];
    a[i] = b[i];
    b[i] = t;
  }
}

struct DeviceTensor {
  const float* data;
  long long size;
};

__device__ double block_sum(double v) {
  __shared__ double shared[32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0;
  if (threadIdx.x < 32)
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

__global__ void sum_squares_kernel(const DeviceTensor* tensors, const Chunk* chunks,
                                   double* partials, int* nonfinite) {
  const Chunk c = chunks[blockIdx.x];
  const DeviceTensor t = tensors[c.slot];
  const long long end = min(c.begin + kChunk, t.size);
  double acc = 0.0;  // infinite only when an element is (as on the CPU)
  bool bad = false;
  for (long long i = c.begin + threadIdx.x; i < end; i += blockDim.x) {
    const double x = t.data[i];
    bad |= !isfinite(x);
    acc += x * x;
  }
  if (bad) atomicOr(nonfinite, 1);
  const double total = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_partials_kernel(const double* partials, int n, double* out) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Lerp {  // dst + w * (src - dst), w in device memory: a step of a moving average
  const float* weight;
  __device__ float operator()(float dst, float src) const { return dst + *weight * (src - dst); }
};
struct Constant {
  float value;
  __device__ float operator()(float, float) const { return value; }
};
struct ScaledConstant {  // factor x a value in device memory
  const double* value;
  double factor;
  __device__ float operator()(float, float) const { return static_cast<float>(*value * factor); }
};

// Device copies of host tables, one per distinct content, never rewritten or
// freed: a table queued work (or a recorded CUDA graph) reads stays as it was.
// Each program's tables are the same every step, so steady state uploads
// nothing, and a step being captured finds its tables already there. They are
// a few bytes per parameter, one set per program.
template <typename T>
class CachedTable {
 public:
  const T* upload(const std::vector<T>& host, Stream& stream) {
    const auto* first = reinterpret_cast<const char*>(host.data());
    const std::size_t bytes = host.size() * sizeof(T);
    // Steady state: the table of the last call, compared without a copy.
    if (last_ != tables_.end() && last_->first.size() == bytes &&
        std::memcmp(last_->first.data(), first, bytes) == 0)
      return last_->second.template as<T>();
    std::string key(first, bytes);
    last_ = tables_.find(key);
    if (last_ != tables_.end()) return last_->second.template as<T>();
    // The first, direct run of a step made its tables; a new one now, while
    // the step is being recorded, would end the recording for good.
    refuse_inside_recording(stream.get(),
                            "a parameter table first met (the step's work differs from the "
                            "direct run before it)");
    DeviceBuffer buffer(bytes);
    // In stream order (the compute stream does not wait for the legacy one);
    // a pageable source is staged before the call returns.
    check(cudaMemcpyAsync(buffer.data(), host.data(), bytes, cudaMemcpyHostToDevice, stream.get()),
          "cudaMemcpyAsync(parameter table)");
    last_ = tables_.emplace(std::move(key), std::move(buffer)).first;
    return last_->second.template as<T>();
  }

 private:
  using Tables = std::map<std::string, DeviceBuffer>;  // by the table's bytes
  Tables tables_;
  Tables::iterator last_ = tables_.end();
};

// One device table rewritten at each upload, in stream order, for work that is
// never recorded: the work queued before has read the old contents by the
// time the copy runs.
template <typename T>
class ScratchTable {
 public:
  const T* upload(const std::vector<T>& host, Stream& stream) {
    const std::size_t bytes = host.size() * sizeof(T);
    if (buffer_.bytes() < bytes) {
      stream.synchronize();  // the old buffer may still be read
      buffer_ = DeviceBuffer(bytes);
    }
    check(cudaMemcpyAsync(buffer_.data(), host.data(), bytes, cudaMemcpyHostToDevice, stream.get()),
          "cudaMemcpyAsync(tensor table)");
    return buffer_.as<T>();
  }

 private:
  DeviceBuffer buffer_;
};

template <typename Sized>
std::vector<Chunk> chunks_of(const std::vector<Sized>& items) {
  std::vector<Chunk> chunks;
  for (std::size_t i = 0; i < items.size(); ++i)
    for (long long b = 0; b < items[i].size; b += kChunk)
      chunks.push_back({static_cast<long long>(i), b});
  return chunks;
}

// A full schedule window goes up in one slot of the pinned ring.
static_assert(sizeof(ScheduleWindow) + kMaxScheduledUpdates * sizeof(ScheduledUpdate) <=
              PinnedUploads::kSlotBytes);

class CudaVectorOps final : public VectorOps {
 public:
  explicit CudaVectorOps(CudaContext& ctx)
      : ctx_(ctx),
        result_(sizeof(double) + sizeof(int)),
        check_(sizeof(GradientCheck)),
        params_(sizeof(StepParams)),
        loss_scale_(sizeof(LossScaleState)),
        schedule_(sizeof(ScheduleWindow) + kMaxScheduledUpdates * sizeof(ScheduledUpdate)),
        average_weight_(sizeof(float)) {
    void* host = nullptr;
    check(cudaMallocHost(&host, std::max(sizeof(double) + sizeof(int), sizeof(LossScaleState))),
          "cudaMallocHost");
    host_result_ = PinnedHost(host);
    check(cudaMemsetAsync(check_.data(), 0, check_.bytes(), ctx_.compute.get()), "cudaMemsetAsync");
    upload_loss_scale(LossScaleState{});  // scale 1: the loss seed without scaling
    set_schedule(0, {});                  // an empty window: the values set on the host
  }

  // Queued on the compute stream: ordered with the updates before and after it.
  void set_optimizer_step(const OptimizerStep& o) override {
    const StepParams p{o, hyper_of(o, as_set(o))};
    ctx_.uploads.upload(params_.data(), &p, sizeof p, ctx_.compute.get(),
                        "cudaMemcpyAsync(optimizer hyperparameters)");
    adam_ = o.kind != OptimizerKind::sgd;
    clip_ = o.clip_norm > 0;
  }

  void start_loss_scaling(const LossScaleRule& rule, const LossScaleState& state) override {
    scaling_ = true;
    rule_ = rule;
    upload_loss_scale(state);
  }

  // The window lives in device memory as a ScheduleWindow followed by its
  // values, in a table allocated once (a recorded update keeps its address);
  // one copy in stream order rewrites both.
  void set_schedule(std::int64_t first_update,
                    const std::vector<ScheduledUpdate>& updates) override {
    check_schedule_size(updates.size());
    const std::size_t bytes = sizeof(ScheduleWindow) + updates.size() * sizeof(ScheduledUpdate);
    std::vector<char> host(bytes);
    const ScheduleWindow window{
        first_update, static_cast<std::int64_t>(updates.size()),
        reinterpret_cast<const ScheduledUpdate*>(schedule_.as<char>() + sizeof(ScheduleWindow))};
    std::memcpy(host.data(), &window, sizeof window);
    if (!updates.empty())
      std::memcpy(host.data() + sizeof window, updates.data(),
                  updates.size() * sizeof(ScheduledUpdate));
    ctx_.uploads.upload(schedule_.data(), host.data(), bytes, ctx_.compute.get(),
                        "cudaMemcpyAsync(schedule window)");
  }

  void stop_loss_scaling() override {
    scaling_ = false;
    upload_loss_scale(LossScaleState{});
    set_schedule(0, {});
  }

  LossScaleState loss_scale_state() override {
    check(cudaMemcpyAsync(host_result_.get(), loss_scale_.data(), sizeof(LossScaleState),
                          cudaMemcpyDeviceToHost, ctx_.compute.get()),
          "cudaMemcpyAsync(loss scale)");
    ctx_.compute.synchronize();
    LossScaleState state;
    std::memcpy(&state, host_result_.get(), sizeof state);
    return state;
  }

  void fill_loss_seed(const TensorRef& dst, double factor) override {
    map(nullptr, nullptr, dst.f32(), dst.numel(),
        ScaledConstant{&loss_scale_.as<LossScaleState>()->scale, factor}, ctx_.compute.get(),
        "fill_loss_seed");
  }

  void optimizer_update(const std::vector<ParamSlot>& slots) override {
    std::vector<DeviceSlot> table;
    table.reserve(slots.size());
    for (const auto& s : slots) {
      if (!s.param || !s.grad || (adam_ && (!s.state0 || !s.state1)))
        throw std::invalid_argument("optimizer step: a parameter slot lacks its gradient or state");
      const bool vec = aligned16(s.param) && aligned16(s.grad) &&
                       (!s.state0 || aligned16(s.state0)) && (!s.state1 || aligned16(s.state1)) &&
                       (!s.bf16_copy || reinterpret_cast<std::uintptr_t>(s.bf16_copy) % 8 == 0);
      table.push_back({s.param, s.grad, s.state0, s.state1, s.bf16_copy,
                       static_cast<long long>(s.size), s.weight_decay ? 1.0f : 0.0f, s.lr_scale,
                       vec ? 1 : 0, 0});
    }
    const std::vector<Chunk> chunks = chunks_of(table);
    cudaStream_t stream = ctx_.compute.get();
    auto* params = params_.as<StepParams>();
    // Whether to clip or scale is fixed for a run, so an update recorded with
    // the step keeps the branch taken here. The decision runs even with no
    // values, as on the CPU: the scaler counts the step.
    if (clip_ || scaling_) {
      std::vector<DeviceTensor> grads;
      for (const auto& s : slots) grads.push_back({s.grad, static_cast<long long>(s.size)});
      auto* gradient_check = check_.as<GradientCheck>();
      check(cudaMemsetAsync(&gradient_check->nonfinite, 0, sizeof(int), stream), "cudaMemsetAsync");
      if (chunks.empty())
        check(cudaMemsetAsync(&gradient_check->sum_squares, 0, sizeof(double), stream),
              "cudaMemsetAsync");
      else
        queue_sum_squares(grads, &gradient_check->sum_squares, &gradient_check->nonfinite, true);
      decide_kernel<<<1, 1, 0, stream>>>(params, gradient_check, rule_,
                                         scaling_ ? loss_scale_.as<LossScaleState>() : nullptr,
                                         schedule_.as<ScheduleWindow>());
      check_launch("decide_kernel");
    }
    if (chunks.empty()) return;
    const DeviceSlot* d_slots = slot_table_.upload(table, ctx_.compute);
    const Chunk* d_chunks = optimizer_chunks_.upload(chunks, ctx_.compute);
    optimizer_kernel<<<static_cast<unsigned>(chunks.size()), kBlock, 0, stream>>>(
        d_slots, d_chunks, &params->hyper, &check_.as<GradientCheck>()->nonfinite_sticky);
    check_launch("optimizer_kernel");
  }

  bool nonfinite_weights_seen() override {
    int* flag = &check_.as<GradientCheck>()->nonfinite_sticky;
    int seen = 0;
    check(cudaMemcpyAsync(host_result_.get(), flag, sizeof(int), cudaMemcpyDeviceToHost,
                          ctx_.compute.get()),
          "cudaMemcpyAsync(non-finite flag)");
    ctx_.compute.synchronize();
    std::memcpy(&seen, host_result_.get(), sizeof(int));
    check(cudaMemsetAsync(flag, 0, sizeof(int), ctx_.compute.get()), "cudaMemsetAsync");
    return seen != 0;
  }

  double sum_squares(const std::vector<TensorRef>& tensors, bool& finite) override {
    std::vector<DeviceTensor> table;
    for (const auto& t : tensors) table.push_back({t.f32(), static_cast<long long>(t.numel())});
    finite = true;
    if (chunks_of(table).empty()) return 0.0;
    cudaStream_t stream = ctx_.compute.get();
    auto* total = result_.as<double>();
    auto* nonfinite = reinterpret_cast<int*>(total + 1);
    check(cudaMemsetAsync(nonfinite, 0, sizeof(int), stream), "cudaMemsetAsync");
    queue_sum_squares(table, total, nonfinite, false);
    check(cudaMemcpyAsync(host_result_.get(), total, sizeof(double) + sizeof(int),
                          cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync(norm)");
    ctx_.compute.synchronize();
    double value = 0.0;
    int bad = 0;
    std::memcpy(&value, host_result_.get(), sizeof(double));
    std::memcpy(&bad, static_cast<char*>(host_result_.get()) + sizeof(double), sizeof(int));
    finite = bad == 0 && std::isfinite(value);
    return value;
  }

  void accumulate(const TensorRef& dst, const TensorRef& src) override {
    map(dst.f32(), src.f32(), dst.f32(), dst.numel(), Sum{}, ctx_.compute.get(), "accumulate");
  }

  void set_average_weight(float weight) override {
    ctx_.uploads.upload(average_weight_.data(), &weight, sizeof weight, ctx_.compute.get(),
                        "cudaMemcpyAsync(average weight)");
  }

  void average(const TensorRef& dst, const TensorRef& src) override {
    map(dst.f32(), src.f32(), dst.f32(), dst.numel(), Lerp{average_weight_.as<float>()},
        ctx_.compute.get(), "average");
  }

  void swap(const TensorRef& a, const TensorRef& b) override {
    if (a.numel() == 0) return;
    swap_kernel<<<grid_for(a.numel()), kBlock, 0, ctx_.compute.get()>>>(a.f32(), b.f32(),
                                                                        a.numel());
    check_launch("swap");
  }

  void round_to_bf16(const TensorRef& src, const TensorRef& dst) override {
    narrow(src.f32(), dst.data, src.numel(), DType::bf16, ctx_.compute.get());
  }

  void fill(const TensorRef& dst, float value) override {
    map(nullptr, nullptr, dst.f32(), dst.numel(), Constant{value}, ctx_.compute.get(), "fill");
  }

 private:
  // Queues *total = the sum of squares of `tensors` (in a fixed order), and
  // sets *nonfinite to 1 when any element is inf or NaN. `recorded`: the
  // launches may be part of a CUDA graph, so their tables are cached and their
  // per-block partial sums go to a buffer that is never freed or reused for
  // another size.
  void queue_sum_squares(const std::vector<DeviceTensor>& tensors, double* total, int* nonfinite,
                         bool recorded) {
    const std::vector<Chunk> chunks = chunks_of(tensors);
    const DeviceTensor* d_tensors = recorded ? tensor_table_.upload(tensors, ctx_.compute)
                                             : scratch_tensors_.upload(tensors, ctx_.compute);
    const Chunk* d_chunks = recorded ? norm_chunks_.upload(chunks, ctx_.compute)
                                     : scratch_chunks_.upload(chunks, ctx_.compute);
    const std::size_t bytes = chunks.size() * sizeof(double);
    DeviceBuffer* partials = &partials_;
    if (recorded) {
      partials = &recorded_partials_[chunks.size()];
      if (!partials->data()) {  // made by the direct run before a recording
        refuse_inside_recording(ctx_.compute.get(), "a partial-sum buffer first allocated");
        *partials = DeviceBuffer(bytes);
      }
    } else if (partials_.bytes() < bytes) {
      ctx_.compute.synchronize();  // earlier sums may still write the old buffer
      partials_ = DeviceBuffer(bytes);
    }
    cudaStream_t stream = ctx_.compute.get();
    sum_squares_kernel<<<static_cast<unsigned>(chunks.size()), kBlock, 0, stream>>>(
        d_tensors, d_chunks, partials->as<double>(), nonfinite);
    check_launch("sum_squares_kernel");
    sum_partials_kernel<<<1, 1024, 0, stream>>>(partials->as<double>(),
                                                static_cast<int>(chunks.size()), total);
    check_launch("sum_partials_kernel");
  }

  void upload_loss_scale(const LossScaleState& state) {
    ctx_.uploads.upload(loss_scale_.data(), &state, sizeof state, ctx_.compute.get(),
                        "cudaMemcpyAsync(loss scale)");
  }

  using PinnedHost = UniqueHandle<void*, cudaFreeHost>;
  CudaContext& ctx_;
  CachedTable<DeviceSlot> slot_table_;
  CachedTable<Chunk> optimizer_chunks_;
  CachedTable<DeviceTensor> tensor_table_;  // the update's gradients (may be recorded)
  CachedTable<Chunk> norm_chunks_;
  ScratchTable<DeviceTensor> scratch_tensors_;  // sum_squares()'s (never recorded)
  ScratchTable<Chunk> scratch_chunks_;
  DeviceBuffer partials_;                                  // sum_squares()'s block sums
  std::map<std::size_t, DeviceBuffer> recorded_partials_;  // the clipping update's, by count
  DeviceBuffer result_;  // sum_squares(): the total, then its non-finite flag
  DeviceBuffer check_;   // the GradientCheck of updates that clip or scale
  PinnedHost host_result_;
  DeviceBuffer params_;          // StepParams
  DeviceBuffer loss_scale_;      // LossScaleState (scale 1 when not scaling)
  DeviceBuffer schedule_;        // ScheduleWindow, then its values
  DeviceBuffer average_weight_;  // float: the weight of `average`
  LossScaleRule rule_;
  bool scaling_ = false;
  bool adam_ = false;  // the step set last has moments
  bool clip_ = false;  // the step set last clips
};

}  // namespace

std::unique_ptr<VectorOps> make_vector_ops(CudaContext& ctx) {
  return std::make_unique<CudaVectorOps>(ctx);
}

}  // namespace trainer::cuda
