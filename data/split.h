// Holding out part of a dataset for evaluation, and index views of datasets.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace trainer::data {

// A view of `base` holding the samples at `indices` (in that order).
class SubsetDataset final : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<std::int64_t> indices,
                std::string label);
  std::int64_t size() const override { return static_cast<std::int64_t>(indices_.size()); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  std::int64_t num_classes() const override { return base_->num_classes(); }
  Shape target_shape() const override { return base_->target_shape(); }
  void read(std::int64_t index, float* sample, std::int64_t* label,
            float* target = nullptr) const override;
  std::string describe() const override;
  // The base's: its largest label decides num_classes(), wherever it is.
  bool classes_inferred() const override { return base_->classes_inferred(); }
  std::int64_t max_label() const override { return base_->max_label(); }
  std::string max_label_origin() const override { return base_->max_label_origin(); }
  std::vector<std::string> class_names() const override { return base_->class_names(); }
  std::string class_names_key() const override { return base_->class_names_key(); }
  std::vector<std::string> feature_names() const override { return base_->feature_names(); }
  // The base's with the indices: another split of the same data differs.
  std::uint64_t content_digest() const override;
  // Indices into the base dataset.
  const std::vector<std::int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<std::int64_t> indices_;
  std::string label_;
};

// Splits `dataset` into (train, eval) views: a permutation seeded by `seed`
// puts round(fraction * size) samples in eval and the rest in train (each in
// ascending base order). Deterministic; throws for a fraction outside (0, 1)
// or a split that leaves either side empty.
std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> split_dataset(
    std::shared_ptr<const Dataset> dataset, double fraction, std::uint64_t seed);

}  // namespace trainer::data
