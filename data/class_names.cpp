// A Dataset wrapper that renumbers labels (class_names.h).
#include "data/class_names.h"

#include <algorithm>

#include "data/content_digest.h"
#include "data/sources.h"

namespace trainer::data {
namespace {

class RelabelledDataset final : public Dataset {
 public:
  RelabelledDataset(std::shared_ptr<const Dataset> base, std::vector<std::int64_t> label_of,
                    std::vector<std::string> names)
      : base_(std::move(base)), label_of_(std::move(label_of)), names_(std::move(names)) {}
  std::int64_t size() const override { return base_->size(); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  std::int64_t num_classes() const override { return static_cast<std::int64_t>(names_.size()); }
  void read(std::int64_t index, float* sample, std::int64_t* label, float* target) const override {
    base_->read(index, sample, label, target);
    if (label && *label >= 0 && *label < static_cast<std::int64_t>(label_of_.size()))
      *label = label_of_[static_cast<std::size_t>(*label)];
  }
  std::string describe() const override { return base_->describe(); }
  std::int64_t max_label() const override {
    return label_of_.empty() ? -1 : *std::max_element(label_of_.begin(), label_of_.end());
  }
  std::vector<std::string> class_names() const override { return names_; }
  std::string class_names_key() const override { return base_->class_names_key(); }
  std::uint64_t content_digest() const override {
    ContentDigest digest;
    digest.add(base_->content_digest());
    digest.add(label_of_.data(), label_of_.size() * sizeof(label_of_[0]));
    return digest.value();
  }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<std::int64_t> label_of_;  // eval label -> training label
  std::vector<std::string> names_;
};

}  // namespace

std::shared_ptr<Dataset> relabel_by_class_names(std::shared_ptr<const Dataset> eval,
                                                const std::vector<std::string>& train_names,
                                                const std::string& named_by) {
  std::vector<std::int64_t> label_of;
  std::vector<std::string> missing;
  for (const std::string& name : eval->class_names()) {
    const auto at = std::find(train_names.begin(), train_names.end(), name);
    if (at == train_names.end()) missing.push_back("'" + name + "'");
    label_of.push_back(at - train_names.begin());
  }
  if (!missing.empty()) {
    std::string list, known;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    for (const auto& t : train_names) known += (known.empty() ? "'" : ", '") + t + "'";
    throw SourceFieldError(eval->class_names_key(),
                           eval->describe() + " has class(es) " + list + " that " + named_by +
                               " does not have (its classes: " + known +
                               "); the model has no output for them: rename or remove them");
  }
  return std::make_shared<RelabelledDataset>(std::move(eval), std::move(label_of), train_names);
}

}  // namespace trainer::data
