// dropout: inverted dropout. The keep mask comes from a counter-based hash of
// (seed, element index in the step's global batch: draw_index), so a replay
// with the same seed draws the same mask whatever the thread count, and a
// sample draws the same mask whichever rank or micro-batch holds it. An image
// stored blocked ([N, C / b, H, W, b]) draws by each element's index in the
// plain [N, C, H, W] order, so the mask does not depend on the layout (nor on
// the CPU's block size) and equals the CUDA kernel's. The mask is saved (one
// byte per element) for the backward.
#include <cstring>
#include <memory>

#include "ops/cpu/families.h"

namespace trainer::cpu {
namespace {

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// The splitmix64 finalizer (without the increment).
inline std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(const KernelContext& ctx)
      : count_(numel(ctx.output)),
        rows_(ctx.output.empty() ? 1 : ctx.output[0]),
        per_row_(rows_ > 0 ? count_ / rows_ : 0),
        block_(blocked_image(ctx.output, ctx.output_format.channel_block)
                   ? ctx.output_format.channel_block
                   : 0) {
    const double p = ctx.attrs->get_number("p");
    // keep when the top 32 bits of the hash are >= p * 2^32
    threshold_ = static_cast<std::uint64_t>(p * 4294967296.0);
    scale_ = static_cast<float>(1.0 / (1.0 - p));
    if (block_ > 0) channels_ = ctx.output[1], height_ = ctx.output[2], width_ = ctx.output[3];
  }
  std::vector<std::size_t> saved_bytes() const override {
    return {static_cast<std::size_t>(count_)};
  }
  std::string implementation() const override { return "splitmix64"; }

  void forward(const KernelArgs& a) override {
    const float* x = a.inputs[0].f32();
    float* y = a.output.f32();
    if (!a.training) {
      if (x != y) std::memmove(y, x, static_cast<std::size_t>(count_) * 4);
      return;
    }
    auto* mask = static_cast<std::uint8_t*>(a.saved[0]);
    const StepValues step = step_values_of(a);
    const std::uint64_t base = mix(call_seed(step.seed, a.seed_salt) + kGolden);
    for (std::int64_t row = 0; row < rows_; ++row) {
      const std::uint64_t first =
          draw_index(step.first_position, step.position_stride, row, per_row_, 0);
      std::int64_t k = row * per_row_;
      const auto draw = [&](std::int64_t plain_column) {
        const std::uint64_t h =
            mix(base + (first + static_cast<std::uint64_t>(plain_column)) * kGolden);
        const std::uint8_t keep = (h >> 32) >= threshold_ ? 1 : 0;
        mask[k] = keep;
        y[k] = keep ? x[k] * scale_ : 0.0f;
        ++k;
      };
      if (block_ == 0) {
        for (std::int64_t column = 0; column < per_row_; ++column) draw(column);
      } else {  // stored [C / b, H, W, b]: the plain column of each stored element
        const std::int64_t plane = height_ * width_;
        for (std::int64_t c0 = 0; c0 < channels_; c0 += block_)
          for (std::int64_t hw = 0; hw < plane; ++hw)
            for (std::int64_t c = c0; c < c0 + block_; ++c) draw(c * plane + hw);
      }
    }
  }

  void backward(const KernelArgs& a) override {
    if (!a.grad_inputs[0]) return;
    const auto* mask = static_cast<const std::uint8_t*>(a.saved[0]);
    const float* dy = a.grad_output.f32();
    float* dx = a.grad_inputs[0].f32();
    for (std::int64_t k = 0; k < count_; ++k) dx[k] = mask[k] ? dy[k] * scale_ : 0.0f;
  }

 private:
  // Whether `shape` is an image whose channels divide into blocks of `block`.
  static bool blocked_image(const Shape& shape, int block) {
    return block > 0 && shape.size() == 4 && shape[1] % block == 0;
  }

  std::int64_t count_, rows_, per_row_;
  std::int64_t block_;  // > 0: stored blocked by this many channels
  std::int64_t channels_ = 0, height_ = 0, width_ = 0;
  std::uint64_t threshold_ = 0;
  float scale_ = 1.0f;
};

}  // namespace

void register_dropout_kernels(Backend& backend) {
  backend.add_kernel("dropout", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<DropoutKernel>(ctx);
  });
}

}  // namespace trainer::cpu
