// Tests of the IDX source: small raw and gzip fixtures, every error case, and
// the real Fashion-MNIST files.
// labels: cpu
// links: trainer_data
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "data/registry.h"
#include "data/sources.h"
#include "test_data_fixtures.h"

using namespace trainer;
using namespace trainer::data;
using namespace trainer::data::testing;
using Catch::Matchers::Contains;

namespace {

// 5 images of 3x4 with pixel (i, k) = 10*i + k, labels i % 3.
struct IdxFixture {
  std::vector<std::uint8_t> pixels, labels;
  IdxFixture() {
    for (int i = 0; i < 5; ++i) {
      for (int k = 0; k < 12; ++k) pixels.push_back(static_cast<std::uint8_t>(10 * i + k));
      labels.push_back(static_cast<std::uint8_t>(i % 3));
    }
  }
  std::vector<std::uint8_t> images_file() const { return idx_bytes({5, 3, 4}, pixels); }
  std::vector<std::uint8_t> labels_file() const { return idx_bytes({5}, labels); }
};

void check_fixture_dataset(const Dataset& d) {
  REQUIRE(d.size() == 5);
  REQUIRE(d.sample_shape() == Shape{1, 3, 4});
  REQUIRE(d.num_classes() == 3);
  REQUIRE(d.max_label() == 2);
  std::vector<float> sample(12);
  for (int i = 0; i < 5; ++i) {
    std::int64_t label = -1;
    d.read(i, sample.data(), &label);
    CHECK(label == i % 3);
    for (int k = 0; k < 12; ++k) CHECK(sample[static_cast<std::size_t>(k)] == float(10 * i + k));
  }
}

}  // namespace

TEST_CASE("IDX raw and gzip files give the same samples and labels") {
  TempDir dir;
  IdxFixture f;
  write_bytes(dir.file("img.idx"), f.images_file());
  write_bytes(dir.file("lbl.idx"), f.labels_file());
  write_gzip(dir.file("img.idx.gz"), f.images_file());
  write_gzip(dir.file("lbl.idx.gz"), f.labels_file());
  check_fixture_dataset(*open_idx(dir.file("img.idx"), dir.file("lbl.idx")));
  check_fixture_dataset(*open_idx(dir.file("img.idx.gz"), dir.file("lbl.idx.gz")));
}

TEST_CASE("IDX opens through the source registry") {
  TempDir dir;
  IdxFixture f;
  write_bytes(dir.file("img.idx"), f.images_file());
  write_bytes(dir.file("lbl.idx"), f.labels_file());
  Attrs attrs;
  attrs.set("images", dir.file("img.idx"));
  attrs.set("labels", dir.file("lbl.idx"));
  attrs.set("classes", std::int64_t{10});
  auto d = open_source("idx", attrs);
  CHECK(d->num_classes() == 10);
  CHECK(d->size() == 5);
  CHECK_THROWS_WITH(open_source("idxx", attrs), Contains("unknown data source type 'idxx'") &&
                                                    Contains("idx") && Contains("synthetic"));
}

