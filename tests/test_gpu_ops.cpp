// labels: gpu
// Every op on the CUDA backend against the CPU backend on the same random data:
// outputs, updated state (batchnorm running statistics) and all gradients, with
// float32 tolerances (looser where the libraries reorder sums). Skipped with
// the reason on a machine without a GPU.
#include <catch2/catch.hpp>

#include "gpu_skip.h"
#include "op_check.h"

#ifdef TRAINER_WITH_CUDA
#include <cuda_runtime_api.h>

#include <cmath>
#include <random>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cudnn_descriptors.h"
#include "ops/cuda/linear_bias.h"
#endif

#ifdef TRAINER_WITH_CUDA
namespace {

using trainer::DType;
using trainer::FieldValue;
using trainer::Shape;
using trainer::testing::OpCase;
using trainer::testing::OpRun;
using Ints = std::vector<std::int64_t>;

void compare(const OpCase& c, double rtol = 1e-4, double atol = 1e-5, bool training = true,
             std::int64_t valid_rows = -1, const std::function<void(OpRun&)>& prepare = {}) {
  if (!trainer::cpu_backend().has_kernel(c.op)) {
    WARN("the CPU backend has no '" << c.op << "' kernel yet: nothing to compare against");
    return;
  }
  INFO("op " << c.op);
  trainer::testing::compare_backends(trainer::cuda_backend(0), trainer::cpu_backend(), c, rtol,
                                     atol, training, valid_rows, prepare);
}

}  // namespace

TEST_CASE("CUDA linear equals CPU") {
  compare({"linear", {{"out_features", std::int64_t{16}}}, {{8, 20}}}, 1e-4, 1e-4);
  compare({"linear", {{"out_features", std::int64_t{5}}, {"bias", false}}, {{3, 7}}}, 1e-4, 1e-4);
}

// The activation in the GEMM's epilogue (RELU_BIAS, GELU_AUX_BIAS with 8-aligned
// rows, RELU without a bias, all of them with bf16 operands too) or after it
// (the erf gelu, rows cuBLASLt's aux output refuses). cuBLASLt's GELU may use
// the hardware's approximate tanh (relative 2^-11) for the output; the saved
// pre-activation and the gradients are exact.
TEST_CASE("CUDA linear with an activation epilogue equals CPU") {
  for (const std::string act : {"relu", "gelu", "gelu_tanh"}) {
    INFO("activation " << act);
    const double fused_tolerance = act == "gelu_tanh" ? 1e-3 : 1e-4;
    compare({"linear", {{"out_features", std::int64_t{16}}, {"activation", act}}, {{8, 20}}},
            fused_tolerance, fused_tolerance);
    compare({"linear",
             {{"out_features", std::int64_t{5}}, {"bias", false}, {"activation", act}},
             {{3, 7}}},
            1e-4, 1e-4);
    OpCase low{"linear", {{"out_features", std::int64_t{24}}, {"activation", act}}, {{16, 40}}};
    low.compute = DType::bf16;
    compare(low, 1e-2, 1e-2);  // see "bf16 and fp16 linear" below
  }
}

// The comparisons above pass on the fallbacks too (the bias and activation
// after a plain GEMM): this says which path ran. A float32 bias with a relu is
// fused into the forward GEMM on every GPU cuBLASLt supports; the bf16 one,
// the gelu's aux output and the bias gradient's BGRADB are reported, as their
// support varies.
TEST_CASE("CUDA linear fuses its bias and relu into the cuBLASLt GEMM") {
  for (const DType compute : {DType::f32, DType::bf16}) {
    for (const std::string act : {"relu", "gelu_tanh"}) {
      OpCase c{"linear", {{"out_features", std::int64_t{24}}, {"activation", act}}, {{16, 40}}};
      c.compute = compute;
      OpRun run(trainer::cuda_backend(0), c);
      const std::string name = run.kernel().implementation();
      INFO("compute " << trainer::dtype_name(compute) << ", " << name);
      if (act == "relu" && compute == DType::f32)
        CHECK(name.find("gemm+bias+relu") != std::string::npos);
      else
        WARN("linear with " << act << " (" << trainer::dtype_name(compute) << "): " << name);
      WARN("bias gradient (" << trainer::dtype_name(compute) << ", " << act << "): "
                             << (name.find("dW gemm+db") != std::string::npos
                                     ? "in the weight-gradient GEMM (BGRADB)"
                                     : "by a kernel after it"));
    }
  }
}

