// The transforms and the pipeline builder.
#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "data/attr_values.h"

namespace trainer::data {
namespace {

// A transform's error about one of its keys; build_pipeline adds the item's
// place (TransformError).
class FieldError : public std::runtime_error {
 public:
  FieldError(std::string field, const std::string& message)
      : std::runtime_error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// A sample seen as channels x inner values (see the layout note in the header).
struct Planes {
  std::int64_t channels = 1;
  std::int64_t height = 1;
  std::int64_t width = 1;
};

Planes planes_of(const Shape& s) {
  if (s.size() == 1) return {s[0], 1, 1};
  if (s.size() == 2) return {1, s[0], s[1]};
  std::int64_t c = s[0], h = s[s.size() - 2], w = s[s.size() - 1];
  for (std::size_t i = 1; i + 2 < s.size(); ++i) c *= s[i];
  return {c, h, w};
}

Planes image_planes(const Shape& s, const char* transform) {
  if (s.size() < 2) {
    throw std::runtime_error(std::string("transform '") + transform +
                             "' needs image samples [C, H, W] or [H, W], got " + to_string(s));
  }
  return planes_of(s);
}

// For an error about samples `s`, which image transforms read as [C, H, W]: a
// note when they look channels-last ([H, W, 3] or [H, W, 4], as image arrays
// saved from NumPy often are), else "".
std::string channels_last_note(const Shape& s) {
  if (s.size() != 3 || s[0] == 1 || s[0] == 3 || s[0] == 4 || (s[2] != 3 && s[2] != 4)) return "";
  return "; samples are read as [C, H, W], and " + to_string(s) +
         " looks channels-last [H, W, C]: store the NPY x array as [N, C, H, W] "
         "(numpy: x.transpose(0, 3, 1, 2))";
}

Shape with_spatial(Shape s, std::int64_t h, std::int64_t w) {
  s[s.size() - 2] = h;
  s[s.size() - 1] = w;
  return s;
}

std::string list_text(const std::vector<double>& v) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << ']';
  return out.str();
}

class Scale final : public Transform {
 public:
  explicit Scale(double factor) : inverse_(static_cast<float>(1.0 / factor)), factor_(factor) {}
  void apply(const float* in, const Shape& shape, float* out, CounterRng&) const override {
    const std::int64_t n = numel(shape);
    for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] * inverse_;
  }
  std::string describe() const override {
    std::ostringstream out;
    out << "scale(1/" << factor_ << ")";
    return out.str();
  }

 private:
  float inverse_;
  double factor_;
};

class Normalize final : public Transform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std)
      : mean_(std::move(mean)), std_(std::move(std)) {}
  Shape output_shape(const Shape& in) const override {
    const std::int64_t c = planes_of(in).channels;
    for (const auto* list : {&mean_, &std_}) {
      if (list->size() != 1 && static_cast<std::int64_t>(list->size()) != c) {
        throw FieldError(
            list == &mean_ ? "mean" : "std",
            "transform 'normalize': mean and std need " +
                (c == 1 ? std::string("1 value") : "1 or " + std::to_string(c) + " values") +
                " (one per channel) for samples " + to_string(in) + ", got " +
                std::to_string(list->size()) + channels_last_note(in));
      }
    }
    return in;
  }
  void apply(const float* in, const Shape& shape, float* out, CounterRng&) const override {
    const Planes p = planes_of(shape);
    const std::int64_t inner = p.height * p.width;
    for (std::int64_t c = 0; c < p.channels; ++c) {
      const auto k = static_cast<std::size_t>(mean_.size() == 1 ? 0 : c);
      const float m = static_cast<float>(mean_[k]);
      const float inv = static_cast<float>(1.0 / std_[k]);
      for (std::int64_t i = c * inner; i < (c + 1) * inner; ++i) out[i] = (in[i] - m) * inv;
    }
  }
  std::string describe() const override {
    return "normalize(mean=" + list_text(mean_) + ", std=" + list_text(std_) + ")";
  }

 private:
  std::vector<double> mean_, std_;
};

