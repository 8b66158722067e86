// The Dataset defaults shared by every source.
#include "data/dataset.h"

#include <algorithm>
#include <vector>

#include "data/content_digest.h"

namespace trainer::data {

std::int64_t Dataset::max_label() const {
  if (!target_shape().empty()) return -1;
  std::vector<float> sample(static_cast<std::size_t>(numel(sample_shape())));
  std::int64_t best = -1;
  for (std::int64_t i = 0; i < size(); ++i) {
    std::int64_t label = -1;
    read(i, sample.data(), &label);
    best = std::max(best, label);
  }
  return best;
}

std::string Dataset::max_label_origin() const {
  if (!target_shape().empty()) return "";
  std::vector<float> sample(static_cast<std::size_t>(numel(sample_shape())));
  std::int64_t best = -1, where = -1;
  for (std::int64_t i = 0; i < size(); ++i) {
    std::int64_t label = -1;
    read(i, sample.data(), &label);
    if (label > best) best = label, where = i;
  }
  return where < 0 ? "" : "sample " + std::to_string(where) + " of " + describe();
}

std::uint64_t Dataset::content_digest() const {
  ContentDigest digest;
  std::vector<float> sample(static_cast<std::size_t>(numel(sample_shape())));
  std::vector<float> target(static_cast<std::size_t>(numel(target_shape())));
  const bool regression = !target_shape().empty();
  for (std::int64_t i = 0; i < size(); ++i) {
    std::int64_t label = -1;
    read(i, sample.data(), regression ? nullptr : &label, regression ? target.data() : nullptr);
    digest.add(sample.data(), sample.size() * sizeof(float));
    if (regression)
      digest.add(target.data(), target.size() * sizeof(float));
    else
      digest.add(static_cast<std::uint64_t>(label));
  }
  return digest.value();
}

}  // namespace trainer::data
