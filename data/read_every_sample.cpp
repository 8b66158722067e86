// read_every_sample: worker threads take chunks of indices from one counter;
// failures are counted and the earliest few kept in index order.
#include "data/read_every_sample.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

namespace trainer::data {

SampleScan read_every_sample(const Dataset& dataset, int threads, std::size_t keep_errors,
                             const std::function<void(std::int64_t)>& progress) {
  constexpr std::int64_t kChunk = 64;
  constexpr auto kProgressEvery = std::chrono::seconds(5);
  const std::int64_t size = dataset.size();
  const std::size_t sample_numel = static_cast<std::size_t>(numel(dataset.sample_shape()));
  const Shape target_shape = dataset.target_shape();
  const std::size_t target_numel =
      target_shape.empty() ? 1 : static_cast<std::size_t>(numel(target_shape));

  SampleScan scan;
  scan.samples = size;
  std::atomic<std::int64_t> next{0};
  std::atomic<std::int64_t> done{0};
  std::mutex failures_mutex;

  const auto note_failure = [&](std::int64_t index, std::string message) {
    const std::lock_guard lock(failures_mutex);
    ++scan.failed;
    auto& kept = scan.first_errors;
    if (kept.size() == keep_errors && (kept.empty() || kept.back().first < index)) return;
    const auto at = std::lower_bound(kept.begin(), kept.end(), index,
                                     [](const auto& e, std::int64_t i) { return e.first < i; });
    kept.insert(at, {index, std::move(message)});
    if (kept.size() > keep_errors) kept.pop_back();
  };

  const auto work = [&](bool reports_progress) {
    std::vector<float> sample(sample_numel), target(target_numel);
    std::int64_t label = 0;
    auto last_report = std::chrono::steady_clock::now();
    for (;;) {
      const std::int64_t begin = next.fetch_add(kChunk);
      if (begin >= size) return;
      const std::int64_t end = std::min(size, begin + kChunk);
      for (std::int64_t i = begin; i < end; ++i) {
        try {
          dataset.read(i, sample.data(), &label, target.data());
        } catch (const std::exception& e) {
          note_failure(i, e.what());
        }
      }
      done += end - begin;
      if (reports_progress && progress &&
          std::chrono::steady_clock::now() - last_report >= kProgressEvery) {
        last_report = std::chrono::steady_clock::now();
        progress(done.load());
      }
    }
  };

  std::vector<std::jthread> workers;
  for (int t = 1; t < std::max(1, threads); ++t) workers.emplace_back(work, false);
  work(true);
  workers.clear();  // joins
  return scan;
}

}  // namespace trainer::data
