// Per-sample transforms (scale, normalize, random crop/flip/translate/erasing)
// and the Pipeline that chains them. Samples are float32 in [C, H, W] layout
// ([H, W] counts as one channel; a flat [F] sample has F channels of one value,
// so `normalize` works per feature on tabular data). A random transform draws
// only from CounterRng(seed, epoch, sample index, its position in the list),
// so a batch is bit-identical whichever worker thread built it.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/rng.h"
#include "ops/field.h"

namespace trainer::data {

class Transform {
 public:
  virtual ~Transform() = default;
  virtual Shape output_shape(const Shape& in) const { return in; }
  // Writes the transformed `in` (shape `in_shape`) into `out`
  // (numel(output_shape(in_shape)) floats). `in` and `out` never alias.
  virtual void apply(const float* in, const Shape& in_shape, float* out, CounterRng& rng) const = 0;
  virtual bool random() const { return false; }
  virtual std::string describe() const = 0;
};

// One `{type: name, ...}` transform item, as the config layer hands it over.
using TransformSpec = std::pair<std::string, Attrs>;

struct ChannelStats {
  std::vector<double> mean;
  std::vector<double> std;
};

// Per-channel mean and standard deviation over every sample of `dataset`
// (raw values, before transforms).
ChannelStats compute_channel_mean_std(const Dataset& dataset);

// Scratch space a thread reuses for every sample (no allocation per sample
// once it has grown to the largest intermediate).
struct PipelineScratch {
  std::vector<float> a, b;
};

class Pipeline {
 public:
  Pipeline() = default;

  // Output shape for samples of `in` (throws if a transform cannot take `in`).
  Shape output_shape(const Shape& in) const;
  // Applies every transform to one sample.
  void apply(const float* in, const Shape& in_shape, float* out, std::uint64_t seed,
             std::int64_t epoch, std::int64_t index, PipelineScratch& scratch) const;
  bool empty() const { return transforms_.empty(); }
  // The items with every value resolved (including a computed normalize
  // mean/std), so the run can record what it used.
  const std::vector<TransformSpec>& resolved() const { return resolved_; }
  std::string describe() const;  // "scale(255) normalize(mean=[0.286], std=[0.353])"

 private:
  friend Pipeline build_pipeline(const std::vector<TransformSpec>&, bool, const Dataset*,
                                 const Dataset*);
  std::vector<std::unique_ptr<const Transform>> transforms_;
  std::vector<TransformSpec> resolved_;
};

// An error of the transform at `index` of its list (0-based), about its key
// `field` ("size"; "" when about the transform as a whole), so that it is
// reported at that key.
class TransformError : public std::runtime_error {
 public:
  TransformError(std::size_t index, std::string field, const std::string& message)
      : std::runtime_error(message), index_(index), field_(std::move(field)) {}
  std::size_t index() const { return index_; }
  const std::string& field() const { return field_; }

 private:
  std::size_t index_;
  std::string field_;
};

// Builds a pipeline from transform items. `training` false (eval) drops the
// random transforms, except that random_crop becomes a centre crop
// (centre_crop_offset, into the padding when larger than the sample) unless the sample already has
// the crop size. A normalize without mean/std computes them once from `stats_source` (the training
// set) passed through the deterministic transforms before it; pass the training pipeline's
// resolved() items to the eval pipeline to reuse them. `samples` is the data the pipeline
// transforms (its sample shape decides the eval crop; `stats_source` when null). Throws
// std::runtime_error for an unknown type (listing the known ones) or a value that cannot work with
// the samples: a TransformError naming the item, except for a sample that
// normalize's statistics cannot read (SampleReadError, the data's error).
Pipeline build_pipeline(const std::vector<TransformSpec>& items, bool training,
                        const Dataset* stats_source, const Dataset* samples = nullptr);

// Where an evaluation's centre crop of `size` starts along a side of
// `extent` (negative: in the padding), as torchvision's CenterCrop places it:
// half the difference rounded half to even (Python's round), and a crop
// larger than the side centred with the smaller half of the zeros first.
std::int64_t centre_crop_offset(std::int64_t extent, std::int64_t size);

}  // namespace trainer::data
