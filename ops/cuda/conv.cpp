// conv2d through cuDNN (legacy convolution API): forward, backward data and
// backward filter with algorithms chosen once here, within a workspace limit
// (cudnnFind* when autotuning, the _v7 heuristics otherwise; only deterministic
// algorithms when asked), and the bias by cudnnAddTensor / cudnnConvolutionBackwardBias.
#include <algorithm>
#include <string>

#include "ops/cuda/cudnn_descriptors.h"
#include "ops/cuda/kernels.h"
#include "ops/defs/def_helpers.h"

namespace trainer::cuda {
namespace {

constexpr std::size_t kWorkspaceLimit = 256u << 20;

// The first usable candidate: succeeded, fits the workspace, deterministic if asked.
template <typename Perf>
const Perf* pick(const Perf* perfs, int count, bool deterministic) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perfs[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kWorkspaceLimit) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    return &p;
  }
  return nullptr;
}

[[noreturn]] void no_algorithm(const char* pass, const KernelContext& k) {
  throw std::runtime_error(std::string("conv2d: cuDNN offers no ") + pass +
                           " algorithm for input " + to_string(k.inputs.at(0)) + " -> " +
                           to_string(k.output) + " within " +
                           std::to_string(kWorkspaceLimit >> 20) + " MiB of workspace" +
                           (k.deterministic ? " that is deterministic" : ""));
}

class ConvKernel final : public Kernel {
 public:
  ConvKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx),
        x_(k.inputs[0][0], k.inputs[0][1], k.inputs[0][2], k.inputs[0][3]),
        y_(k.output[0], k.output[1], k.output[2], k.output[3]),
        bias_(1, k.output[1], 1, 1),
        w_(k.param_decls.at(0).shape[0], k.param_decls[0].shape[1], k.param_decls[0].shape[2],
           k.param_decls[0].shape[3]),
        conv_(geometry(k), k.allow_tf32),
        has_bias_(k.param_decls.size() > 1) {
    cudnnHandle_t h = ctx.cudnn.get();
    constexpr int kMax = 16;
    int n = 0;
    {
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      if (k.autotune)
        check(cudnnFindConvolutionForwardAlgorithm(h, x_.get(), w_.get(), conv_.get(), y_.get(),
                                                   kMax, &n, perf),
              "cudnnFindConvolutionForwardAlgorithm");
      else
        check(cudnnGetConvolutionForwardAlgorithm_v7(h, x_.get(), w_.get(), conv_.get(), y_.get(),
                                                     kMax, &n, perf),
              "cudnnGetConvolutionForwardAlgorithm_v7");
      const auto* p = pick(perf, n, k.deterministic);
      if (!p) no_algorithm("forward", k);
      fwd_ = p->algo;
      workspace_ = std::max(workspace_, p->memory);
    }
    if (!k.training) return;
    {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      if (k.autotune)
        check(cudnnFindConvolutionBackwardDataAlgorithm(h, w_.get(), y_.get(), conv_.get(),
                                                        x_.get(), kMax, &n, perf),
              "cudnnFindConvolutionBackwardDataAlgorithm");
      else
        check(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_.get(), y_.get(), conv_.get(),
                                                          x_.get(), kMax, &n, perf),
              "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      const auto* p = pick(perf, n, k.deterministic);
      if (!p) no_algorithm("backward-data", k);
      bwd_data_ = p->algo;
      workspace_ = std::max(workspace_, p->memory);
    }
    {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      if (k.autotune)
        check(cudnnFindConvolutionBackwardFilterAlgorithm(h, x_.get(), y_.get(), conv_.get(),
                                                          w_.get(), kMax, &n, perf),
              "cudnnFindConvolutionBackwardFilterAlgorithm");
      else
        check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_.get(), y_.get(), conv_.get(),
                                                            w_.get(), kMax, &n, perf),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      const auto* p = pick(perf, n, k.deterministic);
      if (!p) no_algorithm("backward-filter", k);
      bwd_filter_ = p->algo;
      workspace_ = std::max(workspace_, p->memory);
    }
  }

  std::size_t workspace_bytes() const override { return workspace_; }

  void forward(const KernelArgs& a) override {
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = ctx_.cudnn.get();
    check(cudnnConvolutionForward(h, &one, x_.get(), a.inputs[0].data, w_.get(), a.params[0].data,
                                  conv_.get(), fwd_, a.workspace, workspace_, &zero, y_.get(),
                                  a.output.data),
          "cudnnConvolutionForward");
    if (has_bias_)
      check(cudnnAddTensor(h, &one, bias_.get(), a.params[1].data, &one, y_.get(), a.output.data),
            "cudnnAddTensor(conv2d bias)");
  }

  void backward(const KernelArgs& a) override {
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = ctx_.cudnn.get();
    if (!a.grad_inputs.empty() && a.grad_inputs[0])
      check(cudnnConvolutionBackwardData(h, &one, w_.get(), a.params[0].data, y_.get(),
                                         a.grad_output.data, conv_.get(), bwd_data_, a.workspace,
                                         workspace_, &zero, x_.get(), a.grad_inputs[0].data),
            "cudnnConvolutionBackwardData");
    if (a.grad_params.size() > 0 && a.grad_params[0])
      check(cudnnConvolutionBackwardFilter(
                h, &one, x_.get(), a.inputs[0].data, y_.get(), a.grad_output.data, conv_.get(),
                bwd_filter_, a.workspace, workspace_, &zero, w_.get(), a.grad_params[0].data),
            "cudnnConvolutionBackwardFilter");
    if (has_bias_ && a.grad_params.size() > 1 && a.grad_params[1])
      check(cudnnConvolutionBackwardBias(h, &one, y_.get(), a.grad_output.data, &zero, bias_.get(),
                                         a.grad_params[1].data),
            "cudnnConvolutionBackwardBias");
  }

  std::string implementation() const override {
    return "cudnn:fwd=" + std::to_string(static_cast<int>(fwd_)) +
           ",bwd_data=" + std::to_string(static_cast<int>(bwd_data_)) +
           ",bwd_filter=" + std::to_string(static_cast<int>(bwd_filter_));
  }

 private:
  static Conv2dGeometry geometry(const KernelContext& k) {
    const auto [sh, sw] = defs::hw_attr(*k.attrs, "conv2d", "stride");
    const auto [ph, pw] = defs::hw_attr(*k.attrs, "conv2d", "padding");
    const auto [dh, dw] = defs::hw_attr(*k.attrs, "conv2d", "dilation");
    Conv2dGeometry g;
    g.pad_h = static_cast<int>(ph), g.pad_w = static_cast<int>(pw);
    g.stride_h = static_cast<int>(sh), g.stride_w = static_cast<int>(sw);
    g.dilation_h = static_cast<int>(dh), g.dilation_w = static_cast<int>(dw);
    g.groups = static_cast<int>(k.attrs->get_int("groups"));
    return g;
  }

  CudaContext& ctx_;
  TensorDescriptor x_, y_, bias_;
  FilterDescriptor w_;
  ConvolutionDescriptor conv_;
  bool has_bias_;
  cudnnConvolutionFwdAlgo_t fwd_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_{};
  std::size_t workspace_ = 0;
};

}  // namespace

void register_conv_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel(
      "conv2d", [&ctx](const KernelContext& k) { return std::make_unique<ConvKernel>(k, ctx); });
}

}  // namespace trainer::cuda
