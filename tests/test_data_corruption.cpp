// labels: cpu
// links: trainer_data
// No corruption of a data file crashes a source, hangs it or makes it read
// garbage of the wrong shape: seeded byte overwrites (1-4), truncations and
// appended bytes of small valid IDX (raw and gzip), CIFAR, NPY, CSV, PNG and
// JPEG fixtures, each opened through the source registry and read to the end.
// Every trial either reads every sample (and label or target) of its declared
// shape or throws std::runtime_error naming the damaged file. Seeded: the same
// trials every time (TRAINER_DATA_FUZZ_TRIALS per format, 1000 by default;
// TRAINER_DATA_FUZZ_SEED picks another set).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <typeinfo>

#include "data/registry.h"
#include "data/sources.h"
#include "test_data_fixtures.h"
#include "test_image_fixtures.h"

using namespace trainer;
using namespace trainer::data;
using namespace trainer::data::testing;
using Catch::Matchers::Contains;

namespace {

using Bytes = std::vector<std::uint8_t>;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

int trials() {
  return env_int("TRAINER_DATA_FUZZ_TRIALS", 1000);
}

Bytes read_back(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// Aborts the test, naming the trial, when one trial runs longer than `limit`
// (a hang would otherwise only end at the CTest timeout, with no hint).
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) : thread_([this, limit] { watch(limit); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  void trial(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    ++count_;
  }

 private:
  void watch(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!done_) {
      const std::uint64_t seen = count_;
      if (!wake_.wait_for(lock, limit, [&] { return done_ || count_ != seen; })) {
        std::fprintf(stderr, "test_data_corruption: a trial ran over %lld s: %s\n",
                     static_cast<long long>(limit.count()), what_.c_str());
        std::abort();
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::uint64_t count_ = 0;
  std::string what_;
  std::thread thread_;  // last: starts once the members above exist
};

// A damaged copy of `good`: 1-4 overwrites, each of one byte or (a quarter of
// the time) a run of 2-4 equal bytes, with a random value or (half the time)
// one that matters to parsers: 0, 1, 0x7F, 0x80, 0xFF (size fields), digits,
// signs and separators (text headers, CSV). Then, a quarter of the time, a
// truncation, or an eighth, 1-16 appended random bytes. `fixup`, when given,
// runs after the overwrites half the time (e.g. recomputing checksums, so the
// damage reaches the parsers behind them). `what` says what was done.
struct Mutation {
  Bytes bytes;
  std::string what;
};

Mutation mutate(const Bytes& good, std::mt19937& rng,
                const std::function<void(Bytes&)>& fixup = nullptr) {
  static constexpr std::uint8_t kInteresting[] = {0x00, 0x01, 0x7F, 0x80, 0xFF, '-',
                                                  '+',  '0',  '1',  '9',  '.',  'e',
                                                  ',',  ' ',  '\n', '(',  ')',  '\''};
  Mutation m{good, ""};
  const int writes = 1 + static_cast<int>(rng() % 4);
  for (int w = 0; w < writes; ++w) {
    const std::size_t at = rng() % m.bytes.size();
    const std::size_t run = rng() % 4 == 0 ? 2 + rng() % 3 : 1;
    const auto value =
        rng() % 2 ? static_cast<std::uint8_t>(rng()) : kInteresting[rng() % sizeof kInteresting];
    m.what += "byte " + std::to_string(at) + (run > 1 ? " x" + std::to_string(run) : "") + " " +
              std::to_string(m.bytes[at]) + "->" + std::to_string(value) + "; ";
    for (std::size_t k = at; k < std::min(at + run, m.bytes.size()); ++k) m.bytes[k] = value;
  }
  if (fixup && rng() % 2 == 0) {
    fixup(m.bytes);
    m.what += "checksums fixed; ";
  }
  const unsigned tail = rng() % 8;
  if (tail < 2) {
    m.bytes.resize(rng() % m.bytes.size());
    m.what += "truncated to " + std::to_string(m.bytes.size()) + " bytes";
  } else if (tail == 2) {
    const std::size_t extra = 1 + rng() % 16;
    for (std::size_t i = 0; i < extra; ++i) m.bytes.push_back(static_cast<std::uint8_t>(rng()));
    m.what += std::to_string(extra) + " bytes appended";
  }
  return m;
}

// Reads every sample, label and target of `d`. Returns "" when each read
// filled exactly its declared shape with a label in [0, num_classes()),
// else what is wrong. `max_values`: more values than the files could hold
// means a size was misread.
std::string read_all(const Dataset& d, std::int64_t max_values) {
  const Shape shape = d.sample_shape();
  const Shape target_shape = d.target_shape();
  const bool regression = !target_shape.empty();
  for (auto e : shape) {
    if (e <= 0 || e > max_values) return "sample shape " + to_string(shape);
  }
  for (auto e : target_shape) {
    if (e <= 0 || e > max_values) return "target shape " + to_string(target_shape);
  }
  const std::int64_t n = numel(shape);
  const std::int64_t t = regression ? numel(target_shape) : 0;
  if (d.size() < 0 || n > max_values || d.size() > max_values / n) {
    return std::to_string(d.size()) + " samples of shape " + to_string(shape) + " from files of " +
           std::to_string(max_values) + " values at most";
  }
  if (regression ? d.num_classes() != 0 : (d.size() > 0 && d.num_classes() <= 0)) {
    return "num_classes " + std::to_string(d.num_classes());
  }
  if (!regression && d.max_label() >= d.num_classes()) {
    return "max_label " + std::to_string(d.max_label()) + " >= num_classes " +
           std::to_string(d.num_classes());
  }
  // Each buffer is filled with a canary before the read, and has guard values
  // after it: every declared value is written, and nothing beyond it
  // (AddressSanitizer catches overruns too, in its build).
  constexpr std::size_t kGuard = 16;
  constexpr std::uint32_t kCanary = 0x7FA5A5A5;  // a NaN the fixtures do not hold
  float canary;
  std::memcpy(&canary, &kCanary, sizeof canary);
  auto is_canary = [&](const float& v) { return std::memcmp(&v, &kCanary, sizeof v) == 0; };
  // "" when exactly the first `used` values of `v` were written.
  auto check = [&](std::vector<float>& v, std::int64_t used, const std::string& what) {
    const auto end = v.begin() + used;
    std::string problem;
    if (std::any_of(v.begin(), end, is_canary)) problem = what + " left values unwritten";
    if (!std::all_of(end, v.end(), is_canary)) problem = what + " overran its shape";
    std::fill(v.begin(), v.end(), canary);
    return problem;
  };
  std::vector<float> sample(static_cast<std::size_t>(n) + kGuard, canary);
  std::vector<float> target(static_cast<std::size_t>(t) + kGuard, canary);
  for (std::int64_t i = 0; i < d.size(); ++i) {
    std::int64_t label = -1;
    d.read(i, sample.data(), &label, regression ? target.data() : nullptr);
    const std::string index = " " + std::to_string(i);
    if (auto problem = check(sample, n, "sample" + index); !problem.empty()) return problem;
    if (auto problem = check(target, t, "target" + index); !problem.empty()) return problem;
    if (!regression && (label < 0 || label >= d.num_classes())) {
      return "label " + std::to_string(label) + " of sample " + std::to_string(i) +
             " outside [0, " + std::to_string(d.num_classes()) + ")";
    }
  }
  return "";
}

struct Fixture {
  std::string path;
  Bytes good;  // as written to disk (compressed for gzip)
};

struct Tally {
  int accepted = 0, rejected = 0;
};

// `trials()` damaged copies of one of `files` (picked at random, the others
// left intact), each opened with `open(trial)` and read to the end.
Tally fuzz(const std::string& name, std::uint32_t seed, const std::vector<Fixture>& files,
           const std::function<std::shared_ptr<Dataset>(int trial)>& open, std::int64_t max_values,
           const std::function<void(Bytes&)>& fixup = nullptr) {
  for (const auto& f : files) write_bytes(f.path, f.good);
  // The fixtures themselves read cleanly.
  for (int trial = 0; trial < 2; ++trial) REQUIRE(read_all(*open(trial), max_values) == "");

  Watchdog watchdog(std::chrono::seconds(60));
  std::mt19937 rng(seed + static_cast<std::uint32_t>(env_int("TRAINER_DATA_FUZZ_SEED", 0)));
  Tally tally;
  const int count = trials();
  for (int trial = 0; trial < count; ++trial) {
    const Fixture& victim = files[rng() % files.size()];
    const Mutation m = mutate(victim.good, rng, fixup);
    write_bytes(victim.path, m.bytes);
    const std::string what =
        name + " trial " + std::to_string(trial) + ": " + victim.path + ": " + m.what;
    INFO(what);
    watchdog.trial(what);
    try {
      const std::shared_ptr<Dataset> d = open(trial);
      const std::string problem = read_all(*d, max_values);  // may throw, like open
      CHECK(problem == "");
      ++tally.accepted;
    } catch (const std::runtime_error& e) {
      CHECK_THAT(e.what(), Contains(victim.path));
      ++tally.rejected;
    } catch (const std::exception& e) {
      FAIL_CHECK("threw " << typeid(e).name() << ", not std::runtime_error: " << e.what());
    }
    write_bytes(victim.path, victim.good);
  }
  std::printf("%s: %d trials, %d read, %d rejected\n", name.c_str(), count, tally.accepted,
              tally.rejected);
  return tally;
}

// Both outcomes happen: the damage reaches the parsers, and they do not
// reject everything.
void check_mix(const Tally& t, double min_rejected, double min_accepted) {
  const double n = std::max(1, t.accepted + t.rejected);
  CHECK(t.rejected >= min_rejected * n);
  CHECK(t.accepted >= min_accepted * n);
}

Attrs attrs(std::initializer_list<std::pair<const char*, FieldValue>> values) {
  Attrs a;
  for (const auto& [k, v] : values) a.set(k, v);
  return a;
}

// ---- fixtures ----

std::uint32_t be32(const Bytes& b, std::size_t at) {
  return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) |
         (std::uint32_t{b[at + 2]} << 8) | std::uint32_t{b[at + 3]};
}

// Recomputes the CRC of every PNG chunk whose length still fits the file, so
// damage inside a chunk reaches libpng's chunk parsers instead of its CRC check.
void fix_png_crcs(Bytes& b) {
  std::size_t at = 8;
  while (at + 12 <= b.size()) {
    const std::uint32_t length = be32(b, at);
    if (length > b.size() - at - 12) break;
    const std::uint32_t crc =
        static_cast<std::uint32_t>(crc32(0, b.data() + at + 4, static_cast<uInt>(length) + 4));
    for (int k = 0; k < 4; ++k)
      b[at + 8 + length + k] = static_cast<std::uint8_t>(crc >> (24 - 8 * k));
    at += 12 + length;
  }
}

Bytes gzip_of(const TempDir& dir, const Bytes& raw) {
  const std::string path = dir.file("scratch.gz");
  write_gzip(path, raw);
  return read_back(path);
}

// 5 images of 3x4 and their labels (classes 0..2).
Bytes idx_images() {
  Bytes pixels;
  for (int k = 0; k < 60; ++k) pixels.push_back(static_cast<std::uint8_t>(k * 4));
  return idx_bytes({5, 3, 4}, pixels);
}
Bytes idx_labels() {
  return idx_bytes({5}, {0, 1, 2, 1, 0});
}

std::shared_ptr<Dataset> open_idx_files(const TempDir& dir, const std::string& suffix) {
  return open_source("idx", attrs({{"images", dir.file("images.idx" + suffix)},
                                   {"labels", dir.file("labels.idx" + suffix)},
                                   {"classes", std::int64_t{0}}}));
}

}  // namespace

TEST_CASE("no corruption of an IDX file crashes the reader") {
  TempDir dir;
  const Tally t = fuzz(
      "idx", 1, {{dir.file("images.idx"), idx_images()}, {dir.file("labels.idx"), idx_labels()}},
      [&](int) { return open_idx_files(dir, ""); }, 100);
  check_mix(t, 0.3, 0.1);
}

TEST_CASE("no corruption of a gzip IDX file crashes the reader") {
  TempDir dir;
  const Tally t = fuzz(
      "idx.gz", 2,
      {{dir.file("images.idx.gz"), gzip_of(dir, idx_images())},
       {dir.file("labels.idx.gz"), gzip_of(dir, idx_labels())}},
      [&](int) { return open_idx_files(dir, ".gz"); }, 100);
  // The gzip CRC rejects almost every change of the data; the header's
  // time stamp and flags bytes can change freely.
  check_mix(t, 0.5, 0.005);
}

TEST_CASE("no corruption of a CIFAR batch crashes the reader") {
  TempDir dir;
  Bytes c10, c100;
  for (int r = 0; r < 2; ++r) {
    c10.push_back(static_cast<std::uint8_t>(r + 3));
    c100.push_back(static_cast<std::uint8_t>(r + 7));   // coarse
    c100.push_back(static_cast<std::uint8_t>(r + 70));  // fine
    for (int k = 0; k < 3072; ++k) {
      c10.push_back(static_cast<std::uint8_t>(k + r));
      c100.push_back(static_cast<std::uint8_t>(3 * k + r));
    }
  }
  const std::vector<std::string> files = {dir.file("a.bin"), dir.file("b.bin")};
  const Tally t10 = fuzz(
      "cifar10", 3, {{files[0], c10}, {files[1], c10}},
      [&](int) {
        return open_source("cifar", attrs({{"files", files}}));
      },
      2 * 2 * 3073);
  check_mix(t10, 0.2, 0.3);
  const std::string fine = dir.file("c100.bin");
  const Tally t100 = fuzz(
      "cifar100", 4, {{fine, c100}},
      [&](int trial) {
        return open_source("cifar", attrs({{"files", std::vector<std::string>{fine}},
                                           {"variant", std::string("cifar100")},
                                           {"label", std::string(trial % 2 ? "fine" : "coarse")}}));
      },
      2 * 3074);
  check_mix(t100, 0.2, 0.3);
}

TEST_CASE("no corruption of an NPY pair crashes the reader") {
  TempDir dir;
  const float xf[] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, -1.0f, 1e6f, 0.0f, 7.0f, 8.0f, 9.0f};
  const std::int64_t y64[] = {2, 0, 1, 1};
  const std::uint8_t x8[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const double yf[] = {0.25, -1.0, 8.0, 1e-3};
  const Tally classes = fuzz(
      "npy f4/i8", 5,
      {{dir.file("x.npy"), npy_bytes("<f4", "(4, 3)", xf, sizeof xf)},
       {dir.file("y.npy"), npy_bytes("<i8", "(4,)", y64, sizeof y64)}},
      [&](int) {
        return open_source("npy", attrs({{"x", dir.file("x.npy")},
                                         {"y", dir.file("y.npy")},
                                         {"classes", std::int64_t{0}}}));
      },
      200);
  // The header is most of these small files, and it is read strictly, as
  // numpy reads it: most damage there (padding included) is refused.
  check_mix(classes, 0.3, 0.03);
  const Tally targets = fuzz(
      "npy u1/f8", 6,
      {{dir.file("x8.npy"), npy_bytes("|u1", "(4, 2, 2)", x8, sizeof x8)},
       {dir.file("t.npy"), npy_bytes("<f8", "(4, 1)", yf, sizeof yf)}},
      [&](int) {
        return open_source("npy", attrs({{"x", dir.file("x8.npy")},
                                         {"y", dir.file("t.npy")},
                                         {"classes", std::int64_t{0}}}));
      },
      200);
  check_mix(targets, 0.3, 0.02);
}

TEST_CASE("no corruption of a CSV file crashes the reader") {
  TempDir dir;
  const std::string text = "w,h,kind,z\n1.5,2,1,9\n3,4.25,0,8\n\n5,6,2,7\n-1e3,0.5,1,2\n";
  const std::string path = dir.file("a.csv");
  const Tally t = fuzz(
      "csv", 7, {{path, Bytes(text.begin(), text.end())}},
      [&](int trial) {
        // Alternately: classes by column name, and a regression target.
        return open_source("csv", attrs({{"path", path},
                                         {"label", std::string(trial % 2 ? "kind" : "h")},
                                         {"regression", trial % 2 == 0}}));
      },
      100);
  // Most overwrites break a number or a row of this small text.
  check_mix(t, 0.5, 0.015);
  const std::string plain = "1,2,0\n3,4,1\n5.5,6e2,2\n";
  const std::string plain_path = dir.file("plain.csv");
  const Tally p = fuzz(
      "csv without header", 8, {{plain_path, Bytes(plain.begin(), plain.end())}},
      [&](int) {
        return open_source("csv", attrs({{"path", plain_path},
                                         {"header", false},
                                         {"label", std::string("2")},
                                         {"delimiter", std::string(",")}}));
      },
      100);
  check_mix(p, 0.5, 0.015);
}

TEST_CASE("no corruption of a PNG or JPEG image crashes the image folder reader") {
  TempDir dir;
  Bytes grey, rgb, photo;
  for (int k = 0; k < 8; ++k) grey.push_back(static_cast<std::uint8_t>(k * 30));
  for (int k = 0; k < 27; ++k) rgb.push_back(static_cast<std::uint8_t>(k * 9));
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      photo.push_back(static_cast<std::uint8_t>(16 * x));
      photo.push_back(static_cast<std::uint8_t>(16 * y));
      photo.push_back(static_cast<std::uint8_t>((x * y) % 256));
    }
  }
  const std::vector<Fixture> pngs = {{dir.file("img/cat/a.png"), png_bytes(4, 2, 1, grey)},
                                     {dir.file("img/cat/b.png"), png_bytes(3, 3, 3, rgb)}};
  const std::vector<Fixture> jpegs = {
      {dir.file("img/dog/c.jpg"), jpeg_bytes(16, 16, photo, 90, false)},
      {dir.file("img/dog/d.jpeg"), jpeg_bytes(16, 16, photo, 90, true)}};
  for (const auto& f : pngs) write_bytes(f.path, f.good);
  for (const auto& f : jpegs) write_bytes(f.path, f.good);
  auto open = [&](int trial) {
    return open_source("image_folder", attrs({{"root", dir.file("img")},
                                              {"size", std::vector<std::int64_t>{4, 5}},
                                              {"channels", std::int64_t{trial % 2 ? 3 : 1}}}));
  };
  const Tally png = fuzz("png", 9, pngs, open, 4 * 3 * 4 * 5, fix_png_crcs);
  // Without the CRC fix-up (half the trials) libpng rejects nearly all damage.
  check_mix(png, 0.5, 0.03);
  const Tally jpeg = fuzz("jpeg", 10, jpegs, open, 4 * 3 * 4 * 5);
  check_mix(jpeg, 0.3, 0.1);
}

