// Tests of the transforms and the pipeline builder: each transform's effect,
// seeding, eval behaviour, computed normalisation and configuration errors.
// labels: cpu
// links: trainer_data
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "data/registry.h"
#include "data/sources.h"
#include "data/transforms.h"

using namespace trainer;
using namespace trainer::data;
using Catch::Matchers::Contains;

namespace {

// A [2, 4, 5] sample with distinct values 1..40.
std::vector<float> ramp() {
  std::vector<float> v(40);
  for (int i = 0; i < 40; ++i) v[static_cast<std::size_t>(i)] = float(i + 1);
  return v;
}
const Shape kShape{2, 4, 5};

std::vector<float> run(const Pipeline& p, const std::vector<float>& in, const Shape& shape,
                       std::int64_t epoch = 0, std::int64_t index = 0, std::uint64_t seed = 1) {
  std::vector<float> out(static_cast<std::size_t>(numel(p.output_shape(shape))));
  PipelineScratch scratch;
  p.apply(in.data(), shape, out.data(), seed, epoch, index, scratch);
  return out;
}

Pipeline one(const std::string& type, Attrs attrs, bool training = true) {
  return build_pipeline({{type, std::move(attrs)}}, training, nullptr);
}

float at(const std::vector<float>& v, int c, int y, int x, int h = 4, int w = 5) {
  return v[static_cast<std::size_t>((c * h + y) * w + x)];
}

// A dataset of two [2, 1, 2] samples: channel 0 = {0, 2} and {4, 6}, channel 1 = 10.
class TinyDataset final : public Dataset {
 public:
  std::int64_t size() const override { return 2; }
  Shape sample_shape() const override { return {2, 1, 2}; }
  std::int64_t num_classes() const override { return 1; }
  void read(std::int64_t i, float* s, std::int64_t* label, float* = nullptr) const override {
    s[0] = float(4 * i);
    s[1] = float(4 * i + 2);
    s[2] = s[3] = 10.0f;
    *label = 0;
  }
  std::string describe() const override { return "tiny"; }
};

// Zero samples of a given shape.
class ZerosDataset final : public Dataset {
 public:
  explicit ZerosDataset(Shape shape) : shape_(std::move(shape)) {}
  std::int64_t size() const override { return 1; }
  Shape sample_shape() const override { return shape_; }
  std::int64_t num_classes() const override { return 1; }
  void read(std::int64_t, float* s, std::int64_t* label, float* = nullptr) const override {
    std::fill(s, s + numel(shape_), 0.0f);
    *label = 0;
  }
  std::string describe() const override { return "zeros"; }

 private:
  Shape shape_;
};

}  // namespace

TEST_CASE("scale divides by the factor (255 by default)") {
  auto out = run(one("scale", {}), ramp(), kShape);
  CHECK(out[9] == Approx(10.0 / 255));
  Attrs a;
  a.set("factor", 2.0);
  CHECK(run(one("scale", a), ramp(), kShape)[9] == 5.0f);
}

TEST_CASE("normalize uses per-channel or broadcast mean and std") {
  Attrs a;
  a.set("mean", std::vector<double>{1.0, 21.0});
  a.set("std", std::vector<double>{2.0, 4.0});
  auto out = run(one("normalize", a), ramp(), kShape);
  CHECK(out[0] == 0.0f);           // (1 - 1) / 2
  CHECK(out[19] == Approx(9.5));   // (20 - 1) / 2
  CHECK(out[20] == Approx(0.0));   // (21 - 21) / 4
  CHECK(out[39] == Approx(4.75));  // (40 - 21) / 4
  Attrs three;
  three.set("mean", std::vector<double>{0, 0, 0});
  three.set("std", std::vector<double>{1, 1, 1});
  CHECK_THROWS_WITH(one("normalize", three).output_shape(kShape), Contains("need 1 or 2 values"));
  CHECK_THROWS_WITH(one("normalize", a).output_shape({1, 28, 28}),
                    Contains("mean and std need 1 value (one per channel) for samples [1, 28, 28], "
                             "got 2"));
}