TEST_CASE("IDX errors name the file and what is wrong") {
  TempDir dir;
  IdxFixture f;
  write_bytes(dir.file("lbl.idx"), f.labels_file());
  write_bytes(dir.file("img.idx"), f.images_file());

  SECTION("missing file") {
    CHECK_THROWS_WITH(open_idx(dir.file("nope.idx"), dir.file("lbl.idx")),
                      Contains(dir.file("nope.idx")) && Contains("does not exist"));
  }
  SECTION("a broken symbolic link") {
    std::filesystem::create_symlink(dir.file("gone.idx"), dir.file("link.idx"));
    CHECK_THROWS_WITH(
        open_idx(dir.file("link.idx"), dir.file("lbl.idx")),
        Contains("data file '" + dir.file("link.idx") + "' is a broken symbolic link to '" +
                 dir.file("gone.idx") + "': restore the file it points to"));
  }
  SECTION("a symbolic link loop") {
    std::filesystem::create_symlink(dir.file("loop-b.idx"), dir.file("loop-a.idx"));
    std::filesystem::create_symlink(dir.file("loop-a.idx"), dir.file("loop-b.idx"));
    CHECK_THROWS_WITH(open_idx(dir.file("loop-a.idx"), dir.file("lbl.idx")),
                      Contains("data file '" + dir.file("loop-a.idx") +
                               "': Too many levels of symbolic links: a symbolic link on that "
                               "path leads back to itself"));
  }
  SECTION("wrong magic number") {
    auto bytes = f.images_file();
    bytes[0] = 0x12;
    write_bytes(dir.file("bad.idx"), bytes);
    CHECK_THROWS_WITH(open_idx(dir.file("bad.idx"), dir.file("lbl.idx")),
                      Contains(dir.file("bad.idx")) && Contains("magic number 0x12000803"));
  }
  SECTION("truncated data, with the byte offset") {
    auto bytes = f.images_file();
    bytes.resize(bytes.size() - 7);
    write_bytes(dir.file("short.idx"), bytes);
    CHECK_THROWS_WITH(open_idx(dir.file("short.idx"), dir.file("lbl.idx")),
                      Contains(dir.file("short.idx")) &&
                          Contains("truncated at byte offset " + std::to_string(bytes.size())));
  }
  SECTION("truncated header") {
    auto bytes = f.images_file();
    bytes.resize(9);
    write_bytes(dir.file("head.idx"), bytes);
    CHECK_THROWS_WITH(open_idx(dir.file("head.idx"), dir.file("lbl.idx")),
                      Contains("truncated at byte offset 9"));
  }
  SECTION("truncated gzip stream") {
    write_gzip(dir.file("img.gz"), f.images_file());
    auto gz = std::filesystem::file_size(dir.file("img.gz"));
    std::filesystem::resize_file(dir.file("img.gz"), gz - 12);
    CHECK_THROWS_WITH(open_idx(dir.file("img.gz"), dir.file("lbl.idx")),
                      Contains(dir.file("img.gz")));
  }
  SECTION("image and label counts differ") {
    write_bytes(dir.file("lbl4.idx"), idx_bytes({4}, {0, 1, 2, 0}));
    CHECK_THROWS_WITH(open_idx(dir.file("img.idx"), dir.file("lbl4.idx")),
                      Contains("hold 5 samples") && Contains("hold 4"));
  }
  SECTION("label outside the classes") {
    CHECK_THROWS_WITH(
        open_idx(dir.file("img.idx"), dir.file("lbl.idx"), 2),
        Contains("label 2 of sample 2 of IDX labels '" + dir.file("lbl.idx") +
                 "' (byte offset 10) is outside [0, 2)") &&
            Contains("set classes above 2") &&
            !Contains("-100"));  // a label above the classes: the ignore label is beside the point
  }
  SECTION("labels file given as images") {
    CHECK_THROWS_WITH(open_idx(dir.file("lbl.idx"), dir.file("lbl.idx")),
                      Contains("expected [N, H, W]"));
  }
}

TEST_CASE("the real Fashion-MNIST files") {
  const std::string root = "/usr/share/datasets/fashion-mnist/";
  if (!std::filesystem::exists(root + "t10k-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed under " + root);
    return;
  }
  auto test = open_idx(root + "t10k-images-idx3-ubyte.gz", root + "t10k-labels-idx1-ubyte.gz");
  CHECK(test->size() == 10000);
  CHECK(test->sample_shape() == Shape{1, 28, 28});
  CHECK(test->num_classes() == 10);
  std::vector<float> sample(784);
  std::int64_t label = -1;
  float lo = 1e9f, hi = -1e9f;
  std::vector<int> per_class(10);
  for (std::int64_t i = 0; i < test->size(); ++i) {
    test->read(i, sample.data(), &label);
    REQUIRE(label >= 0);
    REQUIRE(label < 10);
    ++per_class[static_cast<std::size_t>(label)];
    lo = std::min(lo, *std::min_element(sample.begin(), sample.end()));
    hi = std::max(hi, *std::max_element(sample.begin(), sample.end()));
  }
  CHECK(lo == 0.0f);
  CHECK(hi == 255.0f);
  // The test set is balanced: 1000 images per class.
  for (int c : per_class) CHECK(c == 1000);
  auto train = open_idx(root + "train-images-idx3-ubyte.gz", root + "train-labels-idx1-ubyte.gz");
  CHECK(train->size() == 60000);
  train->read(0, sample.data(), &label);
  CHECK(label == 9);  // the first training image is an ankle boot
}
