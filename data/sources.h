// Opening each on-disk format (and the synthetic source) as a Dataset. These
// are the functions behind the SourceDefs of data/registry.cpp; they can also
// be called directly. Every one throws std::runtime_error naming the file, the
// byte offset or line, and what was expected.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace trainer::data {

// An error about one setting of a source rather than its files (a CSV column
// the file lacks, channels an image folder cannot give): the config layer
// reports it at that setting's key.
class SourceFieldError : public std::runtime_error {
 public:
  SourceFieldError(std::string field, const std::string& message)
      : std::runtime_error(message), field_(std::move(field)) {}
  // For a name the data does not have (a CSV column): the name given and the
  // names there are, so the caller can suggest the nearest.
  SourceFieldError(std::string field, const std::string& message, std::string given,
                   std::vector<std::string> choices)
      : std::runtime_error(message),
        field_(std::move(field)),
        given_(std::move(given)),
        choices_(std::move(choices)) {}
  const std::string& field() const { return field_; }
  const std::string& given() const { return given_; }
  const std::vector<std::string>& choices() const { return choices_; }

 private:
  std::string field_;
  std::string given_;
  std::vector<std::string> choices_;
};

// IDX (MNIST / Fashion-MNIST), raw or .gz. Images: unsigned-byte IDX with >= 2
// dims ([N, H, W] becomes samples [1, H, W]); labels: unsigned-byte [N].
// Samples are the raw values 0..255 as float32. `classes` 0: max label + 1.
std::shared_ptr<Dataset> open_idx(const std::string& images, const std::string& labels,
                                  std::int64_t classes = 0);

// CIFAR-10 / CIFAR-100 binary batches: records of <label byte(s)><3072 pixel
// bytes> in CHW order. CIFAR-100 records carry <coarse><fine>; `label` picks one.
enum class CifarVariant { cifar10, cifar100 };
std::shared_ptr<Dataset> open_cifar(const std::vector<std::string>& files, CifarVariant variant,
                                    bool fine_labels = true);

// A NumPy .npy pair: x [N, ...] (uint8, float32 or int64) and y [N] (integer
// class labels) or y [N, ...] float32/float64 (regression targets).
std::shared_ptr<Dataset> open_npy(const std::string& x_path, const std::string& y_path,
                                  std::int64_t classes = 0);

// CSV: numeric features and one label column. With a header, columns are
// selected by name; without one, `label` may be a 0-based column index.
// Empty `features`: every column but the label.
struct CsvOptions {
  std::string path;
  std::string label;                  // column name (or index without header); empty: last
  std::vector<std::string> features;  // empty: all other columns
  bool header = true;
  char delimiter = ',';
  bool regression = false;  // label is a float target instead of a class
  std::int64_t classes = 0;
};
std::shared_ptr<Dataset> open_csv(const CsvOptions& options);

// Image folders: root/<class>/.../<image>.png|jpg|jpeg (at any depth below the
// class folder; see list_class_images for the order, and the error for images
// of other formats), classes in sorted folder order, every image decoded on
// read and resized (bilinear, antialiased when shrinking, as PIL's) to height
// x width with `channels` 1 (grey) or 3 (RGB). Samples are [channels, height,
// width] with raw values 0..255.
std::shared_ptr<Dataset> open_image_folder(const std::string& root, std::int64_t height,
                                           std::int64_t width, std::int64_t channels);

// Random samples uniform in [0, 1) with uniform labels; a pure function of
// (seed, index), so any reader sees the same data.
std::shared_ptr<Dataset> make_synthetic(const Shape& sample_shape, std::int64_t classes,
                                        std::int64_t size, std::uint64_t seed);

}  // namespace trainer::data
