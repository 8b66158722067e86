// labels: cpu
// batchnorm on a short training batch (StepValues::valid_rows = k < N, the
// padded last batch of drop_last: false) on the CPU kernels: oneDNN's (plain
// [N, C], images with a plain or blocked layout, float32 or bf16, with and
// without the fused relu) and SyncBN's own loops (one rank, and two ranks with
// different real rows). A training forward and backward with k real rows gives
// what the same kernel gives on a batch of only those k rows (output and input
// gradient of the real rows, weight and bias gradients, running statistics);
// the padding rows of the output and of the input gradient are zero even when
// the buffers held NaN; with no real row the output and the gradients are
// zero and the running statistics stay as they were.
#include <catch2/catch.hpp>

#include <barrier>
#include <bit>
#include <cstring>
#include <limits>
#include <thread>

#include "ops/collective.h"
#include "tests/cpu_bf16.h"
#include "tests/op_check.h"
#include "tests/thread_ranks.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

struct BatchNormSetup {
  Shape x;  // the full batch
  TensorFormat format;
  bool relu = false;
  bool sync = false;
  std::string describe() const {
    return to_string(x) + " " + std::string(dtype_name(format.dtype)) + " block " +
           std::to_string(format.channel_block) + (relu ? " relu" : "") + (sync ? " sync" : "");
  }
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::size_t element_bytes(DType type) {
  return type == DType::bf16 ? 2 : 4;
}

// One batchnorm kernel on the CPU backend with host buffers it reads and
// writes in place: x, y, dy and dx in the setup's format (every format used
// holds the rows one after another), parameters and gradients in float32.
class BatchNormRun {
 public:
  BatchNormRun(const BatchNormSetup& setup, std::int64_t rows, Collective* collective = nullptr)
      : type_(setup.format.dtype) {
    shape_ = setup.x;
    shape_[0] = rows;
    const OpDef* def = op_registry().find("batchnorm");
    REQUIRE(def != nullptr);
    attrs_ = make_attrs(*def, {{"momentum", 0.3},
                               {"eps", 1e-3},
                               {"sync", setup.sync},
                               {"activation", std::string(setup.relu ? "relu" : "none")}});
    KernelContext ctx;
    ctx.op = def;
    ctx.attrs = &attrs_;
    ctx.inputs = {shape_};
    ctx.output = shape_;
    ctx.dtype = type_;
    ctx.collective = collective;
    ctx.input_formats = {setup.format};
    ctx.output_format = setup.format;
    const std::int64_t c = shape_[1];
    for (int k = 0; k < 4; ++k) ctx.param_decls.push_back({nullptr, {c}, DType::f32});
    kernel_ = cpu_backend().make_kernel(ctx);
    const std::size_t bytes = static_cast<std::size_t>(numel(shape_)) * element_bytes(type_);
    for (auto* b : {&x, &y, &dy, &dx}) b->assign(bytes, std::byte{0});
    for (auto& p : params) p.assign(static_cast<std::size_t>(c), 0.0f);
    for (auto& g : grads) g.assign(static_cast<std::size_t>(c), 0.0f);
    for (std::size_t b : kernel_->saved_bytes()) saved_.emplace_back(b / 4 + 1);
    workspace_.resize(kernel_->workspace_bytes() / 4 + 1);
  }

  std::int64_t rows() const { return shape_[0]; }
  std::size_t row_bytes() const { return x.size() / static_cast<std::size_t>(rows()); }
  std::size_t values_per_row() const { return row_bytes() / element_bytes(type_); }

  // What the kernel writes, filled with NaN as reused arena memory may be:
  // everything before a forward, the gradients and workspace before a backward.
  void poison_all() {
    set_rows(y, 0, rows(), kNaN);
    for (auto& s : saved_) std::fill(s.begin(), s.end(), kNaN);
    poison_gradients();
  }
  void poison_gradients() {
    set_rows(dx, 0, rows(), kNaN);
    for (auto& g : grads) std::fill(g.begin(), g.end(), kNaN);
    std::fill(workspace_.begin(), workspace_.end(), kNaN);
  }

