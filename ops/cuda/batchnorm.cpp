// batchnorm through cuDNN (spatial mode, float32 statistics): [N, C] is seen as
// [N, C, 1, 1]. Training updates the running statistics with `momentum`
// (unbiased variance, like PyTorch) and saves the batch mean and inverse std;
// eval (or a forward with training false) uses the running statistics.
// `activation: relu` runs as its own kernel over the output, and its gradient
// (from the output) into the workspace before cuDNN's backward.
// cuDNN's statistics are over all N rows of this rank's batch, and the step is
// recorded once as a CUDA graph while valid_rows lives in device memory: a
// training program that meets short batches (KernelContext::short_batches),
// or whose batchnorm says `sync: true` in a job of several ranks (SyncBN),
// takes the own kernels of batchnorm_rows.cu instead.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "ops/collective.h"
#include "ops/cuda/activation.h"
#include "ops/cuda/batchnorm_rows.h"
#include "ops/cuda/cudnn_descriptors.h"
#include "ops/cuda/kernels.h"

namespace trainer::cuda {
namespace {

std::int64_t dim_or_one(const Shape& s, std::size_t i) {
  return i < s.size() ? s[i] : 1;
}

class BatchNormKernel final : public Kernel {
 public:
  // One value per channel in training (its unbiased variance undefined) is
  // refused with the config (train::build_model_graph); only SyncBN over
  // several ranks trains so, with the real-rows kernel. An evaluation of that
  // run on one process comes here, and its inference reads the running values.
  BatchNormKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx),
        x_(k.inputs[0][0], k.inputs[0][1], dim_or_one(k.inputs[0], 2), dim_or_one(k.inputs[0], 3)),
        stats_(1, k.inputs[0][1], 1, 1),
        channels_(k.inputs[0][1]),
        elements_(numel(k.inputs[0])),
        training_program_(k.training),
        momentum_(k.attrs->get_number("momentum")),
        eps_(std::max(k.attrs->get_number("eps"), CUDNN_BN_MIN_EPSILON)),
        relu_(epilogue_of(*k.attrs) == Epilogue::relu) {}

  std::vector<std::size_t> saved_bytes() const override {
    const auto bytes = static_cast<std::size_t>(channels_) * sizeof(float);
    return {bytes, bytes};
  }
  // Gradients nobody asked for still need a destination: weight, bias, input;
  // then the gradient before the relu. Each slice starts on a 256-byte boundary.
  std::size_t workspace_bytes() const override {
    if (!training_program_) return 0;
    return static_cast<std::size_t>(2 * aligned(channels_) + aligned(elements_) * (relu_ ? 2 : 1)) *
           sizeof(float);
  }

  void forward(const KernelArgs& a) override {
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = ctx_.cudnn.get();
    if (a.training) {
      // A recomputed forward leaves the running statistics alone: cuDNN takes
      // no pointers for them (not a zero factor, which would still write
      // 0 x batch + running, NaN when the batch statistics are).
      void* running_mean = a.update_state ? a.params[2].data : nullptr;
      void* running_var = a.update_state ? a.params[3].data : nullptr;
      check(cudnnBatchNormalizationForwardTraining(
                h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_.get(), a.inputs[0].data, x_.get(),
                a.output.data, stats_.get(), a.params[0].data, a.params[1].data,
                a.update_state ? momentum_ : 0.0, running_mean, running_var, eps_, a.saved.at(0),
                a.saved.at(1)),
            "cudnnBatchNormalizationForwardTraining");
    } else {
      check(cudnnBatchNormalizationForwardInference(
                h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_.get(), a.inputs[0].data, x_.get(),
                a.output.data, stats_.get(), a.params[0].data, a.params[1].data, a.params[2].data,
                a.params[3].data, eps_),
            "cudnnBatchNormalizationForwardInference");
    }
    if (relu_)
      activation_forward(Epilogue::relu, a.output.f32(), a.output.f32(), elements_,
                         ctx_.compute.get());
  }

  void backward(const KernelArgs& a) override {
    const float one = 1.0f, zero = 0.0f;
    float* scratch = static_cast<float*>(a.workspace);
    auto wanted = [&](const std::vector<TensorRef>& list, std::size_t i, float* fallback) {
      return i < list.size() && list[i] ? list[i].data : static_cast<void*>(fallback);
    };
    const void* dy = a.grad_output.data;
    float* const dweight = scratch;
    float* const dbias = scratch + aligned(channels_);
    float* const dx = scratch + 2 * aligned(channels_);
    if (relu_) {
      float* before_relu = dx + aligned(elements_);
      activation_backward(Epilogue::relu, a.grad_output.f32(), a.output.f32(), before_relu,
                          elements_, ctx_.compute.get());
      dy = before_relu;
    }
    check(cudnnBatchNormalizationBackward(
              ctx_.cudnn.get(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, x_.get(),
              a.inputs[0].data, x_.get(), dy, x_.get(), wanted(a.grad_inputs, 0, dx), stats_.get(),
              a.params[0].data, wanted(a.grad_params, 0, dweight), wanted(a.grad_params, 1, dbias),
              eps_, a.saved.at(0), a.saved.at(1)),
          "cudnnBatchNormalizationBackward");
  }

  std::string implementation() const override {
    return relu_ ? "cudnn:batchnorm_spatial then relu" : "cudnn:batchnorm_spatial";
  }

 private:
  // Floats rounded up to a multiple of 64 (256 bytes).
  static std::int64_t aligned(std::int64_t floats) { return (floats + 63) / 64 * 64; }

  CudaContext& ctx_;
  TensorDescriptor x_, stats_;
  std::int64_t channels_, elements_;
  bool training_program_;
  double momentum_, eps_;
  bool relu_;  // activation: relu
};

}  // namespace

void register_batchnorm_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel("batchnorm", [&ctx](const KernelContext& k) -> std::unique_ptr<Kernel> {
    // With one rank sync changes nothing.
    const bool sync = k.attrs->has("sync") && k.attrs->get_bool("sync") && k.collective &&
                      k.collective->world() > 1;
    if (k.training && (sync || k.short_batches))
      return make_real_rows_batchnorm_kernel(k, ctx, sync ? k.collective : nullptr);
    return std::make_unique<BatchNormKernel>(k, ctx);
  });
}

}  // namespace trainer::cuda