// Under deterministic: true the bias gradient is the own fixed-order row
// kernel's, whatever cuBLASLt offers (BGRADB's order is not documented).
TEST_CASE("CUDA linear under deterministic sums its bias gradient outside the GEMM") {
  OpCase c{"linear", {{"out_features", std::int64_t{24}}}, {{16, 40}}};
  c.deterministic = true;
  OpRun run(trainer::cuda_backend(0), c);
  const std::string name = run.kernel().implementation();
  INFO(name);
  CHECK(name.find("dW gemm+db") == std::string::npos);
  CHECK(name.find("gemm+bias") != std::string::npos);
}

// linear's bias gradient outside the GEMM (when cuBLASLt has no BGRADB
// epilogue for a shape): rows and columns that are not multiples of the
// kernel's 32 x 32 tile, against the sum in double; and the same bits twice.
TEST_CASE("CUDA bias gradient over rows equals the sum of the rows") {
  const std::int64_t rows = 1037, cols = 70;
  std::vector<float> dy(static_cast<std::size_t>(rows * cols));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : dy) v = uniform(rng);
  trainer::Backend& gpu = trainer::cuda_backend(0);
  void* device_dy = gpu.allocate(dy.size() * sizeof(float));
  void* device_db = gpu.allocate(static_cast<std::size_t>(cols) * sizeof(float));
  gpu.copy_to_device(device_dy, dy.data(), dy.size() * sizeof(float));
  gpu.synchronize();
  std::vector<float> first, second;
  for (auto* db : {&first, &second}) {
    db->assign(static_cast<std::size_t>(cols), std::nanf(""));
    trainer::cuda::bias_grad_rows(static_cast<const float*>(device_dy),
                                  static_cast<float*>(device_db), rows, cols, nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    gpu.copy_to_host(db->data(), device_db, db->size() * sizeof(float));
  }
  gpu.release(device_dy);
  gpu.release(device_db);
  for (std::int64_t j = 0; j < cols; ++j) {
    double want = 0;
    for (std::int64_t r = 0; r < rows; ++r) want += dy[static_cast<std::size_t>(r * cols + j)];
    INFO("column " << j);
    CHECK(first[static_cast<std::size_t>(j)] == Approx(want).margin(1e-4));
  }
  CHECK(first == second);
}

// A NaN that reaches a relu becomes 0 on the CPU, as oneDNN's relu (a max
// with 0) makes it, alone or folded into a linear, a batchnorm or an add; the
// CUDA kernels of our own do the same, so that both backends train alike (a
// run notices the NaN in the weights behind a finite loss). cuBLASLt's
// RELU_BIAS epilogue, a linear's relu on the GPU, keeps the NaN (as PyTorch's
// relu does; seen on an H200 with cuBLASLt 13.1): the loss then turns NaN and
// the run stops on it at once. leaky_relu keeps it on both.
TEST_CASE("CUDA relu turns a NaN into 0 as the CPU does, but in cuBLASLt's epilogue") {
  const std::string relu = "relu";
  // SyncBN's own kernel over the real rows (alone, a sync batchnorm is cuDNN's).
  OpCase own_rows{"batchnorm", {{"activation", relu}, {"sync", true}}, {{2, 3, 2, 2}}};
  own_rows.short_batches = true;
  const OpCase cases[] = {
      {"relu", {}, {{2, 3}}},
      {"add", {{"activation", relu}}, {{2, 3}, {2, 3}}},
      {"linear", {{"out_features", std::int64_t{4}}, {"activation", relu}}, {{2, 3}}},
      {"batchnorm", {{"activation", relu}}, {{2, 3, 2, 2}}},
      own_rows,
      {"leaky_relu", {}, {{2, 3}}}};
  for (const OpCase& c : cases) {
    INFO(c.op);
    OpRun cpu(trainer::cpu_backend(), c), gpu(trainer::cuda_backend(0), c);
    cpu.inputs[0].f[4] = gpu.inputs[0].f[4] = std::nanf("");
    const auto want = cpu.forward(), got = gpu.forward();
    INFO("implementation " << gpu.kernel().implementation());
    if (c.op == "leaky_relu") {
      CHECK(std::isnan(want.f[4]));
      CHECK(std::isnan(got.f[4]));
    } else if (gpu.kernel().implementation().find("cublasLt:gemm+bias+relu") == 0) {
      CHECK(want.f[4] == 0.0f);
      CHECK(std::isnan(got.f[4]));
    } else {
      CHECK(want.f[4] == 0.0f);
      CHECK(got.f[4] == 0.0f);
    }
  }
}