// Damage the random trials reach rarely or never, each once: a size field that
// overflows or asks for gigabytes, values with no float32 or integer meaning,
// and truncated or padded data that would otherwise be read as garbage.
TEST_CASE("corrupt size fields and values are errors naming the file") {
  TempDir dir;
  SECTION("IDX extents whose product overflows to the size present") {
    // 5 * 2147418113 * 2147549185 * 12 = 60 * (2^62 + 1) = 60 modulo 2^64.
    Bytes pixels(60, 7);
    write_bytes(dir.file("i.idx"), idx_bytes({5, 2147418113u, 2147549185u, 12}, pixels));
    write_bytes(dir.file("l.idx"), idx_labels());
    CHECK_THROWS_WITH(open_idx(dir.file("i.idx"), dir.file("l.idx")),
                      Contains(dir.file("i.idx")) && Contains("truncated at byte offset 80") &&
                          Contains("needs more bytes than can be counted"));
  }
  SECTION("IDX data followed by more bytes: a wrong extent") {
    Bytes images = idx_images();
    images[15] = 2;  // [5, 3, 4] -> [5, 3, 2]: 30 of the 60 pixel bytes
    write_bytes(dir.file("i.idx"), images);
    write_bytes(dir.file("l.idx"), idx_labels());
    CHECK_THROWS_WITH(
        open_idx(dir.file("i.idx"), dir.file("l.idx")),
        Contains(dir.file("i.idx")) && Contains("30 bytes after the data, from byte offset 46"));
  }
  SECTION("NPY shapes: negative, overflowing, empty targets") {
    const float x[12] = {};
    const std::int64_t y[4] = {0, 1, 0, 1};
    write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(4,)", y, sizeof y));
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(4, -3)", x, sizeof x));
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy")),
                      Contains(dir.file("x.npy")) && Contains("negative extent"));
    // 4 * 2^62 = 0 modulo 2^64.
    const Bytes huge = npy_bytes("<f4", "(4, 4611686018427387904)", x, sizeof x);
    write_bytes(dir.file("x.npy"), huge);
    const std::string end = std::to_string(huge.size());
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy")),
                      Contains(dir.file("x.npy")) && Contains("truncated at byte offset " + end) &&
                          Contains("needs more bytes than can be counted"));
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(4, 3)", x, sizeof x));
    write_bytes(dir.file("t.npy"), npy_bytes("<f8", "(4, 0)", nullptr, 0));
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("t.npy")),
                      Contains(dir.file("t.npy")) && Contains("empty target shape [0]"));
  }
  SECTION("a negative label with the classes inferred is said to be negative") {
    const float x[4] = {};
    const std::int64_t y[2] = {0, -5};
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(2, 2)", x, sizeof x));
    write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(2,)", y, sizeof y));
    CHECK_THROWS_WITH(
        open_npy(dir.file("x.npy"), dir.file("y.npy")),
        Contains("label -5 of ") && Contains(" is negative (and is not -100") && !Contains("inf)"));
  }
  SECTION("NPY int64 labels beyond 2^53 are compared as integers") {
    const float x[4] = {};
    const std::int64_t y[2] = {0, std::numeric_limits<std::int64_t>::max()};
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(2, 2)", x, sizeof x));
    write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(2,)", y, sizeof y));
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy"), 10),
                      Contains(dir.file("y.npy")) &&
                          Contains("label 9223372036854775807 of element 1 of NPY file") &&
                          Contains("(byte offset 136) is outside [0, 10)"));
  }
  SECTION("CSV labels that are no integer, values beyond float32") {
    const std::string path = dir.file("a.csv");
    for (const std::string label : {"nan", "-0.5"}) {
      write_text(path, "a,b\n1,0\n2," + label + "\n");
      CHECK_THROWS_WITH(open_csv({path}),
                        Contains(path) && Contains("line 3: label '" + label + "' is not a class"));
    }
    for (const std::string label : {"inf", "9.3e18"}) {
      write_text(path, "a,b\n1,0\n2," + label + "\n");
      CHECK_THROWS_WITH(
          open_csv({path}),
          Contains(path) && Contains("line 3: label '" + label + "' is too large to be a class"));
    }
    for (const std::string big : {"1e39", "1e999", "-1e999"}) {
      write_text(path, "a,b\n" + big + ",0\n");
      CHECK_THROWS_WITH(open_csv({path}), Contains(path) && Contains("line 2, column 'a'") &&
                                              Contains("outside the float32 range"));
    }
  }
  SECTION("PNG and JPEG headers declaring gigapixels are refused before decoding") {
    Bytes png = png_bytes(3, 3, 3, Bytes(27, 5));
    for (int k : {16, 20}) {  // IHDR width, height: 1000000 (libpng's own limit)
      png[k] = 0x00, png[k + 1] = 0x0F, png[k + 2] = 0x42, png[k + 3] = 0x40;
    }
    fix_png_crcs(png);
    write_bytes(dir.file("img/a/big.png"), png);
    const auto folder = open_image_folder(dir.file("img"), 4, 4, 3);
    std::vector<float> sample(48);
    std::int64_t label = 0;
    CHECK_THROWS_WITH(folder->read(0, sample.data(), &label),
                      Contains(dir.file("img/a/big.png")) &&
                          Contains("1000000 x 1000000 pixels, more than the 268435456-pixel"));

    Bytes jpeg = jpeg_bytes(16, 16, Bytes(16 * 16 * 3, 99), 90, false);
    std::size_t sof = 2;
    while (sof + 9 < jpeg.size() && !(jpeg[sof] == 0xFF && jpeg[sof + 1] == 0xC0)) ++sof;
    REQUIRE(sof + 9 < jpeg.size());
    for (std::size_t k : {sof + 5, sof + 7}) jpeg[k] = 0xFF, jpeg[k + 1] = 0xDC;  // 65500
    write_bytes(dir.file("img/a/big.png"), jpeg);
    CHECK_THROWS_WITH(folder->read(0, sample.data(), &label),
                      Contains(dir.file("img/a/big.png")) &&
                          Contains("65500 x 65500 pixels, more than the 268435456-pixel"));
  }
  SECTION("a JPEG that ends inside the image data") {
    std::mt19937 rng(3);
    Bytes noise(16 * 16 * 3);
    for (auto& v : noise) v = static_cast<std::uint8_t>(rng());
    Bytes jpeg = jpeg_bytes(16, 16, noise, 90, false);  // mostly scan data
    jpeg.resize(jpeg.size() - 20);
    write_bytes(dir.file("img/a/cut.jpg"), jpeg);
    std::vector<float> sample(48);
    std::int64_t label = 0;
    CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 4, 4, 3)->read(0, sample.data(), &label),
                      Contains(dir.file("img/a/cut.jpg")) && Contains("Premature end") &&
                          Contains("ends at byte offset " + std::to_string(jpeg.size())));
  }
}

