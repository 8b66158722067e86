// Own loops for the layout and combination ops: flatten and reshape (copies,
// or reorders between activation formats; nothing when the output already
// aliases the input), add (sum of inputs,
// gradient copied to each) and concat (block copies along one axis).
#include <cstring>
#include <memory>

#include "ops/cpu/families.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/parallel.h"

namespace trainer::cpu {
namespace {

void copy_floats(void* dst, const void* src, std::int64_t count) {
  if (dst != src) std::memmove(dst, src, static_cast<std::size_t>(count) * 4);
}

// flatten and reshape: a copy, or (flatten) a reorder where the format pass
// gave the input a blocked layout or the output bf16 (the plain row-major bytes
// of an image are those of its flattened rows). The backward converts the
// gradient back the same way.
class ReshapeKernel final : public Kernel {
 public:
  explicit ReshapeKernel(const KernelContext& ctx)
      : bytes_(static_cast<std::size_t>(numel(ctx.output)) * dtype_size(ctx.output_format.dtype)),
        grad_bytes_(static_cast<std::size_t>(numel(ctx.output)) *
                    dtype_size(ctx.input_format(0).dtype)) {
    const Shape& x = ctx.inputs.at(0);
    const auto in = tensor_md(x, ctx.input_format(0));
    const auto out = plain_md(x, dnnl_type(ctx.output_format.dtype));
    forward_ = Relayout::into(in, out);
    backward_ = Relayout::into(out, in);
  }
  std::string implementation() const override { return forward_.needed() ? "reorder" : "copy"; }
  void forward(const KernelArgs& a) override {
    if (forward_.needed())
      forward_.to_buffer(a.inputs[0].data, a.output.data);
    else if (a.output.data != a.inputs[0].data)
      std::memmove(a.output.data, a.inputs[0].data, bytes_);
  }
  void backward(const KernelArgs& a) override {
    if (!a.grad_inputs[0]) return;
    if (backward_.needed())
      backward_.to_buffer(a.grad_output.data, a.grad_inputs[0].data);
    else
      std::memmove(a.grad_inputs[0].data, a.grad_output.data, grad_bytes_);
  }

 private:
  std::size_t bytes_, grad_bytes_;
  Relayout forward_, backward_;
};

class AddKernel final : public Kernel {
 public:
  explicit AddKernel(const KernelContext& ctx)
      : count_(numel(ctx.output)), relu_(epilogue_of(*ctx.attrs) == Epilogue::relu) {}
  std::string implementation() const override { return relu_ ? "loop+relu" : "loop"; }

  void forward(const KernelArgs& a) override {
    float* y = a.output.f32();  // may be input 0 (inplace_ok): element by element, fine
    const float* x0 = a.inputs[0].f32();
    const float* x1 = a.inputs[1].f32();
    parallel_chunks(count_, [&](std::int64_t begin, std::int64_t end) {
#pragma omp simd
      for (std::int64_t k = begin; k < end; ++k) y[k] = x0[k] + x1[k];
      for (std::size_t i = 2; i < a.inputs.size(); ++i) {
        const float* xi = a.inputs[i].f32();
#pragma omp simd
        for (std::int64_t k = begin; k < end; ++k) y[k] += xi[k];
      }
      if (!relu_) return;
#pragma omp simd
      for (std::int64_t k = begin; k < end; ++k) y[k] = y[k] > 0.0f ? y[k] : 0.0f;
    });
  }

  // Every input's gradient is dy (with relu: where the output is positive).
  // A gradient may be dy itself: the masked copy then works in place.
  void backward(const KernelArgs& a) override {
    const float* dy = a.grad_output.f32();
    const float* y = a.output.f32();
    const bool relu = relu_;
    parallel_chunks(count_, [dy, y, relu, &a](std::int64_t begin, std::int64_t end) {
      for (const auto& g : a.grad_inputs) {
        if (!g) continue;
        float* gi = g.f32();
        if (!relu) {
          copy_floats(gi + begin, dy + begin, end - begin);
          continue;
        }
#pragma omp simd
        for (std::int64_t k = begin; k < end; ++k) {
          const float d = dy[k];  // loaded either way, so the select vectorises
          gi[k] = y[k] > 0.0f ? d : 0.0f;
        }
      }
    });
  }

 private:
  std::int64_t count_;
  bool relu_;  // activation: relu
};

class ConcatKernel final : public Kernel {
 public:
  explicit ConcatKernel(const KernelContext& ctx) {
    const Shape& out = ctx.output;
    auto axis = static_cast<std::size_t>(
        (ctx.attrs->get_int("axis") + static_cast<std::int64_t>(out.size())) %
        static_cast<std::int64_t>(out.size()));
    outer_ = 1;
    for (std::size_t k = 0; k < axis; ++k) outer_ *= out[k];
    std::int64_t inner = 1;
    for (std::size_t k = axis + 1; k < out.size(); ++k) inner *= out[k];
    for (const auto& in : ctx.inputs) block_.push_back(in[axis] * inner);
    out_block_ = out[axis] * inner;
  }
  std::string implementation() const override { return "copy"; }

  void forward(const KernelArgs& a) override {
    float* y = a.output.f32();
    for (std::int64_t o = 0; o < outer_; ++o) {
      float* dst = y + o * out_block_;
      for (std::size_t i = 0; i < block_.size(); ++i) {
        std::memcpy(dst, a.inputs[i].f32() + o * block_[i],
                    static_cast<std::size_t>(block_[i]) * 4);
        dst += block_[i];
      }
    }
  }

  void backward(const KernelArgs& a) override {
    const float* dy = a.grad_output.f32();
    for (std::int64_t o = 0; o < outer_; ++o) {
      const float* src = dy + o * out_block_;
      for (std::size_t i = 0; i < block_.size(); ++i) {
        if (a.grad_inputs[i])
          std::memcpy(a.grad_inputs[i].f32() + o * block_[i], src,
                      static_cast<std::size_t>(block_[i]) * 4);
        src += block_[i];
      }
    }
  }

 private:
  std::int64_t outer_ = 1, out_block_ = 0;
  std::vector<std::int64_t> block_;  // per input: its extent along the axis times the inner size
};

template <class K>
KernelFactory factory() {
  return
      [](const KernelContext& ctx) -> std::unique_ptr<Kernel> { return std::make_unique<K>(ctx); };
}

}  // namespace

void register_shape_kernels(Backend& backend) {
  backend.add_kernel("flatten", factory<ReshapeKernel>());
  backend.add_kernel("reshape", factory<ReshapeKernel>());
  backend.add_kernel("add", factory<AddKernel>());
  backend.add_kernel("concat", factory<ConcatKernel>());
}

}  // namespace trainer::cpu
