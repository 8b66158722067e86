// linear through cuBLASLt: y = x W^T + b with the bias fused as an epilogue,
// dx = dy W, and dW = dy^T x with the bias gradient fused (BGRADB) where
// cuBLASLt offers it and the run is not deterministic, own row kernels
// otherwise. Row-major tensors are seen by
// cuBLAS (column-major) as their transposes. Algorithms are chosen once here.
// Under bf16/fp16 mixed precision the GEMMs take 16-bit operands (x, dy and
// the weights, narrowed into the workspace unless the weights arrive as their
// bf16 copy; x is narrowed once, into a saved buffer the weight gradient reads
// again) and write float32 with float32 accumulation; the float32 bias is
// still added in the epilogue, and its gradient summed by BGRADB from the
// narrowed dy.
// An epilogue activation (the `activation` attribute) goes into the forward
// GEMM with the bias: RELU_BIAS, and GELU_AUX_BIAS for gelu_tanh, which
// writes the pre-activation to a saved buffer for the backward. Otherwise (the
// erf gelu, or a shape cuBLASLt refuses) it runs as its own kernel after the
// GEMM. The backward turns dy into the
// pre-activation's gradient in the workspace first, then runs the GEMMs on it.
// cuBLASLt's relu epilogue keeps a NaN where oneDNN's relu makes it 0: on the
// GPU such a NaN reaches the loss, and the run stops on it.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cuda/activation.h"
#include "ops/cuda/check.h"
#include "ops/cuda/cublaslt.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_bias.h"
#include "ops/cuda/low_precision.h"

namespace trainer::cuda {
namespace {

// cuBLASLt's workspace: what NVIDIA recommends per architecture (32 MiB from
// Hopper on, 4 MiB before it; we give those 8 MiB). Less would quietly rule
// out the split-K and stream-K kernels that small-batch, large-K GEMMs need.
std::size_t lt_workspace_bytes(int device) {
  int major = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
        "cudaDeviceGetAttribute(compute capability)");
  return major >= 9 ? std::size_t{32} << 20 : std::size_t{8} << 20;
}

struct GemmShape {
  cublasOperation_t trans_a, trans_b;
  std::int64_t m, n, k;  // D is m x n (column-major), op(A) m x k, op(B) k x n
  std::int64_t lda, ldb, ldd;
};

bool has_bias_epilogue(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_activation_epilogue(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux_output(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
// The epilogues that read or write the vector at BIAS_POINTER.
bool uses_bias_pointer(cublasLtEpilogue_t e) {
  return has_bias_epilogue(e) || e == CUBLASLT_EPILOGUE_BGRADB;
}

// The alignment every pointer we hand cuBLASLt has (the arena's and the
// workspace's slices), and a stand-in pointer with exactly that alignment:
// the heuristic reads the bias and aux pointers' values to learn theirs.
constexpr std::uintptr_t kOperandAlignment = 64;
const void* aligned_stand_in() {
  return reinterpret_cast<const void*>(kOperandAlignment);
}

const char* epilogue_label(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BIAS:
      return "BIAS";
    case CUBLASLT_EPILOGUE_RELU:
      return "RELU";
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_BGRADB:
      return "BGRADB";
    default:
      return "DEFAULT";
  }
}

// One GEMM of fixed shape with its chosen algorithm (or none: `ok` false,
// and `status` says why when the heuristic failed rather than found nothing).
struct GemmPlan {
  // `operands`: the type of A and B (D is always float32); `what`: which GEMM
  // ("forward"), for errors.
  GemmPlan(cublasLtHandle_t lt, cublasComputeType_t compute, cudaDataType_t operands,
           const GemmShape& s, cublasLtEpilogue_t epilogue, bool deterministic,
           std::size_t workspace_bytes, const char* what)
      : desc(compute, CUDA_R_32F),
        a(operands, s.trans_a == CUBLAS_OP_N ? s.m : s.k, s.trans_a == CUBLAS_OP_N ? s.k : s.m,
          s.lda),
        b(operands, s.trans_b == CUBLAS_OP_N ? s.k : s.n, s.trans_b == CUBLAS_OP_N ? s.n : s.k,
          s.ldb),
        d(CUDA_R_32F, s.m, s.n, s.ldd),
        epilogue(epilogue),
        workspace_bytes(workspace_bytes),
        label(std::string(what) + " GEMM [" + std::to_string(s.m) + " x " + std::to_string(s.k) +
              "] x [" + std::to_string(s.k) + " x " + std::to_string(s.n) + "]" +
              (operands == CUDA_R_32F ? "" : " with 16-bit operands")) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, s.trans_a);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, s.trans_b);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    // The pre-activation lies like D (row-major [N, out]: column-major with ld out).
    if (has_aux_output(epilogue)) desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, s.ldd);
    if (uses_bias_pointer(epilogue)) {
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, aligned_stand_in());
      // float32, D's type: the documented default, set outright so that no
      // library version reads a 16-bit bias under 16-bit operands.
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(CUDA_R_32F));
    }
    if (has_aux_output(epilogue))
      desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aligned_stand_in());
    MatmulPreference pref(workspace_bytes);
    // The heuristic otherwise assumes 256-byte aligned matrices; ours start at
    // 64-byte arena offsets (kOperandAlignment). 16 bytes is what the
    // tensor-core kernels need.
    for (const auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      pref.set(attr, std::uint32_t{16});
    if (deterministic)  // no split-K: one summation order for every shape and run
      pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
               static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    status = cublasLtMatmulAlgoGetHeuristic(lt, desc.get(), a.get(), b.get(), d.get(), d.get(),
                                            pref.get(), 1, &result, &found);
    ok = status == CUBLAS_STATUS_SUCCESS && found > 0;
    if (ok) algo = result.algo;
  }

  // `bias`: the bias (or bias gradient) vector of a bias epilogue; `aux`: where
  // a GELU_AUX epilogue writes the pre-activation.
  void run(cublasLtHandle_t lt, const void* a_ptr, const void* b_ptr, void* d_ptr, const void* bias,
           void* workspace, cudaStream_t stream, void* aux = nullptr) {
    if (bias) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    if (aux) desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t queued =
        cublasLtMatmul(lt, desc.get(), &one, a_ptr, a.get(), b_ptr, b.get(), &zero, d_ptr, d.get(),
                       d_ptr, d.get(), &algo, workspace, workspace_bytes, stream);
    if (queued != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("linear: cublasLtMatmul failed for the " + label + " (epilogue " +
                               epilogue_label(epilogue) + "): " + cublas_status_text(queued));
  }

  MatmulDesc desc;
  MatrixLayout a, b, d;
  cublasLtEpilogue_t epilogue;
  std::size_t workspace_bytes;  // what the heuristic may choose for, and what run() hands over
  std::string label;            // "forward GEMM [16 x 784] x [784 x 128]"
  cublasLtMatmulAlgo_t algo{};
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  bool ok = false;
};

