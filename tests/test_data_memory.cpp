// An NPY samples array is read into the memory the dataset keeps, once: the
// heap it takes while opening stays near the array's own size, not twice it
// (the whole file read first, then converted).
// labels: cpu
// links: trainer_data
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "data/sources.h"
#include "test_data_fixtures.h"
#include "tests/heap_counter.h"

using namespace trainer::data;
using namespace trainer::data::testing;

TEST_CASE("an NPY samples array of uint8 or float32 takes its own size in memory while it opens") {
  TempDir dir;
  constexpr std::size_t kSamples = 4096, kFeatures = 1024;  // 4 MiB of bytes, 16 MiB of floats
  std::vector<std::int64_t> labels(kSamples, 1);
  write_bytes(dir.file("y.npy"),
              npy_bytes("<i8", "(4096,)", labels.data(), labels.size() * sizeof(labels[0])));
  for (const bool floats : {false, true}) {
    INFO((floats ? "float32" : "uint8"));
    const std::size_t bytes = kSamples * kFeatures * (floats ? sizeof(float) : 1);
    {
      std::vector<std::uint8_t> data(bytes, 1);
      write_bytes(dir.file("x.npy"),
                  npy_bytes(floats ? "<f4" : "|u1", "(4096, 1024)", data.data(), data.size()));
    }
    const std::size_t before = reset_heap_peak();
    const auto dataset = open_npy(dir.file("x.npy"), dir.file("y.npy"));
    CHECK(dataset->size() == static_cast<std::int64_t>(kSamples));
    // The array, the labels (twice: file and int64s) and small change; reading
    // the file whole first would add the array's size again.
    const std::size_t taken = heap_peak() - before;
    CHECK(taken >= bytes);
    CHECK(taken < bytes + bytes / 4);
  }
}