// Pads by `padding` zeros on every side, then crops height x width at a random
// offset (training) or the centre (eval, centre_crop_offset).
class Crop final : public Transform {
 public:
  Crop(std::int64_t height, std::int64_t width, std::int64_t padding, bool random)
      : height_(height), width_(width), padding_(padding), random_(random) {}
  Shape output_shape(const Shape& in) const override {
    const Planes p = image_planes(in, "random_crop");
    if (height_ > p.height + 2 * padding_ || width_ > p.width + 2 * padding_) {
      throw FieldError("size", "transform 'random_crop': size [" + std::to_string(height_) + ", " +
                                   std::to_string(width_) + "] is larger than the padded " +
                                   "sample " + to_string(in) + " with padding " +
                                   std::to_string(padding_) + channels_last_note(in));
    }
    return with_spatial(in, height_, width_);
  }
  void apply(const float* in, const Shape& shape, float* out, CounterRng& rng) const override {
    const Planes p = planes_of(shape);
    const std::int64_t span_y = p.height + 2 * padding_ - height_;
    const std::int64_t span_x = p.width + 2 * padding_ - width_;
    const std::int64_t oy =
        random_ ? rng.between(0, span_y) - padding_ : centre_crop_offset(p.height, height_);
    const std::int64_t ox =
        random_ ? rng.between(0, span_x) - padding_ : centre_crop_offset(p.width, width_);
    for (std::int64_t c = 0; c < p.channels; ++c) {
      const float* src = in + c * p.height * p.width;
      float* dst = out + c * height_ * width_;
      for (std::int64_t y = 0; y < height_; ++y) {
        const std::int64_t sy = y + oy;
        float* row = dst + y * width_;
        if (sy < 0 || sy >= p.height) {
          std::fill_n(row, width_, 0.0f);
          continue;
        }
        for (std::int64_t x = 0; x < width_; ++x) {
          const std::int64_t sx = x + ox;
          row[x] = (sx >= 0 && sx < p.width) ? src[sy * p.width + sx] : 0.0f;
        }
      }
    }
  }
  bool random() const override { return random_; }
  // The centre crop pads nothing: a sample smaller than the size is centred
  // in zeros, whatever `padding` the training's crop has.
  std::string describe() const override {
    if (!random_)
      return "center_crop(" + std::to_string(height_) + "x" + std::to_string(width_) + ")";
    return "random_crop(" + std::to_string(height_) + "x" + std::to_string(width_) + ", padding " +
           std::to_string(padding_) + ")";
  }

 private:
  std::int64_t height_, width_, padding_;
  bool random_;
};

class Flip final : public Transform {
 public:
  explicit Flip(double p) : p_(p) {}
  Shape output_shape(const Shape& in) const override {
    image_planes(in, "random_flip");
    return in;
  }
  void apply(const float* in, const Shape& shape, float* out, CounterRng& rng) const override {
    const Planes p = planes_of(shape);
    if (rng.uniform() >= p_) {
      std::memcpy(out, in, sizeof(float) * static_cast<std::size_t>(numel(shape)));
      return;
    }
    for (std::int64_t row = 0; row < p.channels * p.height; ++row) {
      const float* src = in + row * p.width;
      float* dst = out + row * p.width;
      for (std::int64_t x = 0; x < p.width; ++x) dst[x] = src[p.width - 1 - x];
    }
  }
  bool random() const override { return true; }
  std::string describe() const override { return "random_flip(p=" + std::to_string(p_) + ")"; }

 private:
  double p_;
};