// The first of `preferred` (then DEFAULT) that cuBLASLt has an algorithm for.
std::unique_ptr<GemmPlan> plan_with_fallback(cublasLtHandle_t lt, cublasComputeType_t compute,
                                             cudaDataType_t operands, const GemmShape& s,
                                             const std::vector<cublasLtEpilogue_t>& preferred,
                                             bool deterministic, std::size_t workspace_bytes,
                                             const char* what) {
  for (cublasLtEpilogue_t epilogue : preferred) {
    auto plan = std::make_unique<GemmPlan>(lt, compute, operands, s, epilogue, deterministic,
                                           workspace_bytes, what);
    if (plan->ok) return plan;
  }
  auto plan = std::make_unique<GemmPlan>(lt, compute, operands, s, CUBLASLT_EPILOGUE_DEFAULT,
                                         deterministic, workspace_bytes, what);
  if (!plan->ok)
    throw std::runtime_error(
        "linear: cuBLASLt has no algorithm for the " + plan->label +
        (plan->status == CUBLAS_STATUS_SUCCESS
             ? std::string()
             : ": the heuristic answered " + cublas_status_text(plan->status)));
  return plan;
}

class LinearKernel final : public Kernel {
 public:
  LinearKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx), lt_workspace_(lt_workspace_bytes(ctx.device.index)) {
    rows_ = k.inputs.at(0)[0];
    out_ = k.output.at(1);
    in_ = rows_ ? numel(k.inputs.at(0)) / rows_ : 0;
    has_bias_ = k.param_decls.size() > 1;
    epilogue_ = epilogue_of(*k.attrs);
    low_ = k.compute != DType::f32;
    if (low_) {
      low_type_ = k.compute;
      weights_arrive_low_ = k.param_decls.at(0).dtype == k.compute;
    }
    const cublasComputeType_t compute =
        !low_ && k.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cudaDataType_t operands = low_ ? cuda_type(low_type_) : CUDA_R_32F;
    // The bias vector has D's type, float32, whatever the operands are: the
    // forward adds it (and applies the activation) in the epilogue, and the
    // weight-gradient GEMM sums the bias gradient (BGRADB), at every
    // precision. Under 16-bit operands that sums the narrowed dy, as the CPU's
    // bf16 backward-weights and autocast frameworks do. Under `deterministic`
    // the own row kernel sums it in a fixed order instead: cuBLASLt does not
    // say that BGRADB's reduction gives the same bits every run.
    const bool fuse_bias_grad = has_bias_ && !k.deterministic;
    cublasLtHandle_t lt = ctx.lt.get();
    // y^T [out, N] = W^T^T [out, in] . x^T [in, N]
    forward_ = plan_with_fallback(lt, compute, operands,
                                  {CUBLAS_OP_T, CUBLAS_OP_N, out_, rows_, in_, in_, in_, out_},
                                  forward_epilogues(), k.deterministic, lt_workspace_, "forward");
    if (!k.training) return;
    keep_x_low_ = low_;
    // dx^T [in, N] = W^T [in, out] . dy^T [out, N]
    backward_data_ = plan_with_fallback(
        lt, compute, operands, {CUBLAS_OP_N, CUBLAS_OP_N, in_, rows_, out_, in_, out_, in_}, {},
        k.deterministic, lt_workspace_, "input-gradient");
    // dW^T [in, out] = x^T [in, N] . dy [N, out]; BGRADB sums dy over N into db.
    backward_weight_ = plan_with_fallback(
        lt, compute, operands, {CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, rows_, in_, out_, in_},
        fuse_bias_grad ? std::vector{CUBLASLT_EPILOGUE_BGRADB} : std::vector<cublasLtEpilogue_t>{},
        k.deterministic, lt_workspace_, "weight-gradient");
  }

  // Kept from forward to backward: the pre-activation of a gelu, then under
  // mixed precision the 16-bit x the forward narrowed (the weight-gradient
  // GEMM reads it instead of narrowing x again).
  std::vector<std::size_t> saved_bytes() const override {
    std::vector<std::size_t> bytes;
    if (epilogue_keeps_input(epilogue_))
      bytes.push_back(static_cast<std::size_t>(rows_ * out_) * sizeof(float));
    if (keep_x_low_) bytes.push_back(low_bytes(rows_ * in_));
    return bytes;
  }
  // cuBLASLt's workspace, room for a bias gradient nobody asked for (BGRADB
  // writes one), the pre-activation's gradient (with an epilogue), then the
  // 16-bit operands: x, dy and (when they arrive as float32) the weights.
  std::size_t workspace_bytes() const override {
    std::size_t bytes = lt_workspace_ + bias_scratch_bytes() + pre_activation_grad_bytes();
    if (low_)
      bytes += low_bytes(rows_ * in_) + low_bytes(rows_ * out_) +
               (weights_arrive_low_ ? 0 : low_bytes(out_ * in_));
    return bytes;
  }

  void forward(const KernelArgs& a) override {
    if (rows_ == 0) return;
    cudaStream_t stream = ctx_.compute.get();
    const bool bias_fused = has_bias_epilogue(forward_->epilogue);
    const bool activation_fused = has_activation_epilogue(forward_->epilogue);
    // The GEMM writes y, unless a gelu runs after it: then the pre-activation.
    float* y = a.output.f32();
    float* z = epilogue_keeps_input(epilogue_) && !activation_fused ? pre_activation(a) : y;
    const void* x =
        keep_x_low_ ? operand(a.inputs[0], low_type_, a.saved.back(), stream) : operand_x(a);
    forward_->run(ctx_.lt.get(), weights(a), x, z, bias_fused ? a.params[1].data : nullptr,
                  a.workspace, stream,
                  has_aux_output(forward_->epilogue) ? pre_activation(a) : nullptr);
    if (has_bias_ && !bias_fused) add_bias_rows(z, a.params[1].f32(), rows_, out_, stream);
    if (epilogue_ != Epilogue::none && !activation_fused)
      activation_forward(epilogue_, z, y, rows_ * out_, stream);
  }

  void backward(const KernelArgs& a) override {
    cudaStream_t stream = ctx_.compute.get();
    const bool want_x = !a.grad_inputs.empty() && a.grad_inputs[0];
    const bool want_w = a.grad_params.size() > 0 && a.grad_params[0];
    const bool want_b = has_bias_ && a.grad_params.size() > 1 && a.grad_params[1];
    // The gradient the GEMMs see: dy, or with an epilogue the pre-activation's.
    TensorRef grad = a.grad_output;
    if (epilogue_ != Epilogue::none && (want_x || want_w || want_b)) {
      grad.data = pre_activation_grad(a);
      const float* v = epilogue_reads_output(epilogue_) ? a.output.f32() : pre_activation(a);
      activation_backward(epilogue_, a.grad_output.f32(), v, grad.f32(), rows_ * out_, stream);
    }
    const void* dy = want_x || want_w ? operand_dy(grad, a) : nullptr;
    if (want_x)
      backward_data_->run(ctx_.lt.get(), weights(a), dy, a.grad_inputs[0].data, nullptr,
                          a.workspace, stream);
    const bool fused = backward_weight_->epilogue == CUBLASLT_EPILOGUE_BGRADB;
    if (want_w)
      backward_weight_->run(ctx_.lt.get(), keep_x_low_ ? a.saved.back() : operand_x(a), dy,
                            a.grad_params[0].data, fused ? bias_grad_target(a) : nullptr,
                            a.workspace, stream);
    if (want_b && (!fused || !want_w))
      bias_grad_rows(grad.f32(), a.grad_params[1].f32(), rows_, out_, stream);
  }

  // "cublasLt:gemm+bias+relu", "cublasLt:bf16_gemm+gelu_tanh": what runs in
  // the GEMM; "then gelu" for an activation run after it. In training, with
  // a bias, ", dW gemm+db" when the weight-gradient GEMM sums the bias
  // gradient, ", dW gemm then db" when a kernel does after it.
  std::string implementation() const override {
    std::string name = "cublasLt:";
    if (low_) name += std::string(dtype_name(low_type_)) + "_";
    name += "gemm";
    if (has_bias_epilogue(forward_->epilogue)) name += "+bias";
    if (epilogue_ != Epilogue::none)
      name += (has_activation_epilogue(forward_->epilogue) ? "+" : " then ") +
              std::string(epilogue_name(epilogue_));
    if (backward_weight_ && has_bias_)
      name += backward_weight_->epilogue == CUBLASLT_EPILOGUE_BGRADB ? ", dW gemm+db"
                                                                     : ", dW gemm then db";
    return name;
  }

 private:
  std::size_t bias_scratch_bytes() const {
    return (static_cast<std::size_t>(out_) * sizeof(float) + 255) / 256 * 256;
  }
  std::size_t pre_activation_grad_bytes() const {
    if (epilogue_ == Epilogue::none) return 0;
    return (static_cast<std::size_t>(rows_ * out_) * sizeof(float) + 255) / 256 * 256;
  }
  float* pre_activation_grad(const KernelArgs& a) const {
    return reinterpret_cast<float*>(static_cast<char*>(a.workspace) + lt_workspace_ +
                                    bias_scratch_bytes());
  }
  float* pre_activation(const KernelArgs& a) const { return static_cast<float*>(a.saved.at(0)); }
  char* low_region(const KernelArgs& a) const {
    return static_cast<char*>(a.workspace) + lt_workspace_ + bias_scratch_bytes() +
           pre_activation_grad_bytes();
  }

  // The forward GEMM's epilogues in order of preference: bias and activation,
  // then the bias alone (the activation then runs after the GEMM); GELU_AUX
  // needs the pre-activation's rows 8-aligned.
  std::vector<cublasLtEpilogue_t> forward_epilogues() const {
    std::vector<cublasLtEpilogue_t> list;
    if (epilogue_ == Epilogue::relu)
      list.push_back(has_bias_ ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU);
    if (epilogue_ == Epilogue::gelu_tanh && out_ % 8 == 0)
      list.push_back(has_bias_ ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX);
    if (has_bias_) list.push_back(CUBLASLT_EPILOGUE_BIAS);
    return list;
  }
  // The GEMM operands: as they are in float32, narrowed into the workspace
  // under mixed precision (again at each call: the workspace is shared).
  const void* operand_x(const KernelArgs& a) const {
    return operand(a.inputs[0], low_type_, low_region(a), ctx_.compute.get());
  }
  const void* operand_dy(const TensorRef& dy, const KernelArgs& a) const {
    return operand(dy, low_type_, low_region(a) + low_bytes(rows_ * in_), ctx_.compute.get());
  }
  const void* weights(const KernelArgs& a) const {
    if (weights_arrive_low_) return a.params[0].data;
    return operand(a.params[0], low_type_,
                   low_region(a) + low_bytes(rows_ * in_) + low_bytes(rows_ * out_),
                   ctx_.compute.get());
  }
  void* bias_grad_target(const KernelArgs& a) const {
    if (a.grad_params.size() > 1 && a.grad_params[1]) return a.grad_params[1].data;
    return static_cast<char*>(a.workspace) + lt_workspace_;
  }

  CudaContext& ctx_;
  std::size_t lt_workspace_;  // cuBLASLt's, at the start of the workspace
  std::int64_t rows_ = 0, in_ = 0, out_ = 0;
  bool has_bias_ = false;
  Epilogue epilogue_ = Epilogue::none;
  bool low_ = false;                 // bf16/fp16 operands
  bool keep_x_low_ = false;          // training under them: the narrowed x is saved
  DType low_type_ = DType::f32;      // their type
  bool weights_arrive_low_ = false;  // the weights come as their bf16 copy
  std::unique_ptr<GemmPlan> forward_, backward_data_, backward_weight_;
};

}  // namespace

void register_linear_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel(
      "linear", [&ctx](const KernelContext& k) { return std::make_unique<LinearKernel>(k, ctx); });
}

}  // namespace trainer::cuda
