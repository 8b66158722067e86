// linear through cuBLASLt: y = x W^T + b with the bias fused as an epilogue,
// dx = dy W, and dW = dy^T x with the bias gradient fused (BGRADB) where
// cuBLASLt offers it, own row kernels otherwise. Row-major tensors are seen by
// cuBLAS (column-major) as their transposes. Algorithms are chosen once here.
#include <memory>
#include <string>

#include "ops/cuda/cublaslt.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_bias.h"

namespace trainer::cuda {
namespace {

constexpr std::size_t kLtWorkspace = 8u << 20;

struct GemmShape {
  cublasOperation_t trans_a, trans_b;
  std::int64_t m, n, k;  // D is m x n (column-major), op(A) m x k, op(B) k x n
  std::int64_t lda, ldb, ldd;
};

// One GEMM of fixed shape with its chosen algorithm (or none: `ok` false).
struct GemmPlan {
  GemmPlan(cublasLtHandle_t lt, cublasComputeType_t compute, const GemmShape& s,
           cublasLtEpilogue_t epilogue, bool deterministic)
      : desc(compute, CUDA_R_32F),
        a(CUDA_R_32F, s.trans_a == CUBLAS_OP_N ? s.m : s.k, s.trans_a == CUBLAS_OP_N ? s.k : s.m,
          s.lda),
        b(CUDA_R_32F, s.trans_b == CUBLAS_OP_N ? s.k : s.n, s.trans_b == CUBLAS_OP_N ? s.n : s.k,
          s.ldb),
        d(CUDA_R_32F, s.m, s.n, s.ldd),
        epilogue(epilogue) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, s.trans_a);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, s.trans_b);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    MatmulPreference pref(kLtWorkspace);
    if (deterministic)  // no split-K reductions through atomics
      pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
               static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        lt, desc.get(), a.get(), b.get(), d.get(), d.get(), pref.get(), 1, &result, &found);
    ok = status == CUBLAS_STATUS_SUCCESS && found > 0;
    if (ok) algo = result.algo;
  }

  void run(cublasLtHandle_t lt, const void* a_ptr, const void* b_ptr, void* d_ptr,
           const void* epilogue_ptr, void* workspace, cudaStream_t stream) {
    if (epilogue_ptr) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, epilogue_ptr);
    const float one = 1.0f, zero = 0.0f;
    check(cublasLtMatmul(lt, desc.get(), &one, a_ptr, a.get(), b_ptr, b.get(), &zero, d_ptr,
                         d.get(), d_ptr, d.get(), &algo, workspace, kLtWorkspace, stream),
          "cublasLtMatmul");
  }

  MatmulDesc desc;
  MatrixLayout a, b, d;
  cublasLtEpilogue_t epilogue;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
};

std::unique_ptr<GemmPlan> plan_with_fallback(cublasLtHandle_t lt, cublasComputeType_t compute,
                                             const GemmShape& s, cublasLtEpilogue_t preferred,
                                             bool deterministic, const char* what) {
  if (preferred != CUBLASLT_EPILOGUE_DEFAULT) {
    auto plan = std::make_unique<GemmPlan>(lt, compute, s, preferred, deterministic);
    if (plan->ok) return plan;
  }
  auto plan = std::make_unique<GemmPlan>(lt, compute, s, CUBLASLT_EPILOGUE_DEFAULT, deterministic);
  if (!plan->ok)
    throw std::runtime_error(std::string("linear: cuBLASLt has no algorithm for the ") + what +
                             " GEMM [" + std::to_string(s.m) + " x " + std::to_string(s.k) +
                             "] x [" + std::to_string(s.k) + " x " + std::to_string(s.n) + "]");
  return plan;
}

