// Loader throughput on Fashion-MNIST: scale + normalize + random_crop(28,
// padding 4) + random_flip, batch 128, for each worker count given. Prints one
// `RESULT trainer <workers> <samples/s>` line per run (steady state: from the
// first batch to the end of the epoch) for bench/run_loader_bench.sh.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/sources.h"
#include "data/transforms.h"

using namespace trainer;
using namespace trainer::data;

int main(int argc, char** argv) {
  std::string root = "/usr/share/datasets/fashion-mnist";
  std::vector<std::int64_t> worker_counts = {1, 2};
  std::int64_t epochs = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--root")
      root = argv[i + 1];
    else if (key == "--epochs")
      epochs = std::atoll(argv[i + 1]);
    else if (key == "--workers") {
      worker_counts.clear();
      for (const char* p = argv[i + 1]; *p;) {
        char* end = nullptr;
        worker_counts.push_back(std::strtoll(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: loader_bench [--root DIR] [--workers 1,2] [--epochs N]\n");
      return 2;
    }
  }
  try {
    const auto load_begin = std::chrono::steady_clock::now();
    auto dataset =
        open_idx(root + "/train-images-idx3-ubyte.gz", root + "/train-labels-idx1-ubyte.gz");
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - load_begin).count();
    std::printf("dataset: %s, %lld samples, read and decompressed in %.2f s\n",
                dataset->describe().c_str(), static_cast<long long>(dataset->size()), load_s);

    Attrs normalize, crop, flip;
    normalize.set("mean", std::vector<double>{0.2860});
    normalize.set("std", std::vector<double>{0.3530});
    crop.set("size", std::int64_t{28});
    crop.set("padding", std::int64_t{4});
    flip.set("p", 0.5);
    auto pipeline = std::make_shared<Pipeline>(build_pipeline(
        {{"scale", {}}, {"normalize", normalize}, {"random_crop", crop}, {"random_flip", flip}},
        true, dataset.get()));
    std::printf("transforms: %s\n", pipeline->describe().c_str());

    for (std::int64_t workers : worker_counts) {
      LoaderOptions options;
      options.batch_size = 128;
      options.workers = workers;
      options.prefetch = 4;
      options.seed = 1;
      Loader loader(dataset, pipeline, options);
      double seconds = 0;
      std::int64_t samples = 0;
      double checksum = 0;
      for (std::int64_t epoch = 0; epoch < epochs; ++epoch) {
        loader.start_epoch(epoch);
        const Batch* batch = loader.next();
        const auto begin = std::chrono::steady_clock::now();
        while ((batch = loader.next())) {
          samples += batch->rows;
          checksum += batch->inputs.f32()[0];
        }
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      }
      std::printf(
          "RESULT trainer %lld %.0f  (%lld samples in %.3f s; loader's own estimate "
          "%.0f samples/s; checksum %.3f)\n",
          static_cast<long long>(workers), double(samples) / seconds,
          static_cast<long long>(samples), seconds, loader.samples_per_second(), checksum);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loader_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
