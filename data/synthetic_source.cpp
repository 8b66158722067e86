// The synthetic source: samples and labels computed from (seed, index).
#include <stdexcept>

#include "data/content_digest.h"
#include "data/rng.h"
#include "data/sources.h"

namespace trainer::data {
namespace {

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(Shape shape, std::int64_t classes, std::int64_t size, std::uint64_t seed)
      : shape_(std::move(shape)), classes_(classes), size_(size), seed_(seed) {}
  std::int64_t size() const override { return size_; }
  Shape sample_shape() const override { return shape_; }
  std::int64_t num_classes() const override { return classes_; }
  void read(std::int64_t index, float* sample, std::int64_t* label, float*) const override {
    if (index < 0 || index >= size_) {
      throw std::out_of_range(describe() + ": sample index " + std::to_string(index) +
                              " outside [0, " + std::to_string(size_) + ")");
    }
    CounterRng rng(hash_key({seed_, static_cast<std::uint64_t>(RngPurpose::synthetic),
                             static_cast<std::uint64_t>(index)}));
    if (label) *label = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(classes_)));
    const std::int64_t n = numel(shape_);
    for (std::int64_t i = 0; i < n; ++i) sample[i] = static_cast<float>(rng.uniform());
  }
  std::string describe() const override {
    return "synthetic data " + to_string(shape_) + " x " + std::to_string(size_) + " (" +
           std::to_string(classes_) + " classes, seed " + std::to_string(seed_) + ")";
  }
  std::int64_t max_label() const override { return classes_ - 1; }
  // What every sample is computed from.
  std::uint64_t content_digest() const override {
    ContentDigest digest;
    digest.add(shape_.data(), shape_.size() * sizeof(shape_[0]));
    for (const std::uint64_t value :
         {static_cast<std::uint64_t>(classes_), static_cast<std::uint64_t>(size_), seed_})
      digest.add(value);
    return digest.value();
  }

 private:
  Shape shape_;
  std::int64_t classes_, size_;
  std::uint64_t seed_;
};

}  // namespace

std::shared_ptr<Dataset> make_synthetic(const Shape& sample_shape, std::int64_t classes,
                                        std::int64_t size, std::uint64_t seed) {
  if (sample_shape.empty() || numel(sample_shape) < 1) {
    throw std::runtime_error("synthetic data: shape must be a non-empty list of positive sizes");
  }
  if (classes < 1 || size < 1) {
    throw std::runtime_error("synthetic data: classes and size must be >= 1");
  }
  return std::make_shared<SyntheticDataset>(sample_shape, classes, size, seed);
}

}  // namespace trainer::data