// NaN and infinity have no place in samples or targets: each is an error when
// the file is opened, naming the file and where the value is.
TEST_CASE("NaN and infinity in NPY and CSV data are errors naming the element") {
  TempDir dir;
  const std::int64_t y[4] = {0, 1, 0, 1};
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(4,)", y, sizeof y));
  SECTION("NPY samples, float32 and float64") {
    float x[12] = {};
    x[5] = std::numeric_limits<float>::quiet_NaN();
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(4, 3)", x, sizeof x));
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy")),
                      Contains(dir.file("x.npy")) && Contains("element 5 (sample 1, byte offset") &&
                          Contains("is NaN") && Contains("must be finite"));
    double wide[12] = {};
    wide[11] = -std::numeric_limits<double>::infinity();
    write_bytes(dir.file("x.npy"), npy_bytes("<f8", "(4, 3)", wide, sizeof wide));
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy")),
                      Contains("element 11 (sample 3") && Contains("is -inf"));
    wide[11] = 1e39;  // finite as float64, infinite as float32
    write_bytes(dir.file("x.npy"), npy_bytes("<f8", "(4, 3)", wide, sizeof wide));
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy")),
                      Contains("element 11 (sample 3") && Contains("outside the float32 range"));
  }
  SECTION("NPY regression targets") {
    const float x[12] = {};
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(4, 3)", x, sizeof x));
    const float t[4] = {0.5f, 1, std::numeric_limits<float>::infinity(), 2};
    write_bytes(dir.file("t.npy"), npy_bytes("<f4", "(4,)", t, sizeof t));
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("t.npy")),
                      Contains(dir.file("t.npy")) && Contains("element 2 (sample 2") &&
                          Contains("is inf") && Contains("targets must be finite"));
  }
  SECTION("CSV features and regression targets") {
    const std::string path = dir.file("a.csv");
    for (const std::string value : {"nan", "inf", "-inf", "NaN", "infinity"}) {
      write_text(path, "a,b\n1,0\n" + value + ",1\n");
      CHECK_THROWS_WITH(open_csv({path}), Contains(path) &&
                                              Contains("line 3, column 'a': '" + value +
                                                       "' is not a finite number") &&
                                              Contains("fill in or drop"));
    }
    write_text(path, "a,b\n1,0.5\n2,inf\n");
    CsvOptions o{path};
    o.regression = true;
    CHECK_THROWS_WITH(open_csv(o),
                      Contains(path) && Contains("line 3, column 'b': 'inf' is not a finite"));
  }
}