  // Value `i` of `buffer` (in storage order) set to / read as a float.
  void set(std::vector<std::byte>& buffer, std::size_t i, float value) const {
    if (type_ == DType::bf16) {
      const auto bits = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(value) >> 16);
      std::memcpy(&buffer[i * 2], &bits, 2);
    } else {
      std::memcpy(&buffer[i * 4], &value, 4);
    }
  }
  float get(const std::vector<std::byte>& buffer, std::size_t i) const {
    if (type_ != DType::bf16) return std::bit_cast<float>(load<std::uint32_t>(buffer, i * 4));
    return std::bit_cast<float>(static_cast<std::uint32_t>(load<std::uint16_t>(buffer, i * 2))
                                << 16);
  }
  void set_rows(std::vector<std::byte>& buffer, std::int64_t first, std::int64_t last,
                float value) const {
    for (std::size_t i = first * values_per_row(); i < last * values_per_row(); ++i)
      set(buffer, i, value);
  }
  // Random values in [lo, hi) for rows [first, last), exact in the storage type.
  void set_random(std::vector<std::byte>& buffer, std::int64_t first, std::int64_t last, float lo,
                  float hi, std::uint64_t seed) const {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    for (std::size_t i = first * values_per_row(); i < last * values_per_row(); ++i)
      set(buffer, i, d(rng));
  }
  // The values of rows [first, last) of `buffer`.
  std::vector<float> rows_of(const std::vector<std::byte>& buffer, std::int64_t first,
                             std::int64_t last) const {
    std::vector<float> out;
    for (std::size_t i = first * values_per_row(); i < last * values_per_row(); ++i)
      out.push_back(get(buffer, i));
    return out;
  }

  void forward(std::int64_t valid_rows) { kernel_->forward(args(valid_rows)); }
  void backward(std::int64_t valid_rows) {
    KernelArgs a = args(valid_rows);
    a.grad_output = {dy.data(), shape_, type_};
    a.grad_inputs = {{dx.data(), shape_, type_}};
    for (auto& g : grads) a.grad_params.push_back({g.data(), {shape_[1]}, DType::f32});
    a.grad_params.resize(4);  // the running statistics have none
    kernel_->backward(a);
  }

  std::vector<std::byte> x, y, dy, dx;
  std::vector<float> params[4];  // weight, bias, running_mean, running_var
  std::vector<float> grads[2];   // weight, bias

 private:
  template <typename T>
  static T load(const std::vector<std::byte>& buffer, std::size_t at) {
    T v;
    std::memcpy(&v, &buffer[at], sizeof v);
    return v;
  }

  KernelArgs args(std::int64_t valid_rows) {
    step_.valid_rows = valid_rows;
    KernelArgs a;
    a.inputs = {{x.data(), shape_, type_}};
    for (auto& p : params) a.params.push_back({p.data(), {shape_[1]}, DType::f32});
    a.output = {y.data(), shape_, type_};
    for (auto& s : saved_) a.saved.push_back(s.data());
    a.workspace = workspace_.data();
    a.step = &step_;
    return a;
  }

  DType type_;
  Shape shape_;
  Attrs attrs_;
  std::unique_ptr<Kernel> kernel_;
  std::vector<std::vector<float>> saved_;
  std::vector<float> workspace_;
  StepValues step_;
};

// Parameters as a model holds them (positive variances), alike in every run.
void set_params(BatchNormRun& run) {
  std::mt19937_64 rng(5);
  const float lo[4] = {0.5f, -0.5f, -0.5f, 0.5f}, hi[4] = {1.5f, 0.5f, 0.5f, 1.5f};
  for (int k = 0; k < 4; ++k) {
    std::uniform_real_distribution<float> d(lo[k], hi[k]);
    for (auto& v : run.params[k]) v = d(rng);
  }
}

std::vector<float> zeros(std::size_t n) {
  return std::vector<float>(n, 0.0f);
}

