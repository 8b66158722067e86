// Tests of the prefetching loader: determinism across worker counts, sharding,
// cursors, padding, shutdown at any point and error propagation.
// labels: cpu
// links: trainer_data
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "data/loader.h"
#include "data/sources.h"
#include "data/transforms.h"

using namespace trainer;
using namespace trainer::data;
using Catch::Matchers::Contains;

namespace {

// Sample i is [1, 6, 6] filled with i + k/100 (k the position), label i % 7;
// optionally throws for one index or sleeps on every read.
class IndexDataset final : public Dataset {
 public:
  explicit IndexDataset(std::int64_t n, std::int64_t bad = -1, int sleep_us = 0)
      : n_(n), bad_(bad), sleep_us_(sleep_us) {}
  std::int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {1, 6, 6}; }
  std::int64_t num_classes() const override { return 7; }
  void read(std::int64_t index, float* sample, std::int64_t* label,
            float* = nullptr) const override {
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    if (index == bad_) throw std::runtime_error("cannot decode '/fixtures/broken.png'");
    for (int k = 0; k < 36; ++k) sample[k] = float(index) + float(k) / 100.0f;
    *label = index % 7;
  }
  std::string describe() const override { return "index dataset"; }

 private:
  std::int64_t n_, bad_;
  int sleep_us_;
};

std::shared_ptr<const Pipeline> augmenting_pipeline() {
  Attrs crop, flip, erase;
  crop.set("size", std::int64_t{6});
  crop.set("padding", std::int64_t{2});
  flip.set("p", 0.5);
  erase.set("p", 0.5);
  return std::make_shared<Pipeline>(build_pipeline(
      {{"random_crop", crop}, {"random_flip", flip}, {"random_erasing", erase}}, true, nullptr));
}

struct Copied {
  std::vector<float> inputs;
  std::vector<std::int64_t> labels;
  std::int64_t rows, index;
  bool operator==(const Copied& o) const {
    return rows == o.rows && index == o.index && labels == o.labels &&
           inputs.size() == o.inputs.size() &&
           std::memcmp(inputs.data(), o.inputs.data(), inputs.size() * sizeof(float)) == 0;
  }
};

std::vector<Copied> drain(Loader& loader) {
  std::vector<Copied> out;
  while (const Batch* b = loader.next()) {
    Copied c;
    c.inputs.assign(b->inputs.f32(), b->inputs.f32() + b->inputs.numel());
    c.labels.assign(b->labels.i64(), b->labels.i64() + b->labels.numel());
    c.rows = b->rows;
    c.index = b->index;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Copied> run_epoch(std::shared_ptr<const Dataset> d, std::shared_ptr<const Pipeline> p,
                              LoaderOptions o, std::int64_t epoch, std::int64_t position = 0) {
  Loader loader(std::move(d), std::move(p), o);
  loader.start_epoch(epoch, position);
  return drain(loader);
}

LoaderOptions options(std::int64_t batch, std::int64_t workers) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.prefetch = 3;
  o.seed = 42;
  o.drop_last = false;
  return o;
}

}  // namespace

TEST_CASE("batches are bit-identical with 0, 1 and 4 workers (random transforms on)") {
  auto d = std::make_shared<IndexDataset>(103);
  auto p = augmenting_pipeline();
  for (std::int64_t epoch : {0, 3}) {
    const auto one = run_epoch(d, p, options(8, 1), epoch);
    const auto four = run_epoch(d, p, options(8, 4), epoch);
    const auto inline_built = run_epoch(d, p, options(8, 0), epoch);
    REQUIRE(one.size() == 13);
    CHECK(one == four);
    CHECK(one == inline_built);
  }
  // The augmentation does change with the epoch and the seed.
  CHECK_FALSE(run_epoch(d, p, options(8, 2), 0) == run_epoch(d, p, options(8, 2), 1));
  auto other_seed = options(8, 2);
  other_seed.seed = 43;
  CHECK_FALSE(run_epoch(d, p, options(8, 2), 0) == run_epoch(d, p, other_seed, 0));
}

