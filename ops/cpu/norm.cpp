// batchnorm and layernorm on oneDNN normalization primitives. batchnorm: batch
// statistics in training (saved for the backward, running statistics updated
// here), running statistics in eval; images in a blocked layout; `activation:
// relu` through oneDNN's fuse_norm_relu (its mask saved for the backward); with
// `sync` the own-loop kernel of batchnorm_sync.cpp. A short training batch
// (StepValues::valid_rows) is normalised over its real rows alone, padding
// rows of the output and input gradient zero. layernorm: statistics over the
// last dim.
#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "ops/cpu/batchnorm_sync.h"
#include "ops/cpu/families.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/onednn.h"

namespace trainer::cpu {
namespace {

using bn_fwd = dnnl::batch_normalization_forward;
using bn_bwd = dnnl::batch_normalization_backward;
using ln_fwd = dnnl::layer_normalization_forward;
using ln_bwd = dnnl::layer_normalization_backward;
using flags = dnnl::normalization_flags;

std::size_t align64(std::size_t n) {
  return (n + 63) / 64 * 64;
}

// Workspace layout shared by both kernels: the primitive scratchpad, then
// stand-ins for gradients nobody asked for (input, scale, shift).
struct NormWorkspace {
  std::size_t scratch = 0, dx_bytes = 0, param_bytes = 0;
  std::size_t dx_offset() const { return align64(scratch); }
  std::size_t dscale_offset() const { return dx_offset() + align64(dx_bytes); }
  std::size_t dshift_offset() const { return dscale_offset() + align64(param_bytes); }
  std::size_t total() const { return dshift_offset() + align64(param_bytes); }
  static void* at(void* ws, std::size_t offset) { return static_cast<char*>(ws) + offset; }
};

// batchnorm on images runs in a blocked layout (nChw16c / nChw8c): oneDNN 2.6 has
// only a slow generic implementation for plain NCHW. An input in another format is
// converted once in the forward and kept (saved) for the backward; outputs in
// another format are converted back. Between blocked convolutions, pooling and
// activations (the format pass) there is nothing to convert.
dnnl::memory::desc batchnorm_layout(const Shape& x, const dnnl::memory::desc& md) {
  if (x.size() != 4) return md;
  const bool avx512 = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  return dnnl::memory::desc(
      md.dims(), md.data_type(),
      avx512 ? dnnl::memory::format_tag::aBcd16b : dnnl::memory::format_tag::aBcd8b);
}

// `md` cut to its first `rows` rows. N is the outermost dimension of every
// layout batchnorm runs on (plain NC / NCHW, nChw16c / nChw8c), so the rows are
// a prefix of the buffer, with the same strides.
dnnl::memory::desc first_rows(const dnnl::memory::desc& md, std::int64_t rows) {
  dnnl_memory_desc_t cut = md.data;
  cut.dims[0] = cut.padded_dims[0] = rows;
  const dnnl::memory::desc prefix(cut);
  if (prefix.get_size() * static_cast<std::size_t>(md.dims()[0]) !=
      md.get_size() * static_cast<std::size_t>(rows))
    throw std::logic_error("batchnorm: layout " + layout_name(md) +
                           " does not hold its rows one after another");
  return prefix;
}

// Bytes of one row (one sample) of a tensor in layout `md`.
std::size_t row_bytes(const dnnl::memory::desc& md) {
  return md.get_size() / static_cast<std::size_t>(md.dims()[0]);
}

// Zeros rows `from`.. of a buffer of `rows` rows of `bytes_per_row` bytes.
void zero_rows(void* data, std::size_t bytes_per_row, std::int64_t from, std::int64_t rows) {
  std::memset(static_cast<char*>(data) + static_cast<std::size_t>(from) * bytes_per_row, 0,
              static_cast<std::size_t>(rows - from) * bytes_per_row);
}

// The training forward and backward primitives of batchnorm over `data`, with
// the scratchpad and relu-mask workspace they need.
struct TrainingCalls {
  PrimitiveCall forward, backward;
  std::size_t scratchpad = 0;  // the larger of the two
  std::size_t relu_mask = 0;   // with fuse_norm_relu: written by forward, read by backward
  std::string impl;
};

TrainingCalls training_calls(const dnnl::memory::desc& data, float eps, flags scale_shift) {
  const auto stat = plain_md({data.dims()[1]});
  const auto attr = user_scratchpad_attr();
  auto& eng = cpu_engine();
  const bool relu = (scale_shift & flags::fuse_norm_relu) == flags::fuse_norm_relu;
  TrainingCalls calls;
  bn_fwd::primitive_desc fwd_pd(
      bn_fwd::desc(dnnl::prop_kind::forward_training, data, eps, scale_shift), attr, eng);
  calls.forward = PrimitiveCall(bn_fwd(fwd_pd));
  PrimitiveCall& fwd = calls.forward;
  for (int id : {DNNL_ARG_SRC, DNNL_ARG_DST}) fwd.arg(id, data);
  // With fuse_norm_relu the training forward writes which outputs were
  // positive, and the backward reads it.
  if (relu) {
    calls.relu_mask = fwd_pd.workspace_desc().get_size();
    fwd.arg(DNNL_ARG_WORKSPACE, fwd_pd.workspace_desc());
  }
  for (int id : {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE})
    fwd.arg(id, stat);
  calls.scratchpad = add_scratchpad(fwd, fwd_pd);

  bn_bwd::primitive_desc bwd_pd(
      bn_bwd::desc(dnnl::prop_kind::backward, data, data, eps, scale_shift), attr, eng, fwd_pd);
  calls.backward = PrimitiveCall(bn_bwd(bwd_pd));
  PrimitiveCall& bwd = calls.backward;
  for (int id : {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC}) bwd.arg(id, data);
  if (relu) bwd.arg(DNNL_ARG_WORKSPACE, bwd_pd.workspace_desc());
  for (int id : {DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_SCALE, DNNL_ARG_SHIFT,
                 DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT})
    bwd.arg(id, stat);
  calls.scratchpad = std::max(calls.scratchpad, add_scratchpad(bwd, bwd_pd));
  calls.impl = impl_name(fwd_pd) + (relu ? "+relu" : "") + " [" + layout_name(data) + "]";
  return calls;
}

// A short batch (StepValues::valid_rows below N, drop_last: false) trains
// like a batch of its real rows alone: statistics, output, gradients and the
// running statistics (unbiased with the real count) come from primitives
// built for N' = the real rows, on the first N' rows of the same buffers.
// They are built when first needed and kept for that N' (the short batch has
// the same size every epoch). The padding rows of the output and of the
// input gradient are written as zeros; with no real row the output and every
// gradient are zero and the running statistics stay as they are.
class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(const KernelContext& ctx) {
    const Shape& x = ctx.inputs.at(0);
    rows_ = x[0];
    channels_ = x[1];
    per_channel_ = numel(x) / channels_;
    momentum_ = static_cast<float>(ctx.attrs->get_number("momentum"));
    eps_ = static_cast<float>(ctx.attrs->get_number("eps"));
    const auto in = tensor_md(x, ctx.input_format(0)), stat = plain_md({channels_});
    const auto out = tensor_md(ctx.output, ctx.output_format);
    data_ = batchnorm_layout(x, in);
    in_row_bytes_ = row_bytes(in);
    out_row_bytes_ = row_bytes(out);
    relu_ = epilogue_of(*ctx.attrs) == Epilogue::relu;
    flags_ = flags::use_scale | flags::use_shift | (relu_ ? flags::fuse_norm_relu : flags::none);

