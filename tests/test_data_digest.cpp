// Tests of the content digest that tells a resume its data changed: the
// digest itself (blocks delimited, every byte counts), and each dataset's:
// in-memory arrays, subsets, relabelled sets, image folder listings, the
// synthetic source and the read-every-sample default.
// labels: cpu
// links: trainer_data
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "data/array_dataset.h"
#include "data/class_names.h"
#include "data/content_digest.h"
#include "data/sources.h"
#include "data/split.h"
#include "test_data_fixtures.h"
#include "test_image_fixtures.h"

using namespace trainer;
using namespace trainer::data;
using namespace trainer::data::testing;

namespace {

std::uint64_t digest_of(std::initializer_list<std::string_view> blocks) {
  ContentDigest digest;
  for (const auto block : blocks) digest.add(block);
  return digest.value();
}

ArrayData small_arrays() {
  ArrayData data;
  data.sample_shape = {2};
  data.samples = std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6};
  data.labels = {0, 1, 0};
  data.description = "arrays in memory";
  return data;
}

// A dataset with no digest of its own: the default reads every sample.
class CountingDataset final : public Dataset {
 public:
  explicit CountingDataset(float offset) : offset_(offset) {}
  std::int64_t size() const override { return 3; }
  Shape sample_shape() const override { return {2}; }
  std::int64_t num_classes() const override { return 2; }
  void read(std::int64_t index, float* sample, std::int64_t* label, float*) const override {
    sample[0] = static_cast<float>(index);
    sample[1] = offset_;
    if (label) *label = index % 2;
  }
  std::string describe() const override { return "counting"; }

 private:
  float offset_;
};

}  // namespace

TEST_CASE("the digest delimits blocks and counts every byte, the last ones too") {
  CHECK(digest_of({"ab", "c"}) != digest_of({"a", "bc"}));
  CHECK(digest_of({"abc"}) != digest_of({"ab", "c"}));
  CHECK(digest_of({"abcdefghi"}) == digest_of({"abcdefghi"}));
  CHECK(digest_of({"abcdefghi"}) != digest_of({"abcdefghj"}));  // a byte past the first word
  CHECK(digest_of({"abcdefgh"}) != digest_of({"abcdefgh", ""}));
  CHECK(digest_of({std::string_view("\0", 1)}) != digest_of({""}));
  CHECK(digest_text(0x0123456789abcdefull) == "0123456789abcdef");
  CHECK(digest_text(1) == "0000000000000001");
}

TEST_CASE("an in-memory dataset's digest follows its samples and labels, not its files' names") {
  const std::uint64_t base = ArrayDataset(small_arrays()).content_digest();
  ArrayData renamed = small_arrays();
  renamed.description = "the same arrays elsewhere";
  CHECK(ArrayDataset(renamed).content_digest() == base);
  ArrayData sample_changed = small_arrays();
  std::get<std::vector<std::uint8_t>>(sample_changed.samples)[5] = 7;
  CHECK(ArrayDataset(sample_changed).content_digest() != base);
  ArrayData label_changed = small_arrays();
  label_changed.labels[2] = 1;
  CHECK(ArrayDataset(label_changed).content_digest() != base);
  ArrayData reshaped = small_arrays();
  reshaped.sample_shape = {1, 2};
  CHECK(ArrayDataset(reshaped).content_digest() != base);
  ArrayData regression = small_arrays();
  regression.labels.clear();
  regression.target_shape = {1};
  regression.targets = {0.5f, 1.5f, 2.5f};
  const std::uint64_t targets = ArrayDataset(regression).content_digest();
  regression.targets[1] = 1.25f;
  CHECK(ArrayDataset(regression).content_digest() != targets);
}

TEST_CASE("subsets and relabelled sets digest their base with their own indices or labels") {
  const auto base = std::make_shared<ArrayDataset>(small_arrays());
  const SubsetDataset first_two(base, {0, 1}, "part");
  CHECK(SubsetDataset(base, {0, 1}, "other words").content_digest() == first_two.content_digest());
  CHECK(SubsetDataset(base, {0, 2}, "part").content_digest() != first_two.content_digest());
  CHECK(first_two.content_digest() != base->content_digest());
  // Splits of another seed hold other samples.
  const auto [train_a, eval_a] = split_dataset(base, 0.34, 1);
  const auto [train_b, eval_b] = split_dataset(base, 0.34, 1);
  CHECK(train_a->content_digest() == train_b->content_digest());
  bool some_seed_differs = false;
  for (std::uint64_t seed = 2; seed < 10 && !some_seed_differs; ++seed)
    some_seed_differs =
        split_dataset(base, 0.34, seed).first->content_digest() != train_a->content_digest();
  CHECK(some_seed_differs);
}

TEST_CASE("an image folder digests its listing: names, sizes and classes, wherever it lies") {
  TempDir dir;
  write_image_folder(dir.file("one"), 2);
  const std::uint64_t base = open_image_folder(dir.file("one"), 3, 3, 3)->content_digest();
  std::filesystem::rename(dir.file("one"), dir.file("moved"));
  CHECK(open_image_folder(dir.file("moved"), 3, 3, 3)->content_digest() == base);
  CHECK(open_image_folder(dir.file("moved/"), 3, 3, 3)->content_digest() == base);
  CHECK(open_image_folder(dir.file("moved/."), 3, 3, 3)->content_digest() == base);
  // Another image in place of one: other bytes, another size.
  write_bytes(dir.file("moved/a/1.png"), png_bytes(4, 3, 3, std::vector<std::uint8_t>(36, 9)));
  CHECK(open_image_folder(dir.file("moved"), 3, 3, 3)->content_digest() != base);
  write_image_folder(dir.file("two"), 2);
  std::filesystem::rename(dir.file("two/b/1.png"), dir.file("two/b/9.png"));
  CHECK(open_image_folder(dir.file("two"), 3, 3, 3)->content_digest() != base);
  write_image_folder(dir.file("three"), 2);
  std::filesystem::rename(dir.file("three/b"), dir.file("three/c"));  // a class renamed
  CHECK(open_image_folder(dir.file("three"), 3, 3, 3)->content_digest() != base);
  // An evaluation set renumbered to the training set's classes digests the numbering.
  const auto eval = open_image_folder(dir.file("three"), 3, 3, 3);
  CHECK(relabel_by_class_names(eval, {"a", "c"})->content_digest() !=
        relabel_by_class_names(eval, {"c", "a"})->content_digest());
}

TEST_CASE("the synthetic source digests what it computes samples from; others read every sample") {
  CHECK(make_synthetic({2, 2}, 3, 10, 1)->content_digest() ==
        make_synthetic({2, 2}, 3, 10, 1)->content_digest());
  CHECK(make_synthetic({2, 2}, 3, 10, 2)->content_digest() !=
        make_synthetic({2, 2}, 3, 10, 1)->content_digest());
  CHECK(make_synthetic({2, 2}, 3, 11, 1)->content_digest() !=
        make_synthetic({2, 2}, 3, 10, 1)->content_digest());
  CHECK(make_synthetic({4}, 3, 10, 1)->content_digest() !=
        make_synthetic({2, 2}, 3, 10, 1)->content_digest());
  CHECK(CountingDataset(0.5f).content_digest() == CountingDataset(0.5f).content_digest());
  CHECK(CountingDataset(0.5f).content_digest() != CountingDataset(0.25f).content_digest());
}
