// `trainer validate --data`: every sample of the training and evaluation data
// read once, on several threads, and the samples that cannot be read (a
// damaged image in an image folder) reported before a run meets them.
// labels: cpu
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "data/read_every_sample.h"
#include "data/registry.h"
#include "run_command.h"
#include "test_data_fixtures.h"
#include "test_image_fixtures.h"

using trainer::data::read_every_sample;
using trainer::data::SampleScan;
using trainer::data::testing::png_bytes;
using trainer::data::testing::TempDir;
using trainer::data::testing::write_bytes;
using trainer::data::testing::write_text;
using trainer::testing::run_trainer;

namespace {

// root/<a|b>/<k>.png: `per_class` 3x3 RGB images in each of two classes;
// the images listed in `damaged` ("a/2.png") are cut to half their bytes.
void write_folder(const std::string& root, int per_class,
                  const std::vector<std::string>& damaged = {}) {
  const std::vector<std::uint8_t> pixels(27, 100);
  const std::vector<std::uint8_t> good = png_bytes(3, 3, 3, pixels);
  for (const std::string cls : {"a", "b"}) {
    for (int k = 0; k < per_class; ++k) {
      const std::string name = cls + "/" + std::to_string(k) + ".png";
      std::vector<std::uint8_t> bytes = good;
      for (const auto& d : damaged)
        if (d == name) bytes.resize(bytes.size() / 2);
      write_bytes(root + "/" + name, bytes);
    }
  }
}

std::shared_ptr<trainer::data::Dataset> open_folder(const std::string& root) {
  trainer::Attrs attrs;
  attrs.set("root", root);
  attrs.set("size", std::vector<std::int64_t>{3, 3});
  return trainer::data::open_source("image_folder", attrs);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("every sample is read; failures are counted and the first kept in index order") {
  TempDir dir;
  // Sorted: a/0..a/9 are samples 0..9, b/0..b/9 are 10..19.
  write_folder(dir.file("img"), 10, {"b/7.png", "a/3.png", "b/1.png"});
  const auto folder = open_folder(dir.file("img"));
  for (int threads : {1, 3}) {
    const SampleScan scan = read_every_sample(*folder, threads, 2);
    CHECK(scan.samples == 20);
    CHECK(scan.failed == 3);
    REQUIRE(scan.first_errors.size() == 2);
    CHECK(scan.first_errors[0].first == 3);
    CHECK(contains(scan.first_errors[0].second, "a/3.png"));
    CHECK(scan.first_errors[1].first == 11);
    CHECK(contains(scan.first_errors[1].second, "b/1.png"));
  }
  const SampleScan all = read_every_sample(*folder, 2, 10);
  CHECK(all.first_errors.size() == 3);
  write_folder(dir.file("img"), 10);  // repaired
  const SampleScan clean = read_every_sample(*folder, 2, 10);
  CHECK(clean.failed == 0);
  CHECK(clean.first_errors.empty());
}

TEST_CASE("validate --data names the damaged images at their key; plain validate does not read") {
  TempDir dir;
  write_folder(dir.file("train"), 6, {"b/4.png"});
  write_folder(dir.file("test"), 2, {"a/0.png", "a/1.png"});
  const std::string config = dir.file("folder.yaml");
  write_text(config,
             "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 2}\n"
             "data:\n"
             "  train: {type: image_folder, root: " +
                 dir.file("train") +
                 ", size: [3, 3]}\n"
                 "  eval: {type: image_folder, root: " +
                 dir.file("test") +
                 ", size: [3, 3]}\n"
                 "train: {batch_size: 4}\n");
  const auto plain = run_trainer("validate " + config, true);
  CHECK(plain.code == 0);
  CHECK(contains(plain.out, "ok"));

  const auto deep = run_trainer("validate " + config + " --data", true);
  INFO(deep.out);
  CHECK(deep.code == 2);
  CHECK(contains(deep.out, config + ":6:10: error: data.train: 1 of 12 training samples cannot be "
                                    "read\n  sample 10: "));
  CHECK(contains(deep.out, dir.file("train") + "/b/4.png"));
  CHECK(contains(deep.out, config + ":7:9: error: data.eval: 2 of 4 evaluation samples cannot be "
                                    "read\n  sample 0: "));
  CHECK(contains(deep.out, "2 errors"));
  CHECK_FALSE(contains(deep.out, "\nok"));

  write_folder(dir.file("train"), 6);
  write_folder(dir.file("test"), 2);
  const auto repaired = run_trainer("validate " + config + " --data", true);
  INFO(repaired.out);
  CHECK(repaired.code == 0);
  CHECK(contains(repaired.out, "data: every sample read (12 training, 4 evaluation) in "));

  // The held-out part of a split is read too, under data.split.
  write_folder(dir.file("train"), 6,
               {"a/0.png", "a/1.png", "a/2.png", "a/3.png", "a/4.png", "a/5.png", "b/0.png",
                "b/1.png", "b/2.png", "b/3.png", "b/4.png", "b/5.png"});
  const std::string split_config = dir.file("split.yaml");
  write_text(split_config,
             "model:\n  layers:\n    - {type: flatten}\n"
             "    - {type: linear, out_features: 2}\n"
             "data:\n  train: {type: image_folder, root: " +
                 dir.file("train") +
                 ", size: [3, 3]}\n  split: 0.25\n"
                 "train: {batch_size: 4}\n");
  const auto split = run_trainer("validate " + split_config + " --data", true);
  INFO(split.out);
  CHECK(split.code == 2);
  CHECK(contains(split.out, "error: data.train: 9 of 9 training samples cannot be read"));
  CHECK(
      contains(split.out, "error: data.split: 3 of 3 held-out evaluation samples cannot be read"));
}