    bn_fwd::primitive_desc eval_pd(bn_fwd::desc(dnnl::prop_kind::forward_inference, data_, eps_,
                                                flags::use_global_stats | flags_),
                                   user_scratchpad_attr(), cpu_engine());
    eval_ = PrimitiveCall(bn_fwd(eval_pd));
    for (int id : {DNNL_ARG_SRC, DNNL_ARG_DST}) eval_.arg(id, data_);
    for (int id : {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE})
      eval_.arg(id, stat);
    reserve_scratchpad(add_scratchpad(eval_, eval_pd));
    impl_ = impl_name(eval_pd) + (relu_ ? "+relu" : "");
    x_in_ = Relayout::into(in, data_);
    y_out_ = Relayout::out_of(data_, out);
    y_buffer_ = bufs_.add(y_out_.bytes());
    if (!ctx.training) {
      x_buffer_ = bufs_.add(x_in_.bytes());
      return;
    }

    TrainingCalls full = training_calls(data_, eps_, flags_);
    train_ = std::move(full.forward);
    bwd_ = std::move(full.backward);
    relu_mask_bytes_ = full.relu_mask;
    reserve_scratchpad(full.scratchpad);
    impl_ = full.impl;

    // Backward phase: dy', dx' (or a stand-in for an unwanted dx), stand-ins for
    // unwanted scale/shift gradients.
    bufs_.next_phase();
    dy_in_ = Relayout::into(out, data_);
    dx_out_ = Relayout::out_of(data_, in);
    dy_buffer_ = bufs_.add(dy_in_.bytes());
    dx_buffer_ = bufs_.add(data_.get_size());
    const auto param_bytes = static_cast<std::size_t>(channels_) * 4;
    dscale_buffer_ = bufs_.add(param_bytes);
    dshift_buffer_ = bufs_.add(param_bytes);
  }

