// conv2d through cuDNN (legacy convolution API): forward, backward data and
// backward filter with algorithms chosen once here, within a workspace limit
// (cudnnFind* when autotuning, the _v7 heuristics otherwise; only deterministic
// algorithms when asked; the workspace asked again for the descriptor's math
// type; cached per shape for the process), and the bias by cudnnAddTensor /
// cudnnConvolutionBackwardBias. Under bf16/fp16 mixed precision cuDNN convolves 16-bit tensors with
// float accumulation: x, dy and the weights (unless they arrive as their bf16 copy) are narrowed
// into the workspace. cuDNN writes y, dx and dW in the operands' 16-bit type (as autocast
// frameworks get them); they are widened to float32.
#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "ops/cuda/cudnn_descriptors.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/low_precision.h"
#include "ops/defs/def_helpers.h"

namespace trainer::cuda {
namespace {

constexpr std::size_t kWorkspaceLimit = 256u << 20;

[[noreturn]] void no_algorithm(const char* pass, const KernelContext& k) {
  throw std::runtime_error(std::string("conv2d: cuDNN offers no ") + pass +
                           " algorithm for input " + to_string(k.inputs.at(0)) + " -> " +
                           to_string(k.output) + " within " +
                           std::to_string(kWorkspaceLimit >> 20) + " MiB of workspace" +
                           (k.deterministic ? " that is deterministic" : ""));
}

// The first usable candidate of one pass, in cuDNN's order: it succeeded, is
// deterministic if asked, and its workspace fits. Candidates rated under the
// descriptor's own math type come first (cuDNN rates each algorithm under a
// math type of its choosing, but it runs under the descriptor's), and the
// workspace is asked of cuDNN again for the descriptor as it will run:
// `workspace_of(algo, &bytes)`. A candidate it refuses is passed over. Sets
// `algo` and raises `workspace` to what it needs; throws when none is usable.
template <typename Perf, typename Algo, typename WorkspaceQuery>
void pick(const Perf* perfs, int count, const KernelContext& k, cudnnMathType_t math,
          const char* pass, WorkspaceQuery workspace_of, Algo& algo, std::size_t& workspace) {
  for (const bool same_math : {true, false})
    for (int i = 0; i < count; ++i) {
      const Perf& p = perfs[i];
      if (p.status != CUDNN_STATUS_SUCCESS || (p.mathType == math) != same_math) continue;
      if (k.deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
      std::size_t bytes = 0;
      if (workspace_of(p.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
      bytes = std::max(bytes, p.memory);
      if (bytes > kWorkspaceLimit) continue;
      algo = p.algo;
      workspace = std::max(workspace, bytes);
      return;
    }
  no_algorithm(pass, k);
}

class ConvKernel final : public Kernel {
 public:
  ConvKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx),
        low_(k.compute != DType::f32),
        low_type_(k.compute),
        weights_arrive_low_(low_ && k.param_decls.at(0).dtype == k.compute),
        x_(k.inputs[0][0], k.inputs[0][1], k.inputs[0][2], k.inputs[0][3], operand_type()),
        y_(k.output[0], k.output[1], k.output[2], k.output[3], operand_type()),
        y_f32_(k.output[0], k.output[1], k.output[2], k.output[3]),
        bias_(1, k.output[1], 1, 1),
        w_(k.param_decls.at(0).shape[0], k.param_decls[0].shape[1], k.param_decls[0].shape[2],
           k.param_decls[0].shape[3], operand_type()),
        conv_(geometry(k), k.allow_tf32, low_),
        has_bias_(k.param_decls.size() > 1),
        x_count_(numel(k.inputs[0])),
        y_count_(numel(k.output)),
        w_count_(numel(k.param_decls[0].shape)),
        algorithms_(cached_algorithms(k)) {}

  // cuDNN's workspace, then (mixed precision) the 16-bit x, y or dy, weights,
  // dx and dW.
  std::size_t workspace_bytes() const override {
    if (!low_) return algorithms_.workspace;
    return library_bytes() + 2 * low_bytes(x_count_) + low_bytes(y_count_) +
           2 * low_bytes(w_count_);
  }

  void forward(const KernelArgs& a) override {
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = ctx_.cudnn.get();
    void* y = low_ ? slice(a, Slice::y) : a.output.data;
    check(cudnnConvolutionForward(h, &one, x_.get(), operand_x(a), w_.get(), weights(a),
                                  conv_.get(), algorithms_.fwd, a.workspace, algorithms_.workspace,
                                  &zero, y_.get(), y),
          "cudnnConvolutionForward");
    if (low_) widen(y, a.output.f32(), y_count_, low_type_, ctx_.compute.get());
    if (has_bias_)
      check(
          cudnnAddTensor(h, &one, bias_.get(), a.params[1].data, &one, y_f32_.get(), a.output.data),
          "cudnnAddTensor(conv2d bias)");
  }

  void backward(const KernelArgs& a) override {
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = ctx_.cudnn.get();
    const bool want_x = !a.grad_inputs.empty() && a.grad_inputs[0];
    const bool want_w = a.grad_params.size() > 0 && a.grad_params[0];
    const void* dy = want_x || want_w ? operand_dy(a) : nullptr;
    if (want_x) {
      void* dx = low_ ? slice(a, Slice::dx) : a.grad_inputs[0].data;
      check(cudnnConvolutionBackwardData(h, &one, w_.get(), weights(a), y_.get(), dy, conv_.get(),
                                         algorithms_.bwd_data, a.workspace, algorithms_.workspace,
                                         &zero, x_.get(), dx),
            "cudnnConvolutionBackwardData");
      if (low_) widen(dx, a.grad_inputs[0].f32(), x_count_, low_type_, ctx_.compute.get());
    }
    if (want_w) {
      void* dw = low_ ? slice(a, Slice::dw) : a.grad_params[0].data;
      check(cudnnConvolutionBackwardFilter(h, &one, x_.get(), operand_x(a), y_.get(), dy,
                                           conv_.get(), algorithms_.bwd_filter, a.workspace,
                                           algorithms_.workspace, &zero, w_.get(), dw),
            "cudnnConvolutionBackwardFilter");
      if (low_) widen(dw, a.grad_params[0].f32(), w_count_, low_type_, ctx_.compute.get());
    }
    if (has_bias_ && a.grad_params.size() > 1 && a.grad_params[1])
      check(cudnnConvolutionBackwardBias(h, &one, y_f32_.get(), a.grad_output.data, &zero,
                                         bias_.get(), a.grad_params[1].data),
            "cudnnConvolutionBackwardBias");
  }

  std::string implementation() const override {
    return std::string("cudnn:") + (low_ ? std::string(dtype_name(low_type_)) + ":" : "") +
           "fwd=" + std::to_string(static_cast<int>(algorithms_.fwd)) +
           ",bwd_data=" + std::to_string(static_cast<int>(algorithms_.bwd_data)) +
           ",bwd_filter=" + std::to_string(static_cast<int>(algorithms_.bwd_filter));
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

  struct Algorithms {
    cudnnConvolutionFwdAlgo_t fwd{};
    cudnnConvolutionBwdDataAlgo_t bwd_data{};
    cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
    std::size_t workspace = 0;
  };

  // The algorithms of this shape, chosen once per process: convolutions of the
  // same shape (repeated blocks, and the compiles of the memory estimate and
  // of micro_batch_size: auto) share one search.
  Algorithms cached_algorithms(const KernelContext& k) const {
    static std::mutex mutex;
    static std::map<std::string, Algorithms> cache;
    const auto g = geometry(k);
    std::string key = std::to_string(ctx_.device.index) + ":" + to_string(k.inputs[0]) + ">" +
                      to_string(k.param_decls[0].shape) + ">" + to_string(k.output);
    for (int v : {g.pad_h, g.pad_w, g.stride_h, g.stride_w, g.dilation_h, g.dilation_w, g.groups})
      key += "," + std::to_string(v);
    key += std::string(":") + std::string(dtype_name(k.compute)) + (k.allow_tf32 ? ":tf32" : "") +
           (k.deterministic ? ":det" : "") + (k.autotune ? ":tuned" : "") +
           (k.training ? ":train" : ":eval");
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, choose_algorithms(k)).first;
    return it->second;
  }

  Algorithms choose_algorithms(const KernelContext& k) const {
    Algorithms chosen;
    cudnnHandle_t h = ctx_.cudnn.get();
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
      pick(
          perf, n, k, conv_.math(), "forward",
          [&](auto algo, std::size_t* b) {
            return cudnnGetConvolutionForwardWorkspaceSize(h, x_.get(), w_.get(), conv_.get(),
                                                           y_.get(), algo, b);
          },
          chosen.fwd, chosen.workspace);
    }
    if (!k.training) return chosen;
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
      pick(
          perf, n, k, conv_.math(), "backward-data",
          [&](auto algo, std::size_t* b) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_.get(), y_.get(), conv_.get(),
                                                                x_.get(), algo, b);
          },
          chosen.bwd_data, chosen.workspace);
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
      pick(
          perf, n, k, conv_.math(), "backward-filter",
          [&](auto algo, std::size_t* b) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x_.get(), y_.get(),
                                                                  conv_.get(), w_.get(), algo, b);
          },
          chosen.bwd_filter, chosen.workspace);
    }
    return chosen;
  }

  cudnnDataType_t operand_type() const { return low_ ? cudnn_type(low_type_) : CUDNN_DATA_FLOAT; }
  std::size_t library_bytes() const { return (algorithms_.workspace + 255) / 256 * 256; }
  // The workspace slices of the 16-bit operands and results.
  enum class Slice { x, y, w, dx, dw };
  void* slice(const KernelArgs& a, Slice which) const {
    std::size_t at = library_bytes();
    const std::size_t sizes[] = {low_bytes(x_count_), low_bytes(y_count_), low_bytes(w_count_),
                                 low_bytes(x_count_), low_bytes(w_count_)};
    for (int s = 0; s < static_cast<int>(which); ++s) at += sizes[s];
    return static_cast<char*>(a.workspace) + at;
  }
  // The convolution operands: as they are in float32; under mixed precision
  // narrowed into the workspace (again at each call: the workspace is shared).
  const void* operand_x(const KernelArgs& a) const {
    return operand(a.inputs[0], low_type_, slice(a, Slice::x), ctx_.compute.get());
  }
  const void* operand_dy(const KernelArgs& a) const {
    return operand(a.grad_output, low_type_, slice(a, Slice::y), ctx_.compute.get());
  }
  const void* weights(const KernelArgs& a) const {
    if (weights_arrive_low_) return a.params[0].data;
    return operand(a.params[0], low_type_, slice(a, Slice::w), ctx_.compute.get());
  }

  CudaContext& ctx_;
  bool low_;                 // bf16/fp16 operands
  DType low_type_;           // their type
  bool weights_arrive_low_;  // the weights come as their bf16 copy
  TensorDescriptor x_, y_, y_f32_, bias_;
  FilterDescriptor w_;
  ConvolutionDescriptor conv_;
  bool has_bias_;
  std::int64_t x_count_, y_count_, w_count_;
  Algorithms algorithms_;
};

}  // namespace

void register_conv_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel(
      "conv2d", [&ctx](const KernelContext& k) { return std::make_unique<ConvKernel>(k, ctx); });
}

}  // namespace trainer::cuda
