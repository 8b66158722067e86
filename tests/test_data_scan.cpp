// labels: cpu
// links: trainer_data
// read_every_sample: every sample of a dataset read once on several threads;
// the samples that cannot be read (damaged images in an image folder) are
// counted and the first kept in index order, whatever the thread count.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "data/read_every_sample.h"
#include "data/registry.h"
#include "test_data_fixtures.h"
#include "test_image_fixtures.h"

using trainer::data::read_every_sample;
using trainer::data::SampleScan;
using trainer::data::testing::TempDir;
using trainer::data::testing::write_image_folder;

namespace {

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
  write_image_folder(dir.file("img"), 10, {"b/7.png", "a/3.png", "b/1.png"});
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
  write_image_folder(dir.file("img"), 10);  // repaired
  const SampleScan clean = read_every_sample(*folder, 2, 10);
  CHECK(clean.failed == 0);
  CHECK(clean.first_errors.empty());
}
