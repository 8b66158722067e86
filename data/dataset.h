// Dataset: random access to labelled samples, the one interface every on-disk
// format (IDX, CIFAR, NPY, CSV, image folders) and the synthetic source implement.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/shape.h"

namespace trainer::data {

// A sample that could not be read or transformed (a damaged file, a value
// out of range), naming the sample and its source: in the loader, the error
// of the batch that holds it (nothing of that batch reached the caller); in
// the transforms' statistics, the error of the sample they read.
class SampleReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  // Shape of one sample, without the batch dimension ([1, 28, 28], [3, 32, 32], [13]).
  virtual Shape sample_shape() const = 0;
  // Number of classes for classification data; 0 for regression targets.
  virtual std::int64_t num_classes() const = 0;
  // Shape of one regression target (empty for class labels).
  virtual Shape target_shape() const { return {}; }
  // Writes sample `index` as float32 (raw values, before transforms) into `sample`
  // (numel(sample_shape()) floats) and its class into `label` (or, for regression,
  // numel(target_shape()) floats into `target`). Thread-safe; throws
  // std::runtime_error naming the file and sample on bad data.
  virtual void read(std::int64_t index, float* sample, std::int64_t* label,
                    float* target = nullptr) const = 0;
  // Where the data comes from, for logs and errors ("/usr/share/.../train-images-idx3-ubyte.gz").
  virtual std::string describe() const = 0;
  // The largest class label in the data (-1 when empty or regression), so the
  // trainer can check it against the model's classes before training. The
  // default reads every sample; in-memory sources override it.
  virtual std::int64_t max_label() const;
  // Whether num_classes() was inferred as max_label() + 1 (the source was given
  // no `classes:`), so that one wrong label can make it far too large.
  virtual bool classes_inferred() const { return false; }
  // Where the largest label is, for errors: "line 7 of CSV file 'a.csv'",
  // "element 4 of NPY file 'y.npy'" ("" when there is none). The default
  // reads every sample and names "sample <i> of <describe()>".
  virtual std::string max_label_origin() const;
  // The name of each class by label, where the source names them (image
  // folders: the class sub-folders; a CSV label column of names); empty
  // otherwise.
  virtual std::vector<std::string> class_names() const { return {}; }
  // The source's key that gives the class names ("root", "label"), for errors.
  virtual std::string class_names_key() const { return "root"; }
  // The name of each of a sample's features, in order, where the source names
  // them (a CSV file's header); empty otherwise.
  virtual std::vector<std::string> feature_names() const { return {}; }
  // A digest of what the dataset serves, to tell that the data changed under
  // a run (the manifest and every checkpoint record the training set's). The
  // default reads every sample and digests its values and label; in-memory
  // sources digest their arrays, image folders their listing (each image's
  // path in the folder, size in bytes and class: not the pixels). Where the
  // files are does not enter it. A run asks at every checkpoint: a source
  // whose digest is costly computes it once (CachedDigest).
  virtual std::uint64_t content_digest() const;
};

}  // namespace trainer::data