TEST_CASE("a channels-last sample ([H, W, 3]) is named as such in normalize and crop errors") {
  Attrs rgb;
  rgb.set("mean", std::vector<double>{0.5, 0.5, 0.5});
  rgb.set("std", std::vector<double>{0.25, 0.25, 0.25});
  CHECK_THROWS_WITH(
      one("normalize", rgb).output_shape({32, 32, 3}),
      Contains("need 1 or 32 values (one per channel) for samples [32, 32, 3], got 3; samples "
               "are read as [C, H, W], and [32, 32, 3] looks channels-last [H, W, C]") &&
          Contains("x.transpose(0, 3, 1, 2)"));
  Attrs crop;
  crop.set("size", std::vector<std::int64_t>{28, 28});
  CHECK_THROWS_WITH(one("random_crop", crop).output_shape({28, 28, 4}),
                    Contains("looks channels-last") && Contains("x.transpose(0, 3, 1, 2)"));
  // Channels first, or a first dimension that may well be channels: no such note.
  CHECK_THROWS_WITH(one("normalize", rgb).output_shape({2, 8, 8}), !Contains("channels-last"));
  CHECK_THROWS_WITH(one("normalize", rgb).output_shape({4, 8, 3}), !Contains("channels-last"));
  CHECK_THROWS_WITH(one("random_crop", crop).output_shape({3, 8, 8}), !Contains("channels-last"));
}

TEST_CASE("a transform's error names its place in the list and the key it is about") {
  const TinyDataset data;  // samples [2, 1, 2]
  const auto error_of = [&](const std::vector<TransformSpec>& items) {
    try {
      build_pipeline(items, true, &data);
    } catch (const TransformError& e) {
      return std::make_pair(e.index(), e.field());
    }
    FAIL("no TransformError");
    return std::make_pair(std::size_t{0}, std::string());
  };
  Attrs crop;
  crop.set("size", std::vector<std::int64_t>{4, 4});
  CHECK(error_of({{"scale", {}}, {"random_crop", crop}}) ==
        std::make_pair(std::size_t{1}, std::string("size")));
  Attrs mean;
  mean.set("mean", std::vector<double>{0.5, 0.5, 0.5});
  mean.set("std", std::vector<double>{0.5});
  CHECK(error_of({{"normalize", mean}}) == std::make_pair(std::size_t{0}, std::string("mean")));
  Attrs flip;
  flip.set("p", 2.0);
  CHECK(error_of({{"scale", {}}, {"scale", {}}, {"random_flip", flip}}) ==
        std::make_pair(std::size_t{2}, std::string("p")));
  CHECK(error_of({{"scale", {}}, {"sharpen", {}}}) ==
        std::make_pair(std::size_t{1}, std::string("type")));
  // About the transform as a whole: no key.
  Attrs half;
  half.set("mean", std::vector<double>{0.5});
  CHECK(error_of({{"normalize", half}}) == std::make_pair(std::size_t{0}, std::string()));
}

TEST_CASE("normalize without mean/std computes them from the training set, after scale") {
  TinyDataset d;
  const ChannelStats raw = compute_channel_mean_std(d);
  REQUIRE(raw.mean.size() == 2);
  CHECK(raw.mean[0] == Approx(3.0));            // mean of 0, 2, 4, 6
  CHECK(raw.std[0] == Approx(std::sqrt(5.0)));  // population std
  CHECK(raw.mean[1] == Approx(10.0));
  CHECK(raw.std[1] == 1.0);  // constant channel stays unscaled

  Attrs scale;
  scale.set("factor", 2.0);
  Pipeline p = build_pipeline({{"scale", scale}, {"normalize", {}}}, true, &d);
  const auto& resolved = p.resolved()[1].second;
  REQUIRE(resolved.has("mean"));
  const auto mean = std::get<std::vector<double>>(resolved.values().at("mean"));
  CHECK(mean[0] == Approx(1.5));
  CHECK(mean[1] == Approx(5.0));
  // Normalised training samples have mean 0 per channel.
  std::vector<float> s(4);
  std::int64_t label;
  double sum = 0;
  for (int i = 0; i < 2; ++i) {
    d.read(i, s.data(), &label);
    auto out = run(p, s, {2, 1, 2});
    sum += out[0] + out[1];
  }
  CHECK(sum == Approx(0.0).margin(1e-6));
  CHECK_THROWS_WITH(build_pipeline({{"normalize", {}}}, true, nullptr),
                    Contains("no training set"));
}