class Translate final : public Transform {
 public:
  explicit Translate(std::int64_t max) : max_(max) {}
  Shape output_shape(const Shape& in) const override {
    image_planes(in, "random_translate");
    return in;
  }
  void apply(const float* in, const Shape& shape, float* out, CounterRng& rng) const override {
    const Planes p = planes_of(shape);
    const std::int64_t dy = rng.between(-max_, max_);
    const std::int64_t dx = rng.between(-max_, max_);
    for (std::int64_t c = 0; c < p.channels; ++c) {
      const float* src = in + c * p.height * p.width;
      float* dst = out + c * p.height * p.width;
      for (std::int64_t y = 0; y < p.height; ++y) {
        const std::int64_t sy = y - dy;
        for (std::int64_t x = 0; x < p.width; ++x) {
          const std::int64_t sx = x - dx;
          const bool inside = sy >= 0 && sy < p.height && sx >= 0 && sx < p.width;
          dst[y * p.width + x] = inside ? src[sy * p.width + sx] : 0.0f;
        }
      }
    }
  }
  bool random() const override { return true; }
  std::string describe() const override {
    return "random_translate(max " + std::to_string(max_) + " px)";
  }

 private:
  std::int64_t max_;
};

// Random erasing (Zhong et al.): with probability p, one rectangle of random
// area fraction and aspect ratio is set to `value` in every channel.
class Erase final : public Transform {
 public:
  Erase(double p, std::vector<double> scale, std::vector<double> ratio, double value)
      : p_(p), scale_(std::move(scale)), ratio_(std::move(ratio)), value_(float(value)) {
    if (scale_.size() != 2 || ratio_.size() != 2 || scale_[0] > scale_[1] ||
        ratio_[0] > ratio_[1] || ratio_[0] <= 0) {
      throw std::runtime_error(
          "transform 'random_erasing': scale and ratio must be [low, high] ranges with "
          "0 < low <= high");
    }
  }
  Shape output_shape(const Shape& in) const override {
    image_planes(in, "random_erasing");
    return in;
  }
  void apply(const float* in, const Shape& shape, float* out, CounterRng& rng) const override {
    const Planes p = planes_of(shape);
    std::memcpy(out, in, sizeof(float) * static_cast<std::size_t>(numel(shape)));
    if (rng.uniform() >= p_) return;
    const double area = static_cast<double>(p.height * p.width);
    const double log_lo = std::log(ratio_[0]), log_hi = std::log(ratio_[1]);
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double target = area * rng.uniform(scale_[0], scale_[1]);
      const double aspect = std::exp(rng.uniform(log_lo, log_hi));
      const auto h = static_cast<std::int64_t>(std::lround(std::sqrt(target * aspect)));
      const auto w = static_cast<std::int64_t>(std::lround(std::sqrt(target / aspect)));
      if (h < 1 || w < 1 || h >= p.height || w >= p.width) continue;
      const std::int64_t y0 = rng.between(0, p.height - h);
      const std::int64_t x0 = rng.between(0, p.width - w);
      for (std::int64_t c = 0; c < p.channels; ++c) {
        for (std::int64_t y = y0; y < y0 + h; ++y) {
          std::fill_n(out + (c * p.height + y) * p.width + x0, w, value_);
        }
      }
      return;
    }
  }
  bool random() const override { return true; }
  std::string describe() const override {
    return "random_erasing(p=" + std::to_string(p_) + ", scale=" + list_text(scale_) +
           ", ratio=" + list_text(ratio_) + ")";
  }

 private:
  double p_;
  std::vector<double> scale_, ratio_;
  float value_;
};