TEST_CASE("CUDA conv2d equals CPU") {
  compare({"conv2d",
           {{"out_channels", std::int64_t{4}}, {"kernel", Ints{3}}, {"padding", Ints{1}}},
           {{2, 3, 9, 9}}},
          1e-4, 1e-4);
  compare({"conv2d",
           {{"out_channels", std::int64_t{6}},
            {"kernel", Ints{3, 2}},
            {"stride", Ints{2}},
            {"dilation", Ints{2, 1}},
            {"groups", std::int64_t{2}},
            {"bias", false}},
           {{2, 4, 11, 8}}},
          1e-4, 1e-4);
}

// Mixed precision: both backends round x, the weights and dy to the same
// 16-bit values and accumulate in float32, so linear's GEMMs differ only in
// the order of the sums. So does the bias gradient when cuBLASLt sums it in
// the weight-gradient GEMM (BGRADB, from the rounded dy, as oneDNN's bf16
// backward-weights does); where it refuses that epilogue, CUDA sums the
// float32 dy, which differs by up to 2^-9 per element under bf16. cuDNN also rounds conv's y, dx
// and dW to the 16-bit type (relative 2^-8 for bf16), which the CPU kernel does not when they are
// float32.
TEST_CASE("CUDA bf16 and fp16 linear and conv2d equal CPU") {
  for (DType low : {DType::bf16, DType::f16}) {
    INFO("compute " << trainer::dtype_name(low));
    OpCase linear{"linear", {{"out_features", std::int64_t{24}}}, {{16, 40}}};
    linear.compute = low;
    const double tolerance = low == DType::bf16 ? 1e-2 : 2e-3;
    compare(linear, tolerance, tolerance);
    OpCase conv{"conv2d",
                {{"out_channels", std::int64_t{8}}, {"kernel", Ints{3}}, {"padding", Ints{1}}},
                {{4, 3, 10, 10}}};
    conv.compute = low;
    compare(conv, 1e-2, 1e-2);
  }
}

TEST_CASE("CUDA batchnorm equals CPU in training and eval") {
  compare({"batchnorm", {}, {{4, 3, 5, 5}}}, 1e-4, 1e-4);
  compare({"batchnorm", {{"momentum", 0.3}}, {{6, 5}}}, 1e-4, 1e-4);
  compare({"batchnorm", {}, {{4, 3, 5, 5}}}, 1e-4, 1e-4, false);
  compare({"batchnorm", {{"activation", std::string("relu")}}, {{4, 3, 5, 5}}}, 1e-4, 1e-4);
  compare({"batchnorm", {{"activation", std::string("relu")}}, {{4, 3, 5, 5}}}, 1e-4, 1e-4, false);
}

// A training program that meets short batches takes the own kernels (cuDNN's
// would count the padding rows): over the real rows they equal the CPU's, the
// padding rows' outputs and input gradients are zero, and with no real row
// everything is zero and the running statistics stay. Large enough for
// several blocks per channel, and a full batch through the same kernels.
TEST_CASE("CUDA batchnorm of a short batch equals CPU over its real rows") {
  for (const std::string act : {"none", "relu"}) {
    INFO("activation " << act);
    for (const Shape& x : {Shape{6, 3, 5, 5}, Shape{6, 5}, Shape{64, 4, 12, 12}}) {
      OpCase c{"batchnorm", {{"momentum", 0.3}, {"activation", act}}, {x}};
      c.short_batches = true;
      for (const std::int64_t real : {std::int64_t{-1}, x[0] / 2, std::int64_t{1}}) {
        INFO("input " << trainer::to_string(x) << ", real rows " << real);
        compare(c, 1e-4, 1e-4, true, real);
      }
    }
  }
  OpCase none{"batchnorm", {}, {{4, 3, 5, 5}}};
  none.short_batches = true;
  compare(none, 1e-4, 1e-4, true, 0);
}