TEST_CASE("batch rows hold the transformed samples listed by batch_indices") {
  auto d = std::make_shared<IndexDataset>(50);
  auto p = augmenting_pipeline();
  Loader loader(d, p, options(16, 2));
  loader.start_epoch(2);
  PipelineScratch scratch;
  std::vector<float> raw(36), expected(36);
  std::set<std::int64_t> seen;
  while (const Batch* b = loader.next()) {
    const auto indices = loader.batch_indices(2, b->index);
    REQUIRE(static_cast<std::int64_t>(indices.size()) == b->rows);
    for (std::int64_t r = 0; r < b->rows; ++r) {
      const std::int64_t index = indices[static_cast<std::size_t>(r)];
      seen.insert(index);
      std::int64_t label;
      d->read(index, raw.data(), &label);
      p->apply(raw.data(), {1, 6, 6}, expected.data(), 42, 2, index, scratch);
      CHECK(b->labels.i64()[r] == index % 7);
      CHECK(std::memcmp(b->inputs.f32() + r * 36, expected.data(), 36 * sizeof(float)) == 0);
    }
  }
  CHECK(seen.size() == 50);
}

TEST_CASE("shuffle permutes per epoch; without shuffle the order is the dataset's") {
  auto d = std::make_shared<IndexDataset>(40);
  auto o = options(40, 1);
  Loader loader(d, nullptr, o);
  const auto e0 = loader.batch_indices(0, 0), e1 = loader.batch_indices(1, 0);
  CHECK(e0 != e1);
  CHECK(std::set<std::int64_t>(e0.begin(), e0.end()).size() == 40);
  o.shuffle = false;
  Loader ordered(d, nullptr, o);
  const auto plain = ordered.batch_indices(5, 0);
  for (std::int64_t i = 0; i < 40; ++i) CHECK(plain[static_cast<std::size_t>(i)] == i);
}

TEST_CASE("the last batch is padded with zero rows and label -100 without drop_last") {
  auto d = std::make_shared<IndexDataset>(10);
  auto o = options(4, 2);
  o.shuffle = false;
  const auto batches = run_epoch(d, nullptr, o, 0);
  REQUIRE(batches.size() == 3);
  const Copied& last = batches[2];
  CHECK(last.rows == 2);
  CHECK(last.labels == std::vector<std::int64_t>{8 % 7, 9 % 7, kIgnoreLabel, kIgnoreLabel});
  CHECK(last.inputs[0] == 8.0f);
  for (std::size_t k = 2 * 36; k < 4 * 36; ++k) REQUIRE(last.inputs[k] == 0.0f);
  o.drop_last = true;
  Loader dropping(d, nullptr, o);
  CHECK(dropping.batches_per_epoch() == 2);
  CHECK(run_epoch(d, nullptr, o, 0).size() == 2);
}

TEST_CASE("shards for world sizes 1, 2, 3 are equal-length, disjoint and complete") {
  for (std::int64_t n : {12, 10, 7}) {
    auto d = std::make_shared<IndexDataset>(n);
    for (std::int64_t world : {1, 2, 3}) {
      std::map<std::int64_t, int> count;
      std::int64_t batches = -1;
      for (std::int64_t rank = 0; rank < world; ++rank) {
        auto o = options(2, 2);
        o.rank = rank;
        o.world_size = world;
        Loader loader(d, nullptr, o);
        if (batches < 0) batches = loader.batches_per_epoch();
        CHECK(loader.batches_per_epoch() == batches);
        CHECK(loader.samples_per_rank() == (n + world - 1) / world);
        loader.start_epoch(1);
        while (const Batch* b = loader.next()) {
          for (std::int64_t r = 0; r < b->rows; ++r) ++count[std::lround(b->inputs.f32()[r * 36])];
        }
      }
      INFO("n " << n << " world " << world);
      CHECK(static_cast<std::int64_t>(count.size()) == n);  // complete
      std::int64_t duplicates = 0;
      for (auto& [index, c] : count) duplicates += c - 1;
      // Disjoint except for the samples wrapped around to equalise the shards.
      CHECK(duplicates == (world - n % world) % world);
    }
  }
}

