// Matching an evaluation set's classes to the training set's by name: image
// folders number their class sub-folders in sorted order, so an evaluation
// folder that lacks one of the training classes would number the rest
// differently. The evaluation labels are mapped to the training labels of the
// same names instead.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace trainer::data {

// `eval` with each label replaced by the position of its class name in
// `train_names`, and train_names.size() classes. `eval` must name its classes
// (Dataset::class_names). Throws SourceFieldError(eval->class_names_key(), ...)
// naming the classes of `eval` that `train_names` lacks, and whose names those
// are (`named_by`: "the training set", "the run").
std::shared_ptr<Dataset> relabel_by_class_names(std::shared_ptr<const Dataset> eval,
                                                const std::vector<std::string>& train_names,
                                                const std::string& named_by = "the training set");

}  // namespace trainer::data