TEST_CASE("gzip streams: damage and trailing bytes are errors with the offset and a fix") {
  TempDir dir;
  const Bytes raw = idx_images();  // 76 bytes
  const Bytes gz = gzip_of(dir, raw);
  write_bytes(dir.file("l.idx"), idx_labels());
  const std::string path = dir.file("i.idx.gz");
  SECTION("only the CRC-32 wrong") {
    Bytes bad = gz;
    bad[bad.size() - 8] ^= 0xFF;
    write_bytes(path, bad);
    CHECK_THROWS_WITH(open_idx(path, dir.file("l.idx")),
                      Contains(path) && Contains("corrupt gzip stream: the CRC-32") &&
                          Contains("after 76 decompressed bytes") &&
                          Contains("copy or download it again"));
  }
  SECTION("bad compressed data") {
    Bytes bad = gz;
    bad[10] = 0xFF;  // the first deflate block: reserved block type 3
    write_bytes(path, bad);
    CHECK_THROWS_WITH(open_idx(path, dir.file("l.idx")),
                      Contains(path) && Contains("corrupt gzip stream: invalid compressed data") &&
                          Contains("detected at compressed byte offset 11") &&
                          Contains("after 0 decompressed bytes: the file is damaged"));
  }
  SECTION("bytes after the end of the stream") {
    Bytes bad = gz;
    bad.insert(bad.end(), {'j', 'u', 'n', 'k'});
    write_bytes(path, bad);
    CHECK_THROWS_WITH(open_idx(path, dir.file("l.idx")),
                      Contains(path) && Contains("has 4 bytes after the end of its gzip stream, "
                                                 "from byte offset " +
                                                 std::to_string(gz.size())));
  }
  SECTION("concatenated members are one stream") {
    Bytes two = gzip_of(dir, Bytes(raw.begin(), raw.begin() + 30));
    const Bytes rest = gzip_of(dir, Bytes(raw.begin() + 30, raw.end()));
    two.insert(two.end(), rest.begin(), rest.end());
    write_bytes(path, two);
    CHECK(open_idx(path, dir.file("l.idx"))->size() == 5);
  }
}