TEST_CASE("random_crop with padding takes a shifted window of the padded sample") {
  Attrs a;
  a.set("size", std::vector<std::int64_t>{3, 4});
  a.set("padding", std::int64_t{2});
  Pipeline p = one("random_crop", a);
  CHECK(p.output_shape(kShape) == Shape{2, 3, 4});
  const auto in = ramp();
  std::set<std::pair<int, int>> offsets;
  for (int index = 0; index < 200; ++index) {
    const auto out = run(p, in, kShape, 0, index);
    // Find the offset (oy, ox) in [-2, 2] x [-2, 3] that explains every value.
    int matches = 0;
    for (int oy = -2; oy <= 3; ++oy) {
      for (int ox = -2; ox <= 3; ++ox) {
        bool ok = true;
        for (int c = 0; c < 2 && ok; ++c)
          for (int y = 0; y < 3 && ok; ++y)
            for (int x = 0; x < 4 && ok; ++x) {
              const int sy = y + oy, sx = x + ox;
              const float expect = (sy >= 0 && sy < 4 && sx >= 0 && sx < 5) ? at(in, c, sy, sx) : 0;
              ok = at(out, c, y, x, 3, 4) == expect;
            }
        if (ok) {
          ++matches;
          offsets.insert({oy, ox});
        }
      }
    }
    REQUIRE(matches == 1);
  }
  CHECK(offsets.size() == 6 * 6);  // every offset occurs
  // Same (seed, epoch, index): same crop; the epoch changes it for some sample.
  CHECK(run(p, in, kShape, 3, 7) == run(p, in, kShape, 3, 7));
  bool differs = false;
  for (int index = 0; index < 20; ++index)
    differs |= run(p, in, kShape, 0, index) != run(p, in, kShape, 1, index);
  CHECK(differs);
  // Eval: a centre crop.
  Pipeline eval = one("random_crop", a, false);
  const auto centre = run(eval, in, kShape);
  CHECK(at(centre, 0, 0, 0, 3, 4) ==
        at(in, 0, 0, 0));  // offset ((4+4-3)/2-2, (5+4-4)/2-2) = (0, 0)
  CHECK(at(centre, 1, 2, 3, 3, 4) == at(in, 1, 2, 3));
  Attrs same;
  same.set("size", std::vector<std::int64_t>{4, 5});
  same.set("padding", std::int64_t{1});
  CHECK(run(build_pipeline({{"random_crop", same}}, false, nullptr), in, kShape) == in);
  TinyDataset tiny;  // with a known sample shape, a crop to the same size is left out
  same.set("size", std::vector<std::int64_t>{1, 2});
  CHECK(build_pipeline({{"random_crop", same}}, false, &tiny).empty());
  // The samples transformed decide, not the training set: larger evaluation
  // images are centre-cropped to the training crop.
  const ZerosDataset train8({1, 8, 8}), eval10({1, 10, 10});
  Attrs crop8;
  crop8.set("size", std::int64_t{8});
  crop8.set("padding", std::int64_t{1});
  CHECK(build_pipeline({{"random_crop", crop8}}, false, &train8).empty());
  const Pipeline larger = build_pipeline({{"random_crop", crop8}}, false, &train8, &eval10);
  REQUIRE_FALSE(larger.empty());
  CHECK(larger.output_shape({1, 10, 10}) == Shape{1, 8, 8});
  Attrs big;
  big.set("size", std::int64_t{9});
  CHECK_THROWS_WITH(one("random_crop", big).output_shape(kShape), Contains("larger than"));
  CHECK_THROWS_WITH(one("random_crop", a).output_shape({13}), Contains("needs image samples"));
}

TEST_CASE("the evaluation's centre crop starts where torchvision's CenterCrop does") {
  // int(round((extent - size) / 2.0)) in Python, halves to the even; a crop
  // larger than the side pads (size - extent) // 2 zeros before it.
  const std::vector<std::pair<std::int64_t, std::int64_t>> extent_size = {
      {28, 28}, {28, 27}, {28, 26}, {28, 25}, {28, 24}, {28, 21},
      {28, 19}, {10, 3},  {28, 29}, {28, 30}, {28, 31}, {28, 33}};
  const std::vector<std::int64_t> torchvision = {0, 0, 1, 2, 2, 4, 4, 4, 0, -1, -1, -2};
  for (std::size_t i = 0; i < extent_size.size(); ++i) {
    INFO(extent_size[i].first << " -> " << extent_size[i].second);
    CHECK(centre_crop_offset(extent_size[i].first, extent_size[i].second) == torchvision[i]);
  }
  // In a pipeline: 3 of 6 rows and columns start at row and column 2 (1.5 to the even).
  Attrs a;
  a.set("size", std::int64_t{3});
  const Shape shape{1, 6, 6};
  std::vector<float> in(36);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  const auto out = run(one("random_crop", a, false), in, shape);
  CHECK(out.front() == in[2 * 6 + 2]);
}