// Channel statistics of `dataset` after the transforms in `prefix`.
ChannelStats stats_after(const Dataset& dataset, const std::vector<const Transform*>& prefix) {
  Shape shape = dataset.sample_shape();
  std::vector<Shape> shapes{shape};
  for (const Transform* t : prefix) shapes.push_back(shape = t->output_shape(shape));
  const Planes p = planes_of(shape);
  const std::int64_t inner = p.height * p.width;
  std::vector<double> sum(static_cast<std::size_t>(p.channels)), sq(sum.size());
  std::vector<float> a(static_cast<std::size_t>(numel(dataset.sample_shape()))), b;
  std::vector<float> target(
      static_cast<std::size_t>(std::max<std::int64_t>(1, numel(dataset.target_shape()))));
  CounterRng unused(0);
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    std::int64_t label = 0;
    a.resize(static_cast<std::size_t>(numel(shapes[0])));
    try {
      dataset.read(i, a.data(), &label, target.data());
    } catch (const std::runtime_error& e) {  // the data's error, not the transforms'
      throw SampleReadError(e.what());
    }
    for (std::size_t t = 0; t < prefix.size(); ++t) {
      b.resize(static_cast<std::size_t>(numel(shapes[t + 1])));
      prefix[t]->apply(a.data(), shapes[t], b.data(), unused);
      std::swap(a, b);
    }
    for (std::int64_t c = 0; c < p.channels; ++c) {
      double s = 0, q = 0;
      for (std::int64_t k = c * inner; k < (c + 1) * inner; ++k) {
        s += a[static_cast<std::size_t>(k)];
        q += double(a[static_cast<std::size_t>(k)]) * a[static_cast<std::size_t>(k)];
      }
      sum[static_cast<std::size_t>(c)] += s;
      sq[static_cast<std::size_t>(c)] += q;
    }
  }
  const double count = static_cast<double>(dataset.size() * inner);
  if (count == 0) throw std::runtime_error(dataset.describe() + ": no samples to compute mean/std");
  ChannelStats stats;
  for (std::size_t c = 0; c < sum.size(); ++c) {
    const double mean = sum[c] / count;
    const double var = std::max(0.0, sq[c] / count - mean * mean);
    stats.mean.push_back(mean);
    stats.std.push_back(var > 0 ? std::sqrt(var) : 1.0);  // constant channel: leave unscaled
  }
  return stats;
}

const char* const kKnownTransforms =
    "scale, normalize, random_crop, random_flip, random_translate, random_erasing";

}  // namespace

ChannelStats compute_channel_mean_std(const Dataset& dataset) {
  return stats_after(dataset, {});
}

Shape Pipeline::output_shape(const Shape& in) const {
  Shape s = in;
  for (const auto& t : transforms_) s = t->output_shape(s);
  return s;
}

void Pipeline::apply(const float* in, const Shape& in_shape, float* out, std::uint64_t seed,
                     std::int64_t epoch, std::int64_t index, PipelineScratch& scratch) const {
  if (transforms_.empty()) {
    std::memcpy(out, in, sizeof(float) * static_cast<std::size_t>(numel(in_shape)));
    return;
  }
  Shape shape = in_shape;
  const float* src = in;
  for (std::size_t t = 0; t < transforms_.size(); ++t) {
    const Transform& transform = *transforms_[t];
    const Shape next = transform.output_shape(shape);
    float* dst = out;
    if (t + 1 < transforms_.size()) {
      std::vector<float>& buffer = (t % 2 == 0) ? scratch.a : scratch.b;
      buffer.resize(static_cast<std::size_t>(numel(next)));
      dst = buffer.data();
    }
    CounterRng rng(
        hash_key({seed, static_cast<std::uint64_t>(RngPurpose::augment),
                  static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(index), t}));
    transform.apply(src, shape, dst, rng);
    src = dst;
    shape = next;
  }
}

std::string Pipeline::describe() const {
  std::string text;
  for (const auto& t : transforms_) text += (text.empty() ? "" : " ") + t->describe();
  return text.empty() ? "none" : text;
}