TEST_CASE("NPY data followed by more bytes is an error, like IDX") {
  TempDir dir;
  const float x[12] = {};
  const std::int64_t y[4] = {0, 1, 0, 1};
  Bytes bytes = npy_bytes("<f4", "(4, 3)", x, sizeof x);
  const std::size_t end = bytes.size();
  bytes.insert(bytes.end(), 3, 0);
  write_bytes(dir.file("x.npy"), bytes);
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(4,)", y, sizeof y));
  CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy")),
                    Contains(dir.file("x.npy")) &&
                        Contains("more than the " + std::to_string(end) +
                                 " bytes its header declares: 3 bytes after the data, from byte "
                                 "offset " +
                                 std::to_string(end)));
}

TEST_CASE("A data file far longer than its header declares is refused before it is read") {
  // 64 GiB of holes after a small array: reading it whole would take more
  // memory than the machine has ("not enough memory to read ...") or minutes.
  TempDir dir;
  const float x[12] = {};
  const std::int64_t y[4] = {0, 1, 0, 1};
  const Bytes bytes = npy_bytes("<f4", "(4, 3)", x, sizeof x);
  write_bytes(dir.file("x.npy"), bytes);
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(4,)", y, sizeof y));
  const std::uint64_t huge = std::uint64_t{64} << 30;
  std::filesystem::resize_file(dir.file("x.npy"), huge);
  write_bytes(dir.file("l.idx"), idx_labels());
  write_bytes(dir.file("i.idx"), idx_images());
  std::filesystem::resize_file(dir.file("i.idx"), huge);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      open_npy(dir.file("x.npy"), dir.file("y.npy")),
      Contains(dir.file("x.npy")) && Contains(std::to_string(huge) + " bytes") &&
          Contains("more than the " + std::to_string(bytes.size()) + " bytes its header declares"));
  CHECK_THROWS_WITH(open_idx(dir.file("i.idx"), dir.file("l.idx")),
                    Contains(dir.file("i.idx")) && Contains("more than the 76 bytes its header "
                                                            "declares"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("CSV columns named twice, or the label among the features, are errors") {
  TempDir dir;
  const std::string path = dir.file("a.csv");
  write_text(path, "a,b,a,y\n1,2,3,0\n4,5,6,1\n");
  CHECK_THROWS_WITH(open_csv({path}), Contains(path) && Contains("line 1") &&
                                          Contains("names column 'a' twice (columns 1 and 3)"));
  write_text(path, "a,b,y\n1,2,0\n4,5,1\n");
  CsvOptions o{path};
  o.label = "y";
  o.features = {"a", "y"};
  CHECK_THROWS_WITH(open_csv(o), Contains(path) &&
                                     Contains("`features` lists 'y', the label column (`label`)") &&
                                     Contains("remove it from `features`"));
  o.label = "";  // the last column
  CHECK_THROWS_WITH(open_csv(o), Contains("`features` lists 'y', the label column (the last"));
  o.features = {"a", "b", "a"};
  CHECK_THROWS_WITH(open_csv(o), Contains("`features` lists 'a' twice"));
}

TEST_CASE("a CSV column without a name (pandas' index) is not taken as a feature unasked") {
  TempDir dir;
  const std::string path = dir.file("indexed.csv");
  write_text(path, ",a,b,label\n0,0.5,0.2,0\n1,0.1,0.2,1\n");
  CsvOptions o{path};
  o.label = "label";
  CHECK_THROWS_WITH(open_csv(o), Contains(path) && Contains("line 1: column 1 has no name") &&
                                     Contains("to_csv(index=False)"));
  o.features = {"a", "b"};  // listed: the index is left out
  CHECK(open_csv(o)->sample_shape() == trainer::Shape{2});
  o.features = {"", "a", "b"};  // or kept, by its empty name
  CHECK(open_csv(o)->sample_shape() == trainer::Shape{3});
  // Two levels of index: the same advice, not two columns of one name.
  write_text(path, ",,a,label\n0,0,0.5,0\n0,1,0.1,1\n");
  o.features = {};
  CHECK_THROWS_WITH(open_csv(o), Contains("column 1 has no name") && Contains("to_csv"));
  // Another column without a name: no talk of pandas.
  write_text(path, "a,b,,label\n0.5,0.2,1,0\n0.1,0.2,1,1\n");
  CHECK_THROWS_WITH(open_csv(o), Contains("column 3 has no name in the header (a delimiter too "
                                          "many") &&
                                     !Contains("pandas"));
  o.header = false;  // no header: columns are numbered, none is unnamed
  o.label = "3";
  o.features = {};
  write_text(path, "0,0.5,0.2,0\n1,0.1,0.2,1\n");
  CHECK(open_csv(o)->sample_shape() == trainer::Shape{3});
}

TEST_CASE("error wording: empty files and data, a non-boolean header value, a NUL byte") {
  TempDir dir;
  SECTION("an empty CIFAR file") {
    write_bytes(dir.file("c.bin"), {});
    CHECK_THROWS_WITH(
        open_cifar({dir.file("c.bin")}, CifarVariant::cifar10),
        Contains(dir.file("c.bin")) && Contains("is empty (0 bytes)") && !Contains("multiple"));
  }
  SECTION("NPY fortran_order that is not a boolean") {
    const float x[4] = {};
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(4,)", x, sizeof x, "Maybe"));
    write_bytes(dir.file("y.npy"), npy_bytes("<f4", "(4,)", x, sizeof x));
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy")),
                      Contains(dir.file("x.npy")) &&
                          Contains("'fortran_order' is 'Maybe', not a boolean") &&
                          !Contains("True is not supported"));
  }
  SECTION("NPY and IDX files without samples") {
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(0, 3)", nullptr, 0));
    write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(0,)", nullptr, 0));
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy")),
                      Contains(dir.file("x.npy")) && Contains("the data is empty"));
    write_bytes(dir.file("i.idx"), idx_bytes({0, 3, 4}, {}));
    write_bytes(dir.file("l.idx"), idx_bytes({0}, {}));
    CHECK_THROWS_WITH(open_idx(dir.file("i.idx"), dir.file("l.idx")),
                      Contains(dir.file("i.idx")) && Contains("the data is empty"));
  }
  SECTION("a NUL byte in a CSV cell is escaped, not the end of the message") {
    write_text(dir.file("a.csv"), std::string("a,b\n1,0\nx\0y,1\n", 15));
    CHECK_THROWS_WITH(open_csv({dir.file("a.csv")}),
                      Contains("line 3, column 'a': 'x\\x00y' is not a number"));
  }
}

