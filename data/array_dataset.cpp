// In-memory dataset: validation at construction, conversion to float32 on read.
#include "data/array_dataset.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "data/content_digest.h"
#include "data/loader.h"  // kIgnoreLabel

namespace trainer::data {

ArrayDataset::ArrayDataset(ArrayData data) : data_(std::move(data)) {
  sample_numel_ = numel(data_.sample_shape);
  if (sample_numel_ <= 0) {
    throw std::runtime_error(data_.description + ": empty sample shape " +
                             to_string(data_.sample_shape));
  }
  const std::size_t values = std::visit([](const auto& v) { return v.size(); }, data_.samples);
  if (values % static_cast<std::size_t>(sample_numel_) != 0) {
    throw std::runtime_error(data_.description + ": " + std::to_string(values) +
                             " values do not divide into samples of shape " +
                             to_string(data_.sample_shape));
  }
  size_ = static_cast<std::int64_t>(values) / sample_numel_;
  if (size_ == 0) {
    throw std::runtime_error(data_.description + ": the data is empty (no samples of shape " +
                             to_string(data_.sample_shape) +
                             "); a training or evaluation set needs at least one sample");
  }
  const bool regression = !data_.target_shape.empty();
  if (regression && numel(data_.target_shape) <= 0) {
    throw std::runtime_error(data_.description + ": empty target shape " +
                             to_string(data_.target_shape));
  }
  const std::int64_t label_count =
      regression ? static_cast<std::int64_t>(data_.targets.size()) / numel(data_.target_shape)
                 : static_cast<std::int64_t>(data_.labels.size());
  if (label_count != size_) {
    throw std::runtime_error(data_.description + ": " + std::to_string(size_) + " samples but " +
                             std::to_string(label_count) + (regression ? " targets" : " labels") +
                             "; the counts must match");
  }
  if (regression) {
    data_.num_classes = 0;
    return;
  }
  for (std::size_t i = 0; i < data_.labels.size(); ++i) {
    const std::int64_t label = data_.labels[i];
    if (label == kIgnoreLabel) continue;  // no class: the loss leaves the sample out
    if (label < 0 || (data_.num_classes > 0 && label >= data_.num_classes)) {
      throw std::runtime_error(
          "label " + std::to_string(label) + " of " + sample_origin(static_cast<std::int64_t>(i)) +
          (data_.num_classes > 0 ? " is outside [0, " + std::to_string(data_.num_classes) + ")"
                                 : std::string(" is negative")) +
          (label < 0 ? " (and is not " + std::to_string(kIgnoreLabel) +
                           ", the label of an ignored sample): correct the label"
                     : ": correct the label, or set classes above " + std::to_string(label)));
    }
    if (label > max_label_) {
      max_label_ = label;
      max_label_sample_ = static_cast<std::int64_t>(i);
    }
  }
  classes_inferred_ = data_.num_classes == 0;
  if (max_label_ < 0 && size_ > 0) {  // a whole run (or evaluation) of "loss none"
    throw std::runtime_error(data_.description + ": every label is " +
                             std::to_string(kIgnoreLabel) + " (an ignored sample): " +
                             (classes_inferred_
                                  ? std::string("there is no class to infer the classes from")
                                  : std::string("no sample has a class to train on or score")) +
                             "; check the label column or file");
  }
  // max_label + 1, but a label of INT64_MAX (one damaged int64) has no count
  // of classes above it: the largest count stands in, which the session's
  // check reports at that label's place like any other far too large.
  if (classes_inferred_)
    data_.num_classes = max_label_ < std::numeric_limits<std::int64_t>::max()
                            ? max_label_ + 1
                            : std::numeric_limits<std::int64_t>::max();
}

std::string ArrayDataset::max_label_origin() const {
  return max_label_sample_ < 0 ? "" : sample_origin(max_label_sample_);
}

std::string ArrayDataset::sample_origin(std::int64_t sample) const {
  if (data_.label_origin) return data_.label_origin(sample);
  return "sample " + std::to_string(sample) + " of " + data_.description;
}

std::uint64_t ArrayDataset::content_digest() const {
  return digest_.get([this] {
    ContentDigest digest;
    const auto add_shape = [&](const Shape& shape) {
      digest.add(shape.data(), shape.size() * sizeof(shape[0]));
    };
    add_shape(data_.sample_shape);
    // Names only where there are some: the digests of unnamed data stay as
    // they were before names were read.
    for (const std::string& name : data_.class_names) {
      digest.add(std::uint64_t{name.size()});
      digest.add(name);
    }
    std::visit([&](const auto& v) { digest.add(v.data(), v.size() * sizeof(v[0])); },
               data_.samples);
    add_shape(data_.target_shape);
    if (data_.target_shape.empty())
      digest.add(data_.labels.data(), data_.labels.size() * sizeof(data_.labels[0]));
    else
      digest.add(data_.targets.data(), data_.targets.size() * sizeof(data_.targets[0]));
    return digest.value();
  });
}

void ArrayDataset::read(std::int64_t index, float* sample, std::int64_t* label,
                        float* target) const {
  if (index < 0 || index >= size_) {
    throw std::out_of_range(data_.description + ": sample index " + std::to_string(index) +
                            " outside [0, " + std::to_string(size_) + ")");
  }
  const std::size_t begin = static_cast<std::size_t>(index * sample_numel_);
  if (const auto* bytes = std::get_if<std::vector<std::uint8_t>>(&data_.samples)) {
    const std::uint8_t* src = bytes->data() + begin;
    for (std::int64_t i = 0; i < sample_numel_; ++i) sample[i] = static_cast<float>(src[i]);
  } else {
    const auto& floats = std::get<std::vector<float>>(data_.samples);
    std::copy_n(floats.data() + begin, sample_numel_, sample);
  }
  if (!data_.target_shape.empty()) {
    const std::int64_t n = numel(data_.target_shape);
    if (target) std::copy_n(data_.targets.data() + index * n, n, target);
    if (label) *label = 0;
  } else if (label) {
    *label = data_.labels[static_cast<std::size_t>(index)];
  }
}

}  // namespace trainer::data