  // Batch mean and (biased) variance, the input in the primitive's layout
  // when it differs, and the relu mask, from the forward to the backward.
  std::vector<std::size_t> saved_bytes() const override {
    if (!train_.valid()) return {};
    const auto b = static_cast<std::size_t>(channels_) * 4;
    std::vector<std::size_t> bytes = {b, b};
    if (x_in_.needed()) bytes.push_back(x_in_.bytes());
    if (relu_) bytes.push_back(relu_mask_bytes_);
    return bytes;
  }
  std::size_t workspace_bytes() const override { return bufs_.total(); }
  std::string implementation() const override { return impl_; }

  void forward(const KernelArgs& a) override {
    if (!(a.training && train_.valid())) return run_forward(eval_, a, false);
    const std::int64_t rows = rows_used(step_values_of(a).valid_rows, rows_);
    if (rows == 0) {  // no statistics to take: nothing to normalise or learn
      zero_rows(a.output.data, out_row_bytes_, 0, rows_);
      return;
    }
    run_forward(rows == rows_ ? train_ : short_batch(rows).forward, a, true);
    if (rows < rows_) zero_rows(a.output.data, out_row_bytes_, rows, rows_);
    if (a.update_state) update_running_statistics(a, rows);
  }

  void backward(const KernelArgs& a) override {
    const std::int64_t rows = rows_used(step_values_of(a).valid_rows, rows_);
    if (rows == 0) return zero_gradients(a);
    PrimitiveCall& bwd = rows == rows_ ? bwd_ : short_batch(rows).backward;
    void* ws = a.workspace;
    bwd.bind(DNNL_ARG_SRC, x_in_.needed() ? saved_x(a) : a.inputs[0].data);
    bwd.bind(DNNL_ARG_DIFF_DST, dy_in_.to_buffer(a.grad_output.data, bufs_.at(ws, dy_buffer_)));
    bwd.bind(DNNL_ARG_MEAN, a.saved[0]);
    bwd.bind(DNNL_ARG_VARIANCE, a.saved[1]);
    bwd.bind(DNNL_ARG_SCALE, a.params[0].data);
    bwd.bind(DNNL_ARG_SHIFT, a.params[1].data);  // oneDNN 2.6 asks for it
    if (relu_) bwd.bind(DNNL_ARG_WORKSPACE, a.saved.back());
    void* dx = a.grad_inputs[0] ? a.grad_inputs[0].data : nullptr;
    void* dx_buffer = bufs_.at(ws, dx_buffer_);
    bwd.bind(DNNL_ARG_DIFF_SRC, dx ? dx_out_.target(dx, dx_buffer) : dx_buffer);
    bwd.bind(DNNL_ARG_DIFF_SCALE,
             a.grad_params[0] ? a.grad_params[0].data : bufs_.at(ws, dscale_buffer_));
    bwd.bind(DNNL_ARG_DIFF_SHIFT,
             a.grad_params[1] ? a.grad_params[1].data : bufs_.at(ws, dshift_buffer_));
    bwd.bind_scratchpad(ws);
    bwd.execute();
    if (!dx) return;
    dx_out_.from_buffer(dx_buffer, dx);
    if (rows < rows_) zero_rows(dx, in_row_bytes_, rows, rows_);
  }