TEST_CASE("CUDA layernorm equals CPU") {
  compare({"layernorm", {}, {{4, 7, 10}}}, 1e-4, 1e-5);
}

// One warp per row (or plane) with the grid capped at 524,280 blocks of 256
// threads (4,194,240 warps): rows beyond that are reached by striding.
TEST_CASE("CUDA one-warp-per-row kernels cover more rows than the grid has warps") {
  // Its weight gradients sum 4.2M rows in float32, in another order than the CPU's.
  compare({"layernorm", {}, {{4198400, 2}}}, 2e-3, 1e-3);
  compare({"global_avgpool", {}, {{4100, 1024, 1, 1}}}, 1e-5, 1e-6);
}

TEST_CASE("CUDA activations equal CPU") {
  for (const char* op : {"relu", "gelu", "silu", "sigmoid", "tanh", "leaky_relu"})
    compare({op, {}, {{3, 5, 7}}}, 1e-5, 1e-6);
  compare({"leaky_relu", {{"slope", 0.2}}, {{64}}}, 1e-5, 1e-6);
  compare({"gelu", {{"approximate", std::string("tanh")}}, {{3, 5, 7}}}, 1e-5, 1e-6);
}

TEST_CASE("CUDA pooling equals CPU") {
  compare({"maxpool2d",
           {{"kernel", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}},
           {{2, 3, 9, 9}}});
  compare({"maxpool2d", {{"kernel", Ints{2}}}, {{2, 3, 8, 8}}});
  compare({"avgpool2d",
           {{"kernel", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}},
           {{2, 3, 9, 9}}});
  compare({"avgpool2d",
           {{"kernel", Ints{3}},
            {"stride", Ints{2}},
            {"padding", Ints{1}},
            {"count_include_pad", true}},
           {{2, 3, 9, 9}}});
  compare({"global_avgpool", {}, {{2, 3, 5, 5}}}, 1e-5, 1e-6);
}

TEST_CASE("CUDA shape ops, add and concat equal CPU") {
  compare({"flatten", {}, {{2, 3, 4, 5}}}, 0, 0);
  compare({"reshape", {{"shape", Ints{12, -1}}}, {{2, 3, 4, 5}}}, 0, 0);
  compare({"add", {}, {{4, 9}, {4, 9}, {4, 9}}}, 1e-6, 1e-7);
  compare({"add", {{"activation", std::string("relu")}}, {{4, 9}, {4, 9}, {4, 9}}}, 1e-6, 1e-7);
  compare({"add", {{"activation", std::string("relu")}}, {{4, 9}, {4, 9}}}, 1e-6, 1e-7);
  compare({"concat", {}, {{2, 3, 4}, {2, 5, 4}}}, 0, 0);
  compare({"concat", {{"axis", std::int64_t{-1}}}, {{2, 3, 4}, {2, 3, 1}, {2, 3, 2}}}, 0, 0);
}

TEST_CASE("CUDA dropout draws the CPU's mask for the same seed") {
  compare({"dropout", {{"p", 0.3}}, {{4, 101}}}, 1e-6, 1e-7);
  compare({"dropout", {{"p", 0.3}}, {{4, 101}}}, 1e-6, 1e-7, false);
  // Rows placed in a larger batch: the second of 2 ranks, and a later micro-batch.
  const auto second_rank = [](OpRun& run) {
    run.first_position = 9;
    run.position_stride = 2;
  };
  compare({"dropout", {{"p", 0.3}}, {{4, 3, 7}}}, 1e-6, 1e-7, true, -1, second_rank);
  const auto later_micro_batch = [](OpRun& run) { run.first_position = 12; };
  compare({"dropout", {{"p", 0.3}}, {{4, 101}}}, 1e-6, 1e-7, true, -1, later_micro_batch);
}