// The kernel on the setup's N rows with `real` real ones, against the same
// kernel built for a batch of those rows alone. Padding rows hold other
// inputs and a NaN incoming gradient; every buffer the kernels write starts
// as NaN.
void check_short_batch(const BatchNormSetup& setup, std::int64_t real) {
  INFO("batchnorm " << setup.describe() << ", " << real << " real rows");
  const std::int64_t n = setup.x[0];
  BatchNormRun padded(setup, n), alone(setup, real);
  padded.set_random(padded.x, 0, real, -1.0f, 1.0f, 1);
  padded.set_random(padded.x, real, n, 2.0f, 4.0f, 2);
  alone.set_random(alone.x, 0, real, -1.0f, 1.0f, 1);
  padded.set_random(padded.dy, 0, real, -1.0f, 1.0f, 3);
  padded.set_rows(padded.dy, real, n, kNaN);
  alone.set_random(alone.dy, 0, real, -1.0f, 1.0f, 3);
  set_params(padded);
  set_params(alone);
  padded.poison_all();
  alone.poison_all();

  padded.forward(real);
  alone.forward(-1);
  check_close(padded.rows_of(padded.y, 0, real), alone.rows_of(alone.y, 0, real), 0, 0,
              "y of the real rows");
  check_close(padded.rows_of(padded.y, real, n), zeros((n - real) * padded.values_per_row()), 0, 0,
              "y of the padding rows");
  check_close(padded.params[2], alone.params[2], 0, 0, "running_mean");
  check_close(padded.params[3], alone.params[3], 0, 0, "running_var");

  padded.poison_gradients();
  alone.poison_gradients();
  padded.backward(real);
  alone.backward(-1);
  check_close(padded.rows_of(padded.dx, 0, real), alone.rows_of(alone.dx, 0, real), 0, 0,
              "dx of the real rows");
  check_close(padded.rows_of(padded.dx, real, n), zeros((n - real) * padded.values_per_row()), 0, 0,
              "dx of the padding rows");
  check_close(padded.grads[0], alone.grads[0], 0, 0, "dweight");
  check_close(padded.grads[1], alone.grads[1], 0, 0, "dbias");
}

// A batch with no real row: the output and every gradient are zero, the
// running statistics stay as they were.
void check_no_real_rows(const BatchNormSetup& setup) {
  INFO("batchnorm " << setup.describe() << ", no real rows");
  const std::int64_t n = setup.x[0];
  BatchNormRun run(setup, n);
  run.set_random(run.x, 0, n, -1.0f, 1.0f, 1);
  run.set_random(run.dy, 0, n, -1.0f, 1.0f, 3);
  set_params(run);
  const std::vector<float> running_mean = run.params[2], running_var = run.params[3];
  run.poison_all();
  run.forward(0);
  const auto all_zero = zeros(static_cast<std::size_t>(n) * run.values_per_row());
  check_close(run.rows_of(run.y, 0, n), all_zero, 0, 0, "y");
  check_close(run.params[2], running_mean, 0, 0, "running_mean");
  check_close(run.params[3], running_var, 0, 0, "running_var");
  run.poison_gradients();
  run.backward(0);
  check_close(run.rows_of(run.dx, 0, n), all_zero, 0, 0, "dx");
  const auto channel_zeros = zeros(run.params[0].size());
  check_close(run.grads[0], channel_zeros, 0, 0, "dweight");
  check_close(run.grads[1], channel_zeros, 0, 0, "dbias");
}

TensorFormat plain() {
  return {};
}
TensorFormat blocked(int block, DType type = DType::f32) {
  return {type, block};
}

// The oneDNN kernel's float32 cases: [N, C]; an image in plain NCHW (the
// kernel converts it to its blocked layout and back); images stored blocked.
std::vector<BatchNormSetup> float_setups() {
  std::vector<BatchNormSetup> setups;
  for (bool relu : {false, true}) {
    setups.push_back({{6, 5}, plain(), relu});
    setups.push_back({{5, 16, 3, 3}, plain(), relu});
    setups.push_back({{5, 16, 3, 3}, blocked(16), relu});
    setups.push_back({{5, 16, 3, 3}, blocked(8), relu});
  }
  return setups;
}

std::vector<BatchNormSetup> sync_setups() {
  std::vector<BatchNormSetup> setups;
  for (bool relu : {false, true}) {
    setups.push_back({{6, 5}, plain(), relu, true});
    setups.push_back({{5, 3, 2, 2}, plain(), relu, true});
  }
  return setups;
}

}  // namespace

TEST_CASE("batchnorm on a short batch trains like a batch of its real rows") {
  for (const auto& setup : float_setups())
    for (std::int64_t real : {1, 3}) check_short_batch(setup, real);
}

TEST_CASE("bf16 batchnorm on a short batch trains like a batch of its real rows") {
  if (!cpu_computes_bf16()) return;
  for (bool relu : {false, true})
    for (std::int64_t real : {1, 3})
      check_short_batch({{5, 32, 2, 3}, blocked(16, DType::bf16), relu}, real);
}

TEST_CASE("SyncBN on a short batch trains like a batch of its real rows") {
  for (const auto& setup : sync_setups())
    for (std::int64_t real : {1, 3}) check_short_batch(setup, real);
}

TEST_CASE("batchnorm on a batch of padding rows only changes nothing") {
  std::vector<BatchNormSetup> setups = float_setups();
  for (const auto& setup : sync_setups()) setups.push_back(setup);
  if (cpu_computes_bf16()) setups.push_back({{5, 32, 2, 3}, blocked(16, DType::bf16), true});
  for (const auto& setup : setups) check_no_real_rows(setup);
}