 private:
  void* saved_x(const KernelArgs& a) const { return x_in_.needed() ? a.saved[2] : nullptr; }

  void reserve_scratchpad(std::size_t bytes) {
    scratchpad_bytes_ = std::max(scratchpad_bytes_, bytes);
    bufs_.need_scratchpad(bytes);
  }

  // `call` (the eval, training or short-batch training forward) on the
  // arguments, the output converted to the user's format.
  void run_forward(PrimitiveCall& call, const KernelArgs& a, bool train) {
    void* ws = a.workspace;
    void* x_buffer = train_.valid() ? saved_x(a) : bufs_.at(ws, x_buffer_);
    call.bind(DNNL_ARG_SRC, x_in_.to_buffer(a.inputs[0].data, x_buffer));
    call.bind(DNNL_ARG_DST, y_out_.target(a.output.data, bufs_.at(ws, y_buffer_)));
    call.bind(DNNL_ARG_SCALE, a.params[0].data);
    call.bind(DNNL_ARG_SHIFT, a.params[1].data);
    call.bind(DNNL_ARG_MEAN, train ? a.saved[0] : a.params[2].data);
    call.bind(DNNL_ARG_VARIANCE, train ? a.saved[1] : a.params[3].data);
    if (train && relu_) call.bind(DNNL_ARG_WORKSPACE, a.saved.back());
    call.bind_scratchpad(ws);
    call.execute();
    y_out_.from_buffer(bufs_.at(ws, y_buffer_), a.output.data);
  }

  // Running statistics like PyTorch: the unbiased variance of the batch's
  // `rows` real rows.
  void update_running_statistics(const KernelArgs& a, std::int64_t rows) {
    const float* mean = static_cast<const float*>(a.saved[0]);
    const float* var = static_cast<const float*>(a.saved[1]);
    float* running_mean = a.params[2].f32();
    float* running_var = a.params[3].f32();
    const float m = momentum_;
    const std::int64_t count = per_channel_ / rows_ * rows;
    const float unbias =
        count > 1 ? static_cast<float>(count) / static_cast<float>(count - 1) : 1.0f;
    for (std::int64_t c = 0; c < channels_; ++c) {
      running_mean[c] = (1 - m) * running_mean[c] + m * mean[c];
      running_var[c] = (1 - m) * running_var[c] + m * var[c] * unbias;
    }
  }

  // A batch with no real row: every wanted gradient is zero.
  void zero_gradients(const KernelArgs& a) const {
    if (a.grad_inputs[0]) zero_rows(a.grad_inputs[0].data, in_row_bytes_, 0, rows_);
    for (const TensorRef& g : a.grad_params)
      if (g) std::memset(g.data, 0, g.bytes());
  }