TEST_CASE("with drop_last the ranks train the samples one rank with their batches together does") {
  for (std::int64_t n : {12, 11, 10, 7}) {
    auto d = std::make_shared<IndexDataset>(n);
    // One rank with batches of 2 * world.
    const auto one_rank = [&](std::int64_t world) {
      auto o = options(2 * world, 2);
      o.drop_last = true;
      std::multiset<std::int64_t> seen;
      for (const Copied& b : run_epoch(d, nullptr, o, 1))
        for (std::int64_t r = 0; r < b.rows; ++r) seen.insert(std::lround(b.inputs[r * 36]));
      return seen;
    };
    for (std::int64_t world : {2, 3}) {
      INFO("n " << n << " world " << world);
      std::multiset<std::int64_t> seen;
      for (std::int64_t rank = 0; rank < world; ++rank) {
        auto o = options(2, 2);
        o.drop_last = true;
        o.rank = rank;
        o.world_size = world;
        Loader loader(d, nullptr, o);
        CHECK(loader.samples_per_rank() == n / world);
        CHECK(loader.batches_per_epoch() == Loader::batches_per_epoch(n, 2, world, true));
        loader.start_epoch(1);
        while (const Batch* b = loader.next())
          for (std::int64_t r = 0; r < b->rows; ++r)
            seen.insert(std::lround(b->inputs.f32()[r * 36]));
      }
      CHECK(seen == one_rank(world));  // no sample twice, none the one rank leaves out
    }
  }
}

TEST_CASE("without equal shards every sample is in exactly one shard (evaluation)") {
  for (std::int64_t n : {12, 10, 7, 2}) {
    auto d = std::make_shared<IndexDataset>(n);
    for (std::int64_t world : {1, 2, 3}) {
      INFO("n " << n << " world " << world);
      std::map<std::int64_t, int> count;
      for (std::int64_t rank = 0; rank < world; ++rank) {
        auto o = options(2, 2);
        o.shuffle = false;
        o.drop_last = false;
        o.rank = rank;
        o.world_size = world;
        o.equal_shards = false;
        Loader loader(d, nullptr, o);
        // Rank r holds r, r + world, ... below n: sizes differ by at most one.
        const std::int64_t expected = n > rank ? (n - rank + world - 1) / world : 0;
        CHECK(loader.samples_per_rank() == expected);
        CHECK(loader.batches_per_epoch() == (expected + 1) / 2);
        loader.start_epoch(0);
        std::int64_t rows = 0;
        while (const Batch* b = loader.next()) {
          for (std::int64_t r = 0; r < b->rows; ++r) {
            const std::int64_t index = std::lround(b->inputs.f32()[r * 36]);
            CHECK(index % world == rank);
            ++count[index];
          }
          rows += b->rows;
        }
        CHECK(rows == expected);
      }
      CHECK(static_cast<std::int64_t>(count.size()) == n);
      for (auto& [index, c] : count) CHECK(c == 1);
    }
  }
}

TEST_CASE("restoring a cursor yields the same remaining batches") {
  auto d = std::make_shared<IndexDataset>(77);
  auto p = augmenting_pipeline();
  const auto full = run_epoch(d, p, options(8, 3), 4);
  Loader loader(d, p, options(8, 3));
  loader.start_epoch(4);
  for (int i = 0; i < 3; ++i) REQUIRE(loader.next());
  const Cursor saved = loader.cursor();
  CHECK(saved.epoch == 4);
  CHECK(saved.position == 3);
  const auto resumed = run_epoch(d, p, options(8, 1), saved.epoch, saved.position);
  REQUIRE(resumed.size() == full.size() - 3);
  for (std::size_t i = 0; i < resumed.size(); ++i) CHECK(resumed[i] == full[i + 3]);
  // Restarting a running loader at a cursor works too (batches in flight are abandoned).
  loader.start_epoch(4, 5);
  const auto again = drain(loader);
  REQUIRE(again.size() == full.size() - 5);
  CHECK(again.front() == full[5]);
  CHECK(loader.next() == nullptr);
  CHECK_THROWS_AS(loader.start_epoch(4, 1000), std::invalid_argument);
}

TEST_CASE("the loader shuts down cleanly at any point") {
  auto slow = std::make_shared<IndexDataset>(400, -1, 200);
  const auto begin = std::chrono::steady_clock::now();
  SECTION("never started") {
    Loader loader(slow, nullptr, options(8, 4));
  }
  SECTION("workers blocked on a full ring") {
    auto fast = std::make_shared<IndexDataset>(400);
    Loader loader(fast, nullptr, options(8, 4));
    loader.start_epoch(0);
    REQUIRE(loader.next());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the ring fill
  }
  SECTION("mid-batch") {
    Loader loader(slow, nullptr, options(8, 4));
    loader.start_epoch(0);
    REQUIRE(loader.next());
  }
  SECTION("after the epoch") {
    auto fast = std::make_shared<IndexDataset>(20);
    Loader loader(fast, nullptr, options(8, 2));
    loader.start_epoch(0);
    while (loader.next()) {
    }
  }
  CHECK(std::chrono::steady_clock::now() - begin < std::chrono::seconds(2));
}