TEST_CASE("random_flip mirrors rows with probability p; eval leaves samples alone") {
  Attrs always;
  always.set("p", 1.0);
  const auto in = ramp();
  const auto out = run(one("random_flip", always), in, kShape);
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 5; ++x) REQUIRE(at(out, c, y, x) == at(in, c, y, 4 - x));
  Attrs never;
  never.set("p", 0.0);
  CHECK(run(one("random_flip", never), in, kShape) == in);
  int flips = 0;
  Pipeline half = one("random_flip", {});
  for (int i = 0; i < 400; ++i) flips += run(half, in, kShape, 0, i) != in;
  CHECK(flips > 150);
  CHECK(flips < 250);
  CHECK(run(one("random_flip", always, false), in, kShape) == in);
}

TEST_CASE("random_translate shifts by at most max pixels, filling with zeros") {
  Attrs a;
  a.set("max", std::int64_t{1});
  const auto in = ramp();
  std::set<std::pair<int, int>> shifts;
  for (int i = 0; i < 100; ++i) {
    const auto out = run(one("random_translate", a), in, kShape, 0, i);
    int found = 0;
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) {
        bool ok = true;
        for (int c = 0; c < 2; ++c)
          for (int y = 0; y < 4; ++y)
            for (int x = 0; x < 5; ++x) {
              const int sy = y - dy, sx = x - dx;
              const float e = (sy >= 0 && sy < 4 && sx >= 0 && sx < 5) ? at(in, c, sy, sx) : 0;
              ok = ok && at(out, c, y, x) == e;
            }
        if (ok) {
          ++found;
          shifts.insert({dy, dx});
        }
      }
    REQUIRE(found == 1);
  }
  CHECK(shifts.size() == 9);
}

TEST_CASE("random_erasing sets one rectangle in every channel to the value") {
  Attrs a;
  a.set("p", 1.0);
  a.set("value", -7.0);
  a.set("scale", std::vector<double>{0.1, 0.3});
  const auto in = ramp();
  int erased_samples = 0;
  for (int i = 0; i < 50; ++i) {
    const auto out = run(one("random_erasing", a), in, kShape, 0, i);
    int ymin = 9, ymax = -1, xmin = 9, xmax = -1, count = 0;
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 5; ++x) {
        const bool erased = at(out, 0, y, x) == -7.0f;
        REQUIRE(erased == (at(out, 1, y, x) == -7.0f));  // same rectangle in every channel
        if (!erased) {
          REQUIRE(at(out, 0, y, x) == at(in, 0, y, x));
          continue;
        }
        ++count;
        ymin = std::min(ymin, y), ymax = std::max(ymax, y);
        xmin = std::min(xmin, x), xmax = std::max(xmax, x);
      }
    if (count == 0) continue;
    ++erased_samples;
    CHECK(count == (ymax - ymin + 1) * (xmax - xmin + 1));  // a filled rectangle
  }
  CHECK(erased_samples > 25);
  a.set("p", 0.0);
  CHECK(run(one("random_erasing", a), in, kShape) == in);
  a.set("ratio", std::vector<double>{3.0, 1.0});
  CHECK_THROWS_WITH(one("random_erasing", a), Contains("ranges"));
}

TEST_CASE("pipelines chain transforms, drop random ones for eval, and reject unknown types") {
  Attrs crop;
  crop.set("size", std::int64_t{4});
  crop.set("padding", std::int64_t{1});
  std::vector<TransformSpec> items = {{"scale", {}}, {"random_crop", crop}, {"random_flip", {}}};
  Pipeline train = build_pipeline(items, true, nullptr);
  Pipeline eval = build_pipeline(items, false, nullptr);
  CHECK(train.output_shape(kShape) == Shape{2, 4, 4});
  CHECK(eval.output_shape(kShape) == Shape{2, 4, 4});
  CHECK(train.describe() == "scale(1/255) random_crop(4x4, padding 1) random_flip(p=0.500000)");
  CHECK(eval.describe() == "scale(1/255) center_crop(4x4)");  // it pads nothing
  CHECK(train.resolved().size() == 3);
  CHECK_THROWS_WITH(build_pipeline({{"random_rotate", {}}}, true, nullptr),
                    Contains("unknown transform 'random_rotate'") && Contains("random_erasing"));
  // Every transform the builder knows is declared in the registry, and vice versa.
  for (const auto& def : transform_defs()) {
    Attrs attrs;
    if (def.name == "random_crop") attrs = crop;
    if (def.name == "normalize") {
      attrs.set("mean", std::vector<double>{0.5});
      attrs.set("std", std::vector<double>{0.25});
    }
    CHECK_NOTHROW(build_pipeline({{def.name, attrs}}, true, nullptr).output_shape(kShape));
  }
}