TEST_CASE("decoder and folder failures name the file, what failed and a fix") {
  TempDir dir;
  std::vector<float> sample(48);
  std::int64_t label = 0;
  SECTION("a PNG chunk of an invalid type") {
    Bytes png = png_bytes(3, 3, 3, Bytes(27, 5));
    const auto idat =
        std::search(png.begin(), png.end(), std::begin("IDAT"), std::begin("IDAT") + 4);
    REQUIRE(idat != png.end());
    idat[3] = '[';
    fix_png_crcs(png);
    write_bytes(dir.file("img/a/bad.png"), png);
    CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 4, 4, 3)->read(0, sample.data(), &label),
                      Contains(dir.file("img/a/bad.png")) &&
                          Contains("while reading its header chunks: the decoder reports") &&
                          Contains("re-encode it as an 8-bit RGB or grayscale PNG or JPEG"));
  }
  SECTION("a size field larger than the file could hold is refused before the pixels") {
    // A 16384 x 16384 image (768 MiB of RGB) claimed by a file of a few
    // hundred bytes: no decoder allocation, an error naming the size.
    Bytes png = png_bytes(8, 8, 3, Bytes(192, 5));
    for (const std::size_t at : {16, 20}) {  // IHDR width, height (big-endian)
      png[at] = 0;
      png[at + 1] = 0;
      png[at + 2] = 0x40;
      png[at + 3] = 0;
    }
    fix_png_crcs(png);
    write_bytes(dir.file("img/a/huge.png"), png);
    CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 4, 4, 3)->read(0, sample.data(), &label),
                      Contains("'" + dir.file("img/a/huge.png") +
                               "': the IHDR chunk at byte offset 8 gives 16384 x 16384 pixels") &&
                          Contains("more than the file's " + std::to_string(png.size()) +
                                   " bytes can hold even compressed 1032 times: a damaged size "
                                   "field"));
    std::filesystem::remove(dir.file("img/a/huge.png"));
    Bytes jpeg = jpeg_bytes(8, 8, Bytes(192, 5), 75, true);
    const std::uint8_t sof2[] = {0xFF, 0xC2};
    const auto sof = std::search(jpeg.begin(), jpeg.end(), std::begin(sof2), std::end(sof2));
    REQUIRE(sof != jpeg.end());
    for (const std::size_t at : {5, 7}) {  // height, width (big-endian)
      sof[at] = 0x40;
      sof[at + 1] = 0;
    }
    write_bytes(dir.file("img/a/huge.jpg"), jpeg);
    CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 4, 4, 3)->read(0, sample.data(), &label),
                      Contains("'" + dir.file("img/a/huge.jpg") +
                               "': the frame header (SOF) gives 16384 x 16384 pixels") &&
                          Contains("a damaged size field"));
    std::filesystem::remove(dir.file("img/a/huge.jpg"));
    // A CMYK one too: the size is what is wrong with it, said with its name.
    Bytes cmyk = cmyk_jpeg_bytes(8, 8, {10, 20, 30, 40});
    const std::uint8_t sof0[] = {0xFF, 0xC0};
    const auto cmyk_sof = std::search(cmyk.begin(), cmyk.end(), std::begin(sof0), std::end(sof0));
    REQUIRE(cmyk_sof != cmyk.end());
    for (const std::size_t at : {5, 7}) {
      cmyk_sof[at] = 0x40;
      cmyk_sof[at + 1] = 0;
    }
    write_bytes(dir.file("img/a/huge_cmyk.jpg"), cmyk);
    CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 4, 4, 3)->read(0, sample.data(), &label),
                      Contains("'" + dir.file("img/a/huge_cmyk.jpg") +
                               "': the frame header (SOF) gives 16384 x 16384 pixels"));
    std::filesystem::remove(dir.file("img/a/huge_cmyk.jpg"));
    // One colour, as small as each format makes it: still read.
    write_bytes(dir.file("img/a/flat.png"), png_bytes(1024, 1024, 3, Bytes(3 << 20, 7)));
    write_bytes(dir.file("img/b/flat.jpg"), jpeg_bytes(1024, 1024, Bytes(3 << 20, 7), 10, true));
    const auto flat = open_image_folder(dir.file("img"), 4, 4, 3);
    CHECK_NOTHROW(flat->read(0, sample.data(), &label));
    CHECK_NOTHROW(flat->read(1, sample.data(), &label));
  }
  SECTION("JPEG scan data cut short and closed again with an end marker") {
    Bytes rgb(64 * 64 * 3);
    for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 37 % 251);
    Bytes jpeg = jpeg_bytes(64, 64, rgb, 90);
    jpeg.resize(jpeg.size() / 2);
    jpeg.insert(jpeg.end(), {0xFF, 0xD9});
    write_bytes(dir.file("img/a/cut.jpg"), jpeg);
    CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 4, 4, 3)->read(0, sample.data(), &label),
                      Contains(dir.file("img/a/cut.jpg")) &&
                          Contains("its scan data stops before the end of the image, at a marker"));
  }
  SECTION("a CMYK JPEG") {
    write_bytes(dir.file("img/a/print.jpg"), cmyk_jpeg_bytes(8, 8, {10, 20, 30, 40}));
    CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 4, 4, 3)->read(0, sample.data(), &label),
                      Contains(dir.file("img/a/print.jpg")) && Contains("it is a CMYK JPEG") &&
                          Contains("re-encode it as an RGB or grayscale JPEG or PNG"));
  }
  SECTION("a class folder that cannot be listed") {
    write_bytes(dir.file("img/a/ok.png"), png_bytes(3, 3, 3, Bytes(27, 5)));
    write_bytes(dir.file("img/b/ok.png"), png_bytes(3, 3, 3, Bytes(27, 5)));
    namespace fs = std::filesystem;
    fs::permissions(dir.file("img/b"), fs::perms::none);
    std::error_code ec;
    fs::directory_iterator probe(dir.file("img/b"), ec);
    if (!ec) {  // an administrator lists any folder: one it cannot, if there is one
      fs::permissions(dir.file("img/b"), fs::perms::owner_all);
      fs::remove_all(dir.file("img/b"));
      fs::create_directory_symlink("/proc/1/map_files", dir.file("img/b"), ec);
      fs::directory_iterator again(dir.file("img/b"), ec);
      if (!ec) {
        WARN("skipped: every folder can be listed here");
        return;
      }
    }
    CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 4, 4, 3),
                      Contains("cannot list the class folder '" + dir.file("img/b") + "': ") &&
                          Contains("make it readable") && !Contains("filesystem error"));
    fs::permissions(dir.file("img/b"), fs::perms::owner_all, ec);
  }
}