TEST_CASE("a short batch reuses the primitives built for its size") {
  // Alternating full and short steps (an epoch's last batch, then the next
  // epoch's first) keep giving the short batch's and the full batch's results.
  const BatchNormSetup setup{{5, 16, 3, 3}, blocked(16), true};
  BatchNormRun padded(setup, 5), alone(setup, 2), full(setup, 5);
  padded.set_random(padded.x, 0, 5, -1.0f, 1.0f, 1);
  alone.set_random(alone.x, 0, 2, -1.0f, 1.0f, 1);
  full.x = padded.x;
  set_params(padded);
  set_params(alone);
  set_params(full);
  for (int epoch = 0; epoch < 2; ++epoch) {
    padded.forward(-1);
    full.forward(-1);
    check_close(padded.rows_of(padded.y, 0, 5), full.rows_of(full.y, 0, 5), 0, 0, "full batch y");
    padded.forward(2);
    alone.forward(-1);
    check_close(padded.rows_of(padded.y, 0, 2), alone.rows_of(alone.y, 0, 2), 0, 0,
                "short batch y");
  }
}

TEST_CASE("SyncBN ranks with different real rows train like one batch of all real rows") {
  // Rank 0 holds 4 real rows of 4, rank 1 one real row of 4 (the wrapped end
  // of an epoch): together they are the 5-row batch of one rank.
  const BatchNormSetup setup{{4, 3, 2, 2}, plain(), true, true};
  Exchange exchange;
  ThreadRank rank0(exchange, 0), rank1(exchange, 1);
  BatchNormRun run0(setup, 4, &rank0), run1(setup, 4, &rank1), alone(setup, 5);
  alone.set_random(alone.x, 0, 5, -1.0f, 1.0f, 1);
  alone.set_random(alone.dy, 0, 5, -1.0f, 1.0f, 3);
  const std::size_t row = alone.row_bytes();
  std::copy_n(alone.x.begin(), 4 * row, run0.x.begin());
  std::copy_n(alone.x.begin() + 4 * row, row, run1.x.begin());
  run1.set_random(run1.x, 1, 4, 2.0f, 4.0f, 2);
  std::copy_n(alone.dy.begin(), 4 * row, run0.dy.begin());
  std::copy_n(alone.dy.begin() + 4 * row, row, run1.dy.begin());
  run1.set_rows(run1.dy, 1, 4, kNaN);
  for (auto* run : {&run0, &run1, &alone}) {
    set_params(*run);
    run->poison_all();
  }
  std::thread other([&] {
    run1.forward(1);
    run1.poison_gradients();
    run1.backward(1);
  });
  run0.forward(-1);
  run0.poison_gradients();
  run0.backward(-1);
  other.join();
  alone.forward(-1);
  alone.backward(-1);

  const auto close = [](const std::vector<float>& got, const std::vector<float>& want,
                        const std::string& what) { check_close(got, want, 1e-5, 1e-6, what); };
  close(run0.rows_of(run0.y, 0, 4), alone.rows_of(alone.y, 0, 4), "rank 0 y");
  close(run1.rows_of(run1.y, 0, 1), alone.rows_of(alone.y, 4, 5), "rank 1 y");
  check_close(run1.rows_of(run1.y, 1, 4), zeros(3 * run1.values_per_row()), 0, 0,
              "rank 1 y of the padding rows");
  for (const auto* run : {&run0, &run1}) {
    close(run->params[2], alone.params[2], "running_mean");
    close(run->params[3], alone.params[3], "running_var");
  }
  close(run0.rows_of(run0.dx, 0, 4), alone.rows_of(alone.dx, 0, 4), "rank 0 dx");
  close(run1.rows_of(run1.dx, 0, 1), alone.rows_of(alone.dx, 4, 5), "rank 1 dx");
  check_close(run1.rows_of(run1.dx, 1, 4), zeros(3 * run1.values_per_row()), 0, 0,
              "rank 1 dx of the padding rows");
  // Each rank's weight and bias gradients are its own rows' sums.
  for (int k = 0; k < 2; ++k) {
    std::vector<float> sum(run0.grads[k].size());
    for (std::size_t c = 0; c < sum.size(); ++c) sum[c] = run0.grads[k][c] + run1.grads[k][c];
    close(sum, alone.grads[k], k == 0 ? "dweight over the ranks" : "dbias over the ranks");
  }
}