  // The training primitives for a batch of `rows` real rows (built on first
  // use, kept until another count comes). They run inside the workspace and
  // saved buffers sized for the full batch: a larger need is refused.
  TrainingCalls& short_batch(std::int64_t rows) {
    if (short_rows_ == rows) return short_;
    TrainingCalls calls = training_calls(first_rows(data_, rows), eps_, flags_);
    if (calls.scratchpad > scratchpad_bytes_ || calls.relu_mask > relu_mask_bytes_)
      throw std::runtime_error(
          "batchnorm: oneDNN's primitives for a short batch of " + std::to_string(rows) + " of " +
          std::to_string(rows_) + " rows need " + std::to_string(calls.scratchpad) +
          " bytes of scratchpad and " + std::to_string(calls.relu_mask) +
          " of relu mask, more than the full batch's " + std::to_string(scratchpad_bytes_) +
          " and " + std::to_string(relu_mask_bytes_) +
          "; use data.drop_last: true, or a batch size that divides the training set");
    short_ = std::move(calls);
    short_rows_ = rows;
    return short_;
  }

  std::int64_t rows_ = 0, channels_ = 0, per_channel_ = 0;
  bool relu_ = false;  // activation: relu (fuse_norm_relu)
  std::size_t relu_mask_bytes_ = 0, scratchpad_bytes_ = 0;
  std::size_t in_row_bytes_ = 0, out_row_bytes_ = 0;  // of x and dx; of y and dy
  float momentum_ = 0.1f, eps_ = 1e-5f;
  flags flags_ = flags::none;
  dnnl::memory::desc data_;  // the primitives' layout of x, y, dy and dx
  Relayout x_in_, y_out_, dy_in_, dx_out_;
  KernelBuffers bufs_;
  std::size_t x_buffer_ = 0, y_buffer_ = 0, dy_buffer_ = 0, dx_buffer_ = 0, dscale_buffer_ = 0,
              dshift_buffer_ = 0;
  std::string impl_;
  PrimitiveCall eval_, train_, bwd_;
  std::int64_t short_rows_ = -1;  // the real rows short_ is built for (-1: none yet)
  TrainingCalls short_;
};

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const KernelContext& ctx) {
    const Shape& x = ctx.inputs.at(0);
    dim_ = x.back();
    rows_ = numel(x) / dim_;
    const float eps = static_cast<float>(ctx.attrs->get_number("eps"));
    const auto data = plain_md({rows_, dim_}), stat = plain_md({rows_}), param = plain_md({dim_});
    const auto attr = user_scratchpad_attr();
    auto& eng = cpu_engine();
    const auto f = flags::use_scale | flags::use_shift;

    ln_fwd::primitive_desc eval_pd(
        ln_fwd::desc(dnnl::prop_kind::forward_inference, data, stat, eps, f), attr, eng);
    eval_ = PrimitiveCall(ln_fwd(eval_pd));
    for (int id : {DNNL_ARG_SRC, DNNL_ARG_DST}) eval_.arg(id, data);
    for (int id : {DNNL_ARG_SCALE, DNNL_ARG_SHIFT}) eval_.arg(id, param);
    ws_.scratch = add_scratchpad(eval_, eval_pd);
    impl_ = impl_name(eval_pd);
    if (!ctx.training) return;

    ln_fwd::primitive_desc train_pd(
        ln_fwd::desc(dnnl::prop_kind::forward_training, data, stat, eps, f), attr, eng);
    train_ = PrimitiveCall(ln_fwd(train_pd));
    for (int id : {DNNL_ARG_SRC, DNNL_ARG_DST}) train_.arg(id, data);
    for (int id : {DNNL_ARG_SCALE, DNNL_ARG_SHIFT}) train_.arg(id, param);
    for (int id : {DNNL_ARG_MEAN, DNNL_ARG_VARIANCE}) train_.arg(id, stat);
    ws_.scratch = std::max(ws_.scratch, add_scratchpad(train_, train_pd));

    ln_bwd::primitive_desc bwd_pd(ln_bwd::desc(dnnl::prop_kind::backward, data, data, stat, eps, f),
                                  attr, eng, train_pd);
    bwd_ = PrimitiveCall(ln_bwd(bwd_pd));
    for (int id : {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC}) bwd_.arg(id, data);
    for (int id : {DNNL_ARG_MEAN, DNNL_ARG_VARIANCE}) bwd_.arg(id, stat);
    for (int id : {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT})
      bwd_.arg(id, param);
    ws_.scratch = std::max(ws_.scratch, add_scratchpad(bwd_, bwd_pd));
    ws_.dx_bytes = static_cast<std::size_t>(numel(x)) * 4;
    ws_.param_bytes = static_cast<std::size_t>(dim_) * 4;
    impl_ = impl_name(train_pd);
  }

  // Per-row mean and variance, from the forward to the backward.
  std::vector<std::size_t> saved_bytes() const override {
    const auto b = static_cast<std::size_t>(rows_) * 4;
    return {b, b};
  }
  std::size_t workspace_bytes() const override { return ws_.total(); }
  std::string implementation() const override { return impl_; }

  void forward(const KernelArgs& a) override {
    const bool train = a.training && train_.valid() && a.saved.size() == 2;
    PrimitiveCall& call = train ? train_ : eval_;
    call.bind(DNNL_ARG_SRC, a.inputs[0].data);
    call.bind(DNNL_ARG_DST, a.output.data);
    call.bind(DNNL_ARG_SCALE, a.params[0].data);
    call.bind(DNNL_ARG_SHIFT, a.params[1].data);
    if (train) {
      call.bind(DNNL_ARG_MEAN, a.saved[0]);
      call.bind(DNNL_ARG_VARIANCE, a.saved[1]);
    }
    call.bind_scratchpad(a.workspace);
    call.execute();
  }

  void backward(const KernelArgs& a) override {
    void* ws = a.workspace;
    bwd_.bind(DNNL_ARG_SRC, a.inputs[0].data);
    bwd_.bind(DNNL_ARG_DIFF_DST, a.grad_output.data);
    bwd_.bind(DNNL_ARG_MEAN, a.saved[0]);
    bwd_.bind(DNNL_ARG_VARIANCE, a.saved[1]);
    bwd_.bind(DNNL_ARG_SCALE, a.params[0].data);
    bwd_.bind(DNNL_ARG_SHIFT, a.params[1].data);  // oneDNN 2.6 asks for it
    bwd_.bind(DNNL_ARG_DIFF_SRC,
              a.grad_inputs[0] ? a.grad_inputs[0].data : NormWorkspace::at(ws, ws_.dx_offset()));
    bwd_.bind(DNNL_ARG_DIFF_SCALE, a.grad_params[0] ? a.grad_params[0].data
                                                    : NormWorkspace::at(ws, ws_.dscale_offset()));
    bwd_.bind(DNNL_ARG_DIFF_SHIFT, a.grad_params[1] ? a.grad_params[1].data
                                                    : NormWorkspace::at(ws, ws_.dshift_offset()));
    bwd_.bind_scratchpad(ws);
    bwd_.execute();
  }

 private:
  std::int64_t dim_ = 0, rows_ = 0;
  NormWorkspace ws_;
  std::string impl_;
  PrimitiveCall eval_, train_, bwd_;
};

}  // namespace

void register_norm_kernels(Backend& backend) {
  backend.add_kernel("batchnorm", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    // SyncBN: own loops whose sums go through the collective (batchnorm_sync.cpp).
    if (ctx.attrs->has("sync") && ctx.attrs->get_bool("sync"))
      return make_sync_batchnorm_kernel(ctx);
    return std::make_unique<BatchNormKernel>(ctx);
  });
  backend.add_kernel("layernorm", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<LayerNormKernel>(ctx);
  });
}

}  // namespace trainer::cpu
