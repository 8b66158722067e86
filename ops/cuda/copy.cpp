// Data-movement ops as device copies on the compute stream: flatten and reshape
// (a plain copy, skipped when output aliases input) and concat (one strided 2-D
// copy per input, forward and backward).
#include <string>

#include "ops/cuda/kernels.h"

namespace trainer::cuda {
namespace {

void copy_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (dst == src || bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync(device to device)");
}

// flatten, reshape: the same bytes under another shape.
class ReshapeKernel final : public Kernel {
 public:
  explicit ReshapeKernel(CudaContext& ctx) : ctx_(ctx) {}
  void forward(const KernelArgs& a) override {
    copy_device(a.output.data, a.inputs[0].data, a.output.bytes(), ctx_.compute.get());
  }
  void backward(const KernelArgs& a) override {
    if (a.grad_inputs.empty() || !a.grad_inputs[0]) return;
    copy_device(a.grad_inputs[0].data, a.grad_output.data, a.grad_output.bytes(),
                ctx_.compute.get());
  }
  std::string implementation() const override { return "cuda:copy"; }

 private:
  CudaContext& ctx_;
};

// concat along `axis`: the tensors are [outer, extent_i * inner] matrices and
// each input is a column block of the output.
class ConcatKernel final : public Kernel {
 public:
  ConcatKernel(const KernelContext& k, CudaContext& ctx) : ctx_(ctx) {
    const auto rank = static_cast<std::int64_t>(k.output.size());
    std::int64_t axis = k.attrs->get_int("axis");
    if (axis < 0) axis += rank;
    std::int64_t inner = 1;
    for (std::int64_t d = axis + 1; d < rank; ++d) inner *= k.output[static_cast<std::size_t>(d)];
    outer_ = 1;
    for (std::int64_t d = 0; d < axis; ++d) outer_ *= k.output[static_cast<std::size_t>(d)];
    for (const auto& s : k.inputs) widths_.push_back(s[static_cast<std::size_t>(axis)] * inner * 4);
    out_width_ = k.output[static_cast<std::size_t>(axis)] * inner * 4;
  }
  void forward(const KernelArgs& a) override {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < widths_.size(); ++i) {
      copy_block(static_cast<char*>(a.output.data) + offset, out_width_, a.inputs[i].data,
                 widths_[i], widths_[i]);
      offset += widths_[i];
    }
  }
  void backward(const KernelArgs& a) override {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < widths_.size(); ++i) {
      if (i < a.grad_inputs.size() && a.grad_inputs[i])
        copy_block(a.grad_inputs[i].data, widths_[i],
                   static_cast<const char*>(a.grad_output.data) + offset, out_width_, widths_[i]);
      offset += widths_[i];
    }
  }
  std::string implementation() const override { return "cuda:copy2d"; }

 private:
  void copy_block(void* dst, std::int64_t dst_pitch, const void* src, std::int64_t src_pitch,
                  std::int64_t width) {
    if (width == 0 || outer_ == 0) return;
    check(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dst_pitch), src,
                            static_cast<std::size_t>(src_pitch), static_cast<std::size_t>(width),
                            static_cast<std::size_t>(outer_), cudaMemcpyDeviceToDevice,
                            ctx_.compute.get()),
          "cudaMemcpy2DAsync(concat)");
  }

  CudaContext& ctx_;
  std::int64_t outer_ = 1;
  std::int64_t out_width_ = 0;
  std::vector<std::int64_t> widths_;  // bytes of one row of each input
};

}  // namespace

void register_copy_kernels(Backend& backend, CudaContext& ctx) {
  for (const char* name : {"flatten", "reshape"})
    backend.add_kernel(
        name, [&ctx](const KernelContext&) { return std::make_unique<ReshapeKernel>(ctx); });
  backend.add_kernel(
      "concat", [&ctx](const KernelContext& k) { return std::make_unique<ConcatKernel>(k, ctx); });
}

}  // namespace trainer::cuda