TEST_CASE("CUDA losses equal CPU") {
  auto labels = [](std::int64_t classes, std::int64_t ignored_row) {
    return [=](OpRun& run) {
      auto& l = run.inputs[1].i;
      for (std::size_t r = 0; r < l.size(); ++r) l[r] = static_cast<std::int64_t>(r * 7) % classes;
      if (ignored_row >= 0) l[static_cast<std::size_t>(ignored_row)] = -100;
    };
  };
  const OpCase ce{"cross_entropy", {}, {{8, 10}, {8}}, {DType::f32, DType::i64}};
  compare(ce, 1e-5, 1e-6, true, -1, labels(10, -1));
  compare(ce, 1e-5, 1e-6, true, 6, labels(10, 2));
  compare({"cross_entropy", {{"label_smoothing", 0.1}}, {{8, 10}, {8}}, {DType::f32, DType::i64}},
          1e-5, 1e-6, true, -1, labels(10, 3));
  compare({"mse", {}, {{6, 4}, {6, 4}}}, 1e-5, 1e-6);
  compare({"mse", {}, {{6, 4}, {6, 4}}}, 1e-5, 1e-6, true, 4);
}

TEST_CASE("every registered op has a CUDA kernel") {
  for (const auto& name : trainer::op_registry().names()) {
    INFO("op " << name);
    CHECK(trainer::cuda_backend(0).has_kernel(name));
  }
}
// cuDNN's 4-d descriptors take int extents: a batch of 2^31 elements is
// refused when the layer's kernel is made, in words, not by a cuDNN status.
TEST_CASE("a convolution larger than cuDNN's 4-d tensors is refused in words") {
  using trainer::cuda::require_int_extents;
  CHECK_NOTHROW(require_int_extents(1, 1, 46340, 46340, "tensor"));
  CHECK_NOTHROW(require_int_extents(32767, 8, 128, 64, "tensor"));
  CHECK_THROWS_WITH(require_int_extents(32768, 8, 128, 64, "tensor"),
                    Catch::Contains("tensor [32768, 8, 128, 64] is more than cuDNN's 4-d tensors "
                                    "hold (2^31 - 1 elements)"));
  CHECK_THROWS_WITH(require_int_extents(32768, 8, 128, 64, "tensor"),
                    Catch::Contains("make the batch smaller"));
  // A batch of one too large, or a filter: a smaller batch cannot help.
  CHECK_THROWS_WITH(require_int_extents(1, 65536, 256, 256, "tensor"),
                    Catch::Contains("make the layer smaller"));
  CHECK_THROWS_WITH(require_int_extents(70000, 70000, 1, 1, "filter"),
                    Catch::Contains("make the layer smaller"));
  CHECK_THROWS(require_int_extents(1, 1, std::int64_t{1} << 32, std::int64_t{1} << 32, "tensor"));
  CHECK_THROWS_WITH(require_int_extents(0, 8, 4, 4, "tensor"),
                    Catch::Contains("has an empty extent"));
  const trainer::OpDef* def = trainer::op_registry().find("conv2d");
  REQUIRE(def != nullptr);
  const trainer::Attrs attrs = trainer::testing::make_attrs(
      *def, {{"out_channels", std::int64_t{8}}, {"kernel", Ints{3}}, {"padding", Ints{1}}});
  const Shape input{32768, 8, 128, 64};
  const auto sig = def->signature({input}, attrs);
  trainer::KernelContext ctx;
  ctx.op = def;
  ctx.attrs = &attrs;
  ctx.inputs = {input};
  for (const auto& p : sig.params) ctx.param_decls.push_back({nullptr, p.shape, DType::f32});
  ctx.output = sig.output;
  ctx.training = true;
  CHECK_THROWS_WITH(trainer::cuda_backend(0).make_kernel(ctx),
                    Catch::Contains("more than cuDNN's 4-d tensors hold"));
}
#endif
