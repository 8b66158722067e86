// ArrayDataset: a dataset held entirely in memory (samples as uint8 or float32,
// labels as int64 classes or float32 regression targets). The IDX, CIFAR, NPY
// and CSV sources read their files once and hand the arrays to this class.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "data/content_digest.h"
#include "data/dataset.h"

namespace trainer::data {

struct ArrayData {
  Shape sample_shape;  // one sample, without the batch dimension
  std::variant<std::vector<std::uint8_t>, std::vector<float>> samples;  // [N, sample_shape]
  std::vector<std::int64_t> labels;  // [N] class labels (classification)
  Shape target_shape;                // non-empty for regression
  std::vector<float> targets;        // [N, target_shape] (regression)
  std::int64_t num_classes = 0;      // 0: infer max label + 1 (classification; INT64_MAX at most)
  std::string description;           // files, for logs and errors
  std::vector<std::string> feature_names;  // a CSV header's names of the features, in order
  // The name of each class by label, where the labels were written as names
  // (a CSV label column), and the source's key that reads them ("label").
  std::vector<std::string> class_names;
  std::string class_names_key;
  // Where sample i's label is in the files ("element 4 of NPY file 'y.npy'"),
  // for errors; unset: "sample 4 of <description>".
  std::function<std::string(std::int64_t sample)> label_origin;
};

class ArrayDataset final : public Dataset {
 public:
  // Validates sizes and labels; throws std::runtime_error naming `description`
  // for no samples, an empty sample or target shape, a count mismatch or a
  // label outside [0, num_classes) other than kIgnoreLabel (-100, PyTorch's
  // ignore_index: a sample the loss leaves out, in no class).
  explicit ArrayDataset(ArrayData data);

  std::int64_t size() const override { return size_; }
  Shape sample_shape() const override { return data_.sample_shape; }
  std::int64_t num_classes() const override { return data_.num_classes; }
  Shape target_shape() const override { return data_.target_shape; }
  void read(std::int64_t index, float* sample, std::int64_t* label,
            float* target = nullptr) const override;
  std::string describe() const override { return data_.description; }
  std::vector<std::string> feature_names() const override { return data_.feature_names; }
  std::vector<std::string> class_names() const override { return data_.class_names; }
  std::string class_names_key() const override { return data_.class_names_key; }
  std::int64_t max_label() const override { return max_label_; }
  bool classes_inferred() const override { return classes_inferred_; }
  std::string max_label_origin() const override;
  // Of the arrays (computed once, when first asked).
  std::uint64_t content_digest() const override;

 private:
  // Where sample `sample`'s label is: its label_origin, or its index.
  std::string sample_origin(std::int64_t sample) const;

  ArrayData data_;
  CachedDigest digest_;
  std::int64_t size_ = 0;
  std::int64_t sample_numel_ = 0;
  std::int64_t max_label_ = -1;
  std::int64_t max_label_sample_ = -1;
  bool classes_inferred_ = false;
};

}  // namespace trainer::data
