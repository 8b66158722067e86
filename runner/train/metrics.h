// Metrics: accuracy/top-5 from logits, running means over a logging window,
// and the metrics.jsonl writer (one JSON object per line, flushed per record).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace trainer::train {

// Counts rows whose label is the arg-max (top1) or among the 5 largest logits
// (top5); a row with a NaN logit is neither (counted in `rows`).
struct Hits {
  std::int64_t top1 = 0;
  std::int64_t top5 = 0;
  std::int64_t rows = 0;
};
Hits count_hits(const float* logits, const std::int64_t* labels, std::int64_t rows,
                std::int64_t classes);

class MetricsWriter {
 public:
  MetricsWriter() = default;
  explicit MetricsWriter(const std::string& path, bool append = false);
  // Appends one line and flushes it; throws (throw_write_failed) when it
  // cannot be written whole.
  void write(const nlohmann::json& record);
  bool is_open() const { return out_.is_open(); }
  // The file's length so far (where a resumed run cuts it back to).
  std::uint64_t bytes_written() const { return bytes_; }
  // What was written, on the disk (before a checkpoint records the length).
  void sync() const;

 private:
  std::string path_;
  std::ofstream out_;
  std::uint64_t bytes_ = 0;
};

// Throws the error of a run-directory file that could not be written (a full
// disk): its path, the reason from `error` (an errno) and what to do.
[[noreturn]] void throw_write_failed(const std::string& path, int error);

// fsyncs the run-directory file `path`, whose writer has flushed it;
// throw_write_failed when that fails.
void sync_record_file(const std::string& path);

}  // namespace trainer::train
