// Own loops for the layout and combination ops: flatten and reshape (copies,
// nothing when the output already aliases the input), add (sum of inputs,
// gradient copied to each) and concat (block copies along one axis).
#include <cstring>
#include <memory>

#include "ops/cpu/families.h"

namespace trainer::cpu {
namespace {

void copy_floats(void* dst, const void* src, std::int64_t count) {
  if (dst != src) std::memmove(dst, src, static_cast<std::size_t>(count) * 4);
}

class CopyKernel final : public Kernel {
 public:
  explicit CopyKernel(const KernelContext& ctx) : count_(numel(ctx.output)) {}
  std::string implementation() const override { return "copy"; }
  void forward(const KernelArgs& a) override {
    copy_floats(a.output.data, a.inputs[0].data, count_);
  }
  void backward(const KernelArgs& a) override {
    if (a.grad_inputs[0]) copy_floats(a.grad_inputs[0].data, a.grad_output.data, count_);
  }

 private:
  std::int64_t count_;
};

class AddKernel final : public Kernel {
 public:
  explicit AddKernel(const KernelContext& ctx) : count_(numel(ctx.output)) {}
  std::string implementation() const override { return "loop"; }

  void forward(const KernelArgs& a) override {
    float* y = a.output.f32();
    const float* x0 = a.inputs[0].f32();
    const float* x1 = a.inputs[1].f32();
    for (std::int64_t k = 0; k < count_; ++k) y[k] = x0[k] + x1[k];
    for (std::size_t i = 2; i < a.inputs.size(); ++i) {
      const float* xi = a.inputs[i].f32();
      for (std::int64_t k = 0; k < count_; ++k) y[k] += xi[k];
    }
  }

  void backward(const KernelArgs& a) override {
    for (const auto& g : a.grad_inputs)
      if (g) copy_floats(g.data, a.grad_output.data, count_);
  }

 private:
  std::int64_t count_;
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
  backend.add_kernel("flatten", factory<CopyKernel>());
  backend.add_kernel("reshape", factory<CopyKernel>());
  backend.add_kernel("add", factory<AddKernel>());
  backend.add_kernel("concat", factory<ConcatKernel>());
}

}  // namespace trainer::cpu