// A device or a pipe given as a data file would be read without end (/dev/zero)
// or block until something writes to it (a FIFO): every source refuses it by
// name, as the config layer refuses a config that is not a regular file.
TEST_CASE("a data file that is not a regular file is refused, not read") {
  TempDir dir;
  Watchdog watchdog(std::chrono::seconds(20));
  const std::string fifo = dir.file("fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  write_bytes(dir.file("l.idx"), idx_labels());
  const float x[4] = {};
  write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(2, 2)", x, sizeof x));
  // The message of the error `open` throws.
  const auto error_of = [](const std::function<void()>& open) {
    try {
      open();
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string refused = "' is not a regular file";
  const std::string fix = "write the data to a file and give that file's path";
  watchdog.trial("idx images: a FIFO");
  CHECK_THAT(error_of([&] { open_idx(fifo, dir.file("l.idx")); }),
             Contains("data file '" + fifo + refused + " (a FIFO (named pipe))") && Contains(fix));
  watchdog.trial("npy y: a FIFO");
  CHECK_THAT(error_of([&] { open_npy(dir.file("x.npy"), fifo); }),
             Contains("data file '" + fifo + refused));
  watchdog.trial("csv: a FIFO");
  CHECK_THAT(error_of([&] { open_csv({fifo}); }), Contains("data file '" + fifo + refused));
  watchdog.trial("cifar: a FIFO");
  CHECK_THAT(error_of([&] { open_cifar({fifo}, CifarVariant::cifar10); }),
             Contains("data file '" + fifo + refused));
  if (std::filesystem::is_character_file("/dev/zero")) {
    watchdog.trial("idx images: /dev/zero");
    CHECK_THAT(error_of([&] { open_idx("/dev/zero", dir.file("l.idx")); }),
               Contains("data file '/dev/zero" + refused + " (a character device)"));
  }
}

namespace {

// `count` gzip members of 1 MiB of zeros each, made once and copied: a small
// file that inflates to `count` MiB (concatenated members are one stream).
Bytes zero_members(const TempDir& dir, std::size_t count) {
  const Bytes member = gzip_of(dir, Bytes(1 << 20, 0));
  Bytes out;
  for (std::size_t k = 0; k < count; ++k) out.insert(out.end(), member.begin(), member.end());
  return out;
}

}  // namespace

// A few kilobytes of gzip can inflate to gigabytes: the header is checked as
// soon as it is out, so the file is refused at once, by name, whatever the
// machine's memory (before, all of it was inflated first: std::bad_alloc).
TEST_CASE("a gzip bomb is refused once its header is out, not inflated in full") {
  TempDir dir;
  Watchdog watchdog(std::chrono::seconds(60));
  write_bytes(dir.file("l.idx"), idx_labels());
  const Bytes bomb = zero_members(dir, 256);  // 256 MiB of zeros
  const std::string path = dir.file("i.idx.gz");

  watchdog.trial("IDX: a valid header, then far more data than it declares");
  Bytes idx = gzip_of(dir, idx_bytes({5, 3, 4}, Bytes(60, 1)));  // 76 bytes
  idx.insert(idx.end(), bomb.begin(), bomb.end());
  write_bytes(path, idx);
  CHECK_THROWS_WITH(open_idx(path, dir.file("l.idx")),
                    Contains("data file '" + path +
                             "' decompresses to more than the 76 bytes its "
                             "header declares") &&
                        Contains("decompressed byte offset 76"));

  watchdog.trial("IDX: zeros only, no IDX header");
  write_bytes(path, bomb);
  CHECK_THROWS_WITH(open_idx(path, dir.file("l.idx")),
                    Contains("'" + path + "' is not an IDX file: magic number 0x00000000"));

  watchdog.trial("NPY: a valid header, then far more data than it declares");
  const float x[4] = {};
  const Bytes npy = npy_bytes("<f4", "(2, 2)", x, sizeof x);
  Bytes npy_gz = gzip_of(dir, npy);
  npy_gz.insert(npy_gz.end(), bomb.begin(), bomb.end());
  write_bytes(dir.file("x.npy.gz"), npy_gz);
  const std::int64_t y[2] = {0, 1};
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(2,)", y, sizeof y));
  CHECK_THROWS_WITH(
      open_npy(dir.file("x.npy.gz"), dir.file("y.npy")),
      Contains("data file '" + dir.file("x.npy.gz") + "' decompresses to more than the " +
               std::to_string(npy.size()) + " bytes its header declares"));

  // The other way round: a header declaring far more than the whole file can
  // inflate to (deflate's largest ratio is 1032:1) is refused as soon as it
  // is out, before the zeros after it are inflated into memory.
  watchdog.trial("IDX: a header declaring 10 GB, then 256 MiB of zeros");
  Bytes huge = gzip_of(dir, idx_bytes({100000, 1000, 100}, Bytes(16, 0)));
  huge.insert(huge.end(), bomb.begin(), bomb.end());
  write_bytes(path, huge);
  CHECK_THROWS_WITH(open_idx(path, dir.file("l.idx")),
                    Contains("data file '" + path +
                             "' is cut short: its header declares 10000000016 bytes, but " +
                             std::to_string(huge.size()) +
                             " gzip-compressed bytes decompress to at most 1032 times as many"));
}

// A file larger than the memory left is an error naming it and its size, not
// a bare "std::bad_alloc". An 8 TiB sparse file: refused by malloc wherever
// the kernel does not promise memory it lacks (vm.overcommit_memory 1).
TEST_CASE(
    "a data file larger than memory is reported with its size; one of another kind at its "
    "header") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  WARN("skipped: a sanitizer's allocator reports an allocation this large instead of failing it");
  return;
#endif
  std::ifstream overcommit("/proc/sys/vm/overcommit_memory");
  int mode = 1;
  overcommit >> mode;
  if (mode == 1) {
    WARN("skipped: vm.overcommit_memory is 1, a huge allocation would succeed");
    return;
  }
  TempDir dir;
  const std::string path = dir.file("huge.idx");
  // A header that declares all of it: [1, 2^21, 2^22] bytes after 16.
  write_bytes(path, idx_bytes({1, 1u << 21, 1u << 22}, {0}));
  std::error_code ec;
  std::filesystem::resize_file(path, (std::uintmax_t{1} << 43) + 16, ec);
  if (ec) {
    WARN("skipped: cannot make an 8 TiB sparse file here: " << ec.message());
    return;
  }
  write_bytes(dir.file("l.idx"), idx_labels());
  CHECK_THROWS_WITH(open_idx(path, dir.file("l.idx")),
                    Contains("not enough memory to read data file '" + path +
                             "' (8796093022224 "
                             "bytes)"));
  // A file of another kind is refused at its header, not after (or instead
  // of) reading it whole: zeros are no IDX magic, nor NPY's.
  const std::string zeros = dir.file("zeros");
  write_bytes(zeros, Bytes(16, 0));
  std::filesystem::resize_file(zeros, std::uintmax_t{1} << 43);
  CHECK_THROWS_WITH(open_idx(zeros, dir.file("l.idx")),
                    Contains("'" + zeros + "' is not an IDX file: magic number 0x00000000"));
  CHECK_THROWS_WITH(open_npy(zeros, dir.file("l.idx")),
                    Contains("NPY file '" + zeros + "': not a .npy file"));
}

namespace {

// An .npy file (version 1.0) with the header dict `header` as written, padded
// to 64 bytes, and `data`.
Bytes npy_with_header(std::string header, const Bytes& data) {
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.push_back(static_cast<std::uint8_t>(header.size() & 0xFF));
  out.push_back(static_cast<std::uint8_t>(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

}  // namespace

// The header dict is read strictly: anything numpy would not write (a missing
// comma or bracket, an unknown byte order, a key given twice) is an error
// with the byte offset in the file, not a header read as something else.
TEST_CASE("a mangled NPY header is an error with its byte offset") {
  TempDir dir;
  write_bytes(dir.file("short.npy"), Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0});
  CHECK_THROWS_WITH(open_npy(dir.file("short.npy"), dir.file("short.npy")),
                    Contains("NPY file '" + dir.file("short.npy") +
                             "': truncated at byte offset 8: the magic, version and header "
                             "length take 10 bytes"));
  const std::int64_t y[4] = {0, 1, 0, 1};
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(4,)", y, sizeof y));
  const Bytes data(16 * 4, 0);
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }";
  write_bytes(dir.file("x.npy"), npy_with_header(ok, data));
  CHECK(open_npy(dir.file("x.npy"), dir.file("y.npy"))->sample_shape() == Shape{4});
  // Each header, and the text at the offset the error must name (none: the
  // end of the padded header).
  const std::pair<std::string, std::string> cases[] = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4 4), }", "4), }"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4, }", "}"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4)", ""},
      {"{'descr': 'xf4', 'fortran_order': False, 'shape': (4, 4), }", "'xf4'"},
      {"{'descr': '<f4', 'fortran_order': False, 'descr': '<i8', 'shape': (4, 4), }",
       "'descr': '<i8'"},
      {"{'descr': '<f4', 'fortran_order': False 'shape': (4, 4), }", "'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), 'extra': 1}", "'extra'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), } x", "x"},
  };
  for (const auto& [header, at] : cases) {
    INFO(header);
    const Bytes file = npy_with_header(header, data);
    const std::size_t offset = at.empty() ? file.size() - data.size() : 10 + header.find(at);
    write_bytes(dir.file("x.npy"), file);
    CHECK_THROWS_WITH(open_npy(dir.file("x.npy"), dir.file("y.npy")),
                      Contains("NPY file '" + dir.file("x.npy") +
                               "': malformed header at byte "
                               "offset " +
                               std::to_string(offset) + ": ") &&
                          Contains("save the array again"));
  }
}