class LinearKernel final : public Kernel {
 public:
  LinearKernel(const KernelContext& k, CudaContext& ctx) : ctx_(ctx) {
    rows_ = k.inputs.at(0)[0];
    out_ = k.output.at(1);
    in_ = rows_ ? numel(k.inputs.at(0)) / rows_ : 0;
    has_bias_ = k.param_decls.size() > 1;
    const cublasComputeType_t compute =
        k.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtHandle_t lt = ctx.lt.get();
    // y^T [out, N] = W^T^T [out, in] . x^T [in, N]
    forward_ = plan_with_fallback(
        lt, compute, {CUBLAS_OP_T, CUBLAS_OP_N, out_, rows_, in_, in_, in_, out_},
        has_bias_ ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, k.deterministic, "forward");
    if (!k.training) return;
    // dx^T [in, N] = W^T [in, out] . dy^T [out, N]
    backward_data_ = plan_with_fallback(
        lt, compute, {CUBLAS_OP_N, CUBLAS_OP_N, in_, rows_, out_, in_, out_, in_},
        CUBLASLT_EPILOGUE_DEFAULT, k.deterministic, "input-gradient");
    // dW^T [in, out] = x^T [in, N] . dy [N, out]; BGRADB sums dy over N into db.
    backward_weight_ = plan_with_fallback(
        lt, compute, {CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, rows_, in_, out_, in_},
        has_bias_ ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT, k.deterministic,
        "weight-gradient");
  }
  // cuBLASLt's workspace, then room for a bias gradient nobody asked for (BGRADB writes one).
  std::size_t workspace_bytes() const override {
    return kLtWorkspace + static_cast<std::size_t>(out_) * sizeof(float);
  }

  void forward(const KernelArgs& a) override {
    if (rows_ == 0) return;
    cudaStream_t stream = ctx_.compute.get();
    const bool fused = forward_->epilogue == CUBLASLT_EPILOGUE_BIAS;
    forward_->run(ctx_.lt.get(), a.params[0].data, a.inputs[0].data, a.output.data,
                  fused ? a.params[1].data : nullptr, a.workspace, stream);
    if (has_bias_ && !fused) add_bias_rows(a.output.f32(), a.params[1].f32(), rows_, out_, stream);
  }

  void backward(const KernelArgs& a) override {
    cudaStream_t stream = ctx_.compute.get();
    if (!a.grad_inputs.empty() && a.grad_inputs[0])
      backward_data_->run(ctx_.lt.get(), a.params[0].data, a.grad_output.data,
                          a.grad_inputs[0].data, nullptr, a.workspace, stream);
    const bool want_w = a.grad_params.size() > 0 && a.grad_params[0];
    const bool want_b = has_bias_ && a.grad_params.size() > 1 && a.grad_params[1];
    const bool fused = backward_weight_->epilogue == CUBLASLT_EPILOGUE_BGRADB;
    if (want_w)
      backward_weight_->run(ctx_.lt.get(), a.inputs[0].data, a.grad_output.data,
                            a.grad_params[0].data, fused ? bias_grad_target(a) : nullptr,
                            a.workspace, stream);
    if (want_b && (!fused || !want_w))
      bias_grad_rows(a.grad_output.f32(), a.grad_params[1].f32(), rows_, out_, stream);
  }

  std::string implementation() const override {
    return std::string("cublasLt:") +
           (forward_->epilogue == CUBLASLT_EPILOGUE_BIAS ? "bias_epilogue" : "gemm");
  }

 private:
  void* bias_grad_target(const KernelArgs& a) const {
    if (a.grad_params.size() > 1 && a.grad_params[1]) return a.grad_params[1].data;
    return static_cast<char*>(a.workspace) + kLtWorkspace;
  }

  CudaContext& ctx_;
  std::int64_t rows_ = 0, in_ = 0, out_ = 0;
  bool has_bias_ = false;
  std::unique_ptr<GemmPlan> forward_, backward_data_, backward_weight_;
};

}  // namespace

void register_linear_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel(
      "linear", [&ctx](const KernelContext& k) { return std::make_unique<LinearKernel>(k, ctx); });
}

}  // namespace trainer::cuda