TEST_CASE("a worker's exception reaches next() with the sample and its message") {
  for (std::int64_t workers : {0, 1, 3}) {
    auto d = std::make_shared<IndexDataset>(30, 17);
    auto o = options(4, workers);
    o.shuffle = false;
    Loader loader(d, nullptr, o);
    loader.start_epoch(0);
    for (int i = 0; i < 4; ++i) REQUIRE(loader.next());  // batches 0-3: samples 0-15
    INFO("workers " << workers);
    CHECK_THROWS_WITH(loader.next(), Contains("sample 17") &&
                                         Contains("cannot decode '/fixtures/broken.png'") &&
                                         Contains("index dataset"));
  }
}

TEST_CASE("ring buffers come from the allocation hooks and are reused") {
  int allocations = 0, frees = 0;
  {
    auto o = options(8, 2);
    o.prefetch = 1;  // one built ahead, one in the step's hands: 2 slots
    o.allocate = [&](std::size_t bytes) {
      ++allocations;
      return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    };
    o.free = [&](void* p) {
      ++frees;
      std::free(p);
    };
    Loader loader(std::make_shared<IndexDataset>(100), nullptr, o);
    std::set<const void*> buffers;
    for (int epoch = 0; epoch < 2; ++epoch) {
      loader.start_epoch(epoch);
      while (const Batch* b = loader.next()) buffers.insert(b->inputs.data);
    }
    CHECK(buffers.size() == 2);
    CHECK(allocations == 4);  // inputs + labels per slot, allocated once
  }
  CHECK(frees == 4);
}

TEST_CASE("a ring holds no more batches than an epoch has, and one without workers") {
  int allocations = 0;
  auto o = options(8, 2);
  o.prefetch = 1024;
  o.allocate = [&](std::size_t bytes) {
    ++allocations;
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  };
  o.free = [](void* p) { std::free(p); };
  // 20 samples in batches of 8: 3 batches an epoch (the last short).
  CHECK(Loader::ring_slots(o, 20) == 3);
  {
    Loader loader(std::make_shared<IndexDataset>(20), nullptr, o);
    CHECK(allocations == 2 * 3);  // inputs + labels per slot
    for (int epoch = 0; epoch < 2; ++epoch) {
      loader.start_epoch(epoch);
      const auto batches = drain(loader);
      REQUIRE(batches.size() == 3);
      CHECK(batches.back().rows == 4);
    }
  }
  // `prefetch` built ahead, and the one the step uses.
  o.prefetch = 1;
  CHECK(Loader::ring_slots(o, 20) == 2);
  o.workers = 0;
  CHECK(Loader::ring_slots(o, 20) == 1);
  allocations = 0;
  Loader inline_loader(std::make_shared<IndexDataset>(20), nullptr, o);
  CHECK(allocations == 2);
  // One slot built and handed out in turn gives the batches workers give.
  inline_loader.start_epoch(1);
  CHECK(drain(inline_loader) ==
        run_epoch(std::make_shared<IndexDataset>(20), nullptr, options(8, 2), 1));
}

TEST_CASE("the loader measures its production rate and the time next() waited") {
  auto d = std::make_shared<IndexDataset>(64, -1, 100);
  Loader loader(d, nullptr, options(8, 2));
  CHECK(loader.samples_per_second() == 0.0);
  loader.start_epoch(0);
  while (loader.next()) {
  }
  // 2 workers at 100 us per sample: at most about 20000 samples/s.
  CHECK(loader.samples_per_second() > 100.0);
  CHECK(loader.samples_per_second() < 25000.0);
  CHECK(loader.wait_seconds() > 0.0);
}

TEST_CASE("impossible loader options are rejected") {
  auto d = std::make_shared<IndexDataset>(10);
  auto o = options(0, 1);
  CHECK_THROWS_AS(Loader(d, nullptr, o), std::invalid_argument);
  o = options(4, 1);
  o.rank = 2;
  o.world_size = 2;
  CHECK_THROWS_WITH(Loader(d, nullptr, o), Contains("rank 2"));
  Loader fine(d, nullptr, options(4, 1));
  CHECK_THROWS_AS(fine.next(), std::logic_error);
}