Pipeline build_pipeline(const std::vector<TransformSpec>& items, bool training,
                        const Dataset* stats_source, const Dataset* samples) {
  Pipeline pipeline;
  if (!samples) samples = stats_source;
  Shape shape = samples ? samples->sample_shape() : Shape{};
  for (std::size_t index = 0; index < items.size(); ++index) {
    try {
      const auto& [type, attrs] = items[index];
      std::unique_ptr<const Transform> t;
      Attrs resolved = attrs;
      if (type == "scale") {
        const double factor = number_or(attrs, "factor", 255.0);
        if (!(factor > 0)) throw FieldError("factor", "transform 'scale': factor must be > 0");
        t = std::make_unique<Scale>(factor);
      } else if (type == "normalize") {
        std::vector<double> mean = numbers_or(attrs, "mean", {});
        std::vector<double> std = numbers_or(attrs, "std", {});
        if (mean.empty() != std.empty()) {
          throw std::runtime_error(
              "transform 'normalize': give both mean and std, or neither "
              "(to compute them from the training set)");
        }
        if (mean.empty()) {
          if (!stats_source) {
            throw std::runtime_error(
                "transform 'normalize' has no mean/std and no training set "
                "to compute them from");
          }
          std::vector<const Transform*> prefix;
          for (const auto& done : pipeline.transforms_) {
            if (!done->random()) prefix.push_back(done.get());
          }
          ChannelStats stats = stats_after(*stats_source, prefix);
          mean = stats.mean;
          std = stats.std;
          resolved.set("mean", mean);
          resolved.set("std", std);
        }
        for (double s : std) {
          if (!(s > 0)) throw FieldError("std", "transform 'normalize': every std must be > 0");
        }
        t = std::make_unique<Normalize>(mean, std);
      } else if (type == "random_crop") {
        const std::vector<std::int64_t> size = ints_or(attrs, "size", {});
        const std::int64_t padding = int_or(attrs, "padding", 0);
        if (size.empty() || size.size() > 2 || size[0] < 1 || size.back() < 1 || padding < 0) {
          throw FieldError("size",
                           "transform 'random_crop': size must be one or two positive "
                           "integers and padding >= 0");
        }
        const std::int64_t h = size[0], w = size.back();
        if (training) {
          t = std::make_unique<Crop>(h, w, padding, true);
        } else if (shape.size() < 2 || shape[shape.size() - 2] != h || shape.back() != w) {
          t = std::make_unique<Crop>(h, w, padding, false);  // centre of the padded sample
        }
      } else if (type == "random_flip") {
        const double p = number_or(attrs, "p", 0.5);
        if (p < 0 || p > 1) throw FieldError("p", "transform 'random_flip': p must be in [0, 1]");
        if (training) t = std::make_unique<Flip>(p);
      } else if (type == "random_translate") {
        const std::int64_t max = int_or(attrs, "max", 2);
        if (max < 0) throw FieldError("max", "transform 'random_translate': max must be >= 0");
        if (training) t = std::make_unique<Translate>(max);
      } else if (type == "random_erasing") {
        const double p = number_or(attrs, "p", 0.5);
        auto e = std::make_unique<Erase>(p, numbers_or(attrs, "scale", {0.02, 0.33}),
                                         numbers_or(attrs, "ratio", {0.3, 3.3}),
                                         number_or(attrs, "value", 0.0));
        if (training) t = std::move(e);
      } else {
        throw FieldError("type", "unknown transform '" + type + "'; known: " + kKnownTransforms);
      }
      pipeline.resolved_.emplace_back(type, std::move(resolved));
      if (!t) continue;
      if (!shape.empty()) shape = t->output_shape(shape);
      pipeline.transforms_.push_back(std::move(t));
    } catch (const SampleReadError&) {
      throw;  // the data's, not the transform's
    } catch (const FieldError& e) {
      throw TransformError(index, e.field(), e.what());
    } catch (const std::runtime_error& e) {
      throw TransformError(index, "", e.what());
    }
  }
  return pipeline;
}

std::int64_t centre_crop_offset(std::int64_t extent, std::int64_t size) {
  const std::int64_t difference = extent - size;
  if (difference < 0) return -(-difference / 2);
  const std::int64_t half = difference / 2;
  return half + (difference % 2 == 1 && half % 2 == 1 ? 1 : 0);  // x.5 to the even
}

}  // namespace trainer::data
