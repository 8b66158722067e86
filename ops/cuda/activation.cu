// Activations as own element-wise maps (elementwise.cuh: float4 when aligned): relu, gelu (erf
// form, like PyTorch's default, or its tanh approximation), silu, sigmoid, tanh
// and leaky_relu. Backward of relu/sigmoid/tanh reads the output, of the
// others the input. Also the calls linear's epilogues use (activation.h).
#include <stdexcept>
#include <string>

#include "ops/cuda/activation.h"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"

namespace trainer::cuda {
namespace {

enum class Act { relu, gelu, gelu_tanh, silu, sigmoid, tanh, leaky_relu };

constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluCubic = 0.044715f;

constexpr bool reads_output(Act a) {
  return a == Act::relu || a == Act::sigmoid || a == Act::tanh;
}

template <Act A>
__device__ __forceinline__ float act(float x, float slope) {
  // NaN to 0, as oneDNN's relu (a max with 0) makes it on the CPU.
  if constexpr (A == Act::relu) return x > 0.0f ? x : 0.0f;
  if constexpr (A == Act::gelu) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  if constexpr (A == Act::gelu_tanh)
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  if constexpr (A == Act::silu) return x / (1.0f + expf(-x));
  if constexpr (A == Act::sigmoid) return 1.0f / (1.0f + expf(-x));
  if constexpr (A == Act::tanh) return tanhf(x);
  if constexpr (A == Act::leaky_relu) return x > 0.0f ? x : slope * x;
  return x;
}

// `v` is the output for relu/sigmoid/tanh and the input otherwise.
template <Act A>
__device__ __forceinline__ float act_grad(float dy, float v, float slope) {
  if constexpr (A == Act::relu) return v > 0.0f ? dy : 0.0f;
  if constexpr (A == Act::sigmoid) return dy * v * (1.0f - v);
  if constexpr (A == Act::tanh) return dy * (1.0f - v * v);
  if constexpr (A == Act::gelu) {
    const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    return dy * (cdf + v * pdf);
  }
  if constexpr (A == Act::gelu_tanh) {
    const float t = tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    return dy * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
  if constexpr (A == Act::silu) {
    const float s = 1.0f / (1.0f + expf(-v));
    return dy * s * (1.0f + v * (1.0f - s));
  }
  if constexpr (A == Act::leaky_relu) return v > 0.0f ? dy : slope * dy;
  return dy;
}

// The element-wise maps (elementwise.cuh): y = act(x), and dx = act'(.) dy
// where v is the output for relu/sigmoid/tanh and the input otherwise.
template <Act A>
struct Forward {
  float slope;
  __device__ float operator()(float x, float) const { return act<A>(x, slope); }
};
template <Act A>
struct Backward {
  float slope;
  __device__ float operator()(float dy, float v) const { return act_grad<A>(dy, v, slope); }
};

template <Act A>
void launch_forward(const float* x, float* y, std::int64_t n, float slope, cudaStream_t stream) {
  map(x, nullptr, y, n, Forward<A>{slope}, stream, "activation forward");
}

template <Act A>
void launch_backward(const float* dy, const float* v, float* dx, std::int64_t n, float slope,
                     cudaStream_t stream) {
  map(dy, v, dx, n, Backward<A>{slope}, stream, "activation backward");
}

template <Act A>
class ActivationKernel final : public Kernel {
 public:
  ActivationKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx),
        n_(numel(k.output)),
        slope_(A == Act::leaky_relu ? static_cast<float>(k.attrs->get_number("slope")) : 0.0f) {}

  void forward(const KernelArgs& a) override {
    launch_forward<A>(a.inputs[0].f32(), a.output.f32(), n_, slope_, ctx_.compute.get());
  }
  void backward(const KernelArgs& a) override {
    if (a.grad_inputs.empty() || !a.grad_inputs[0]) return;
    const float* v = reads_output(A) ? a.output.f32() : a.inputs[0].f32();
    launch_backward<A>(a.grad_output.f32(), v, a.grad_inputs[0].f32(), n_, slope_,
                       ctx_.compute.get());
  }
  std::string implementation() const override { return "cuda:elementwise"; }

 private:
  CudaContext& ctx_;
  std::int64_t n_;
  float slope_;
};

template <Act A>
void add(Backend& backend, CudaContext& ctx, const char* name) {
  backend.add_kernel(name, [&ctx](const KernelContext& k) {
    return std::make_unique<ActivationKernel<A>>(k, ctx);
  });
}

}  // namespace

void activation_forward(Epilogue act, const float* x, float* y, std::int64_t n,
                        cudaStream_t stream) {
  switch (act) {
    case Epilogue::relu:
      return launch_forward<Act::relu>(x, y, n, 0.0f, stream);
    case Epilogue::gelu:
      return launch_forward<Act::gelu>(x, y, n, 0.0f, stream);
    case Epilogue::gelu_tanh:
      return launch_forward<Act::gelu_tanh>(x, y, n, 0.0f, stream);
    case Epilogue::none:
      break;
  }
  throw std::logic_error("activation_forward: no activation");
}

void activation_backward(Epilogue act, const float* dy, const float* v, float* dx, std::int64_t n,
                         cudaStream_t stream) {
  switch (act) {
    case Epilogue::relu:
      return launch_backward<Act::relu>(dy, v, dx, n, 0.0f, stream);
    case Epilogue::gelu:
      return launch_backward<Act::gelu>(dy, v, dx, n, 0.0f, stream);
    case Epilogue::gelu_tanh:
      return launch_backward<Act::gelu_tanh>(dy, v, dx, n, 0.0f, stream);
    case Epilogue::none:
      break;
  }
  throw std::logic_error("activation_backward: no activation");
}

void register_activation_kernels(Backend& backend, CudaContext& ctx) {
  add<Act::relu>(backend, ctx, "relu");
  backend.add_kernel("gelu", [&ctx](const KernelContext& k) -> std::unique_ptr<Kernel> {
    if (*epilogue_for_layer("gelu", *k.attrs) == Epilogue::gelu_tanh)
      return std::make_unique<ActivationKernel<Act::gelu_tanh>>(k, ctx);
    return std::make_unique<ActivationKernel<Act::gelu>>(k, ctx);
  });
  add<Act::silu>(backend, ctx, "silu");
  add<Act::sigmoid>(backend, ctx, "sigmoid");
  add<Act::tanh>(backend, ctx, "tanh");
  add<Act::leaky_relu>(backend, ctx, "leaky_relu");
}

}  // namespace trainer::cuda
