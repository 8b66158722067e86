// Subset views and the seeded train/eval split.
#include "data/split.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "data/content_digest.h"
#include "data/rng.h"

namespace trainer::data {

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<std::int64_t> indices,
                             std::string label)
    : base_(std::move(base)), indices_(std::move(indices)), label_(std::move(label)) {}

void SubsetDataset::read(std::int64_t index, float* sample, std::int64_t* label,
                         float* target) const {
  if (index < 0 || index >= size()) {
    throw std::out_of_range(describe() + ": sample index " + std::to_string(index) +
                            " outside [0, " + std::to_string(size()) + ")");
  }
  base_->read(indices_[static_cast<std::size_t>(index)], sample, label, target);
}

std::string SubsetDataset::describe() const {
  return label_ + " of " + base_->describe();
}

std::uint64_t SubsetDataset::content_digest() const {
  ContentDigest digest;
  digest.add(base_->content_digest());
  digest.add(indices_.data(), indices_.size() * sizeof(indices_[0]));
  return digest.value();
}

std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> split_dataset(
    std::shared_ptr<const Dataset> dataset, double fraction, std::uint64_t seed) {
  if (!(fraction > 0 && fraction < 1)) {
    throw std::runtime_error("data split: fraction must be in (0, 1), got " +
                             std::to_string(fraction));
  }
  const std::int64_t n = dataset->size();
  const auto eval_count = static_cast<std::int64_t>(std::llround(fraction * double(n)));
  if (eval_count < 1 || eval_count >= n) {
    throw std::runtime_error("data split: " + std::to_string(fraction) + " of " +
                             std::to_string(n) + " samples leaves an empty train or eval part");
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  CounterRng rng(hash_key({seed, static_cast<std::uint64_t>(RngPurpose::split)}));
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1)));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  std::vector<std::int64_t> eval(order.begin(), order.begin() + eval_count);
  std::vector<std::int64_t> train(order.begin() + eval_count, order.end());
  std::sort(eval.begin(), eval.end());
  std::sort(train.begin(), train.end());
  const std::string pct = std::to_string(static_cast<int>(std::lround(fraction * 100)));
  return {std::make_shared<SubsetDataset>(dataset, std::move(train), "train split"),
          std::make_shared<SubsetDataset>(dataset, std::move(eval), pct + "% eval split")};
}

}  // namespace trainer::data
