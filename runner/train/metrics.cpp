// Accuracy counting and the JSON-lines metrics file.
#include "runner/train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "runner/checkpoint/durable_file.h"
#include "runner/json_text.h"

namespace trainer::train {

Hits count_hits(const float* logits, const std::int64_t* labels, std::int64_t rows,
                std::int64_t classes) {
  Hits h;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t label = labels[r];
    if (label < 0 || label >= classes) continue;
    const float* row = logits + r * classes;
    const float target = row[label];
    std::int64_t greater = 0;  // classes scored above the label (ties go to the lower index)
    bool nan = false;          // a NaN score ranks nothing: the row is a miss
    for (std::int64_t c = 0; c < classes; ++c) {
      nan = nan || std::isnan(row[c]);
      if (row[c] > target || (row[c] == target && c < label)) ++greater;
    }
    ++h.rows;
    if (nan) continue;
    if (greater == 0) ++h.top1;
    if (greater < 5) ++h.top5;
  }
  return h;
}

void throw_write_failed(const std::string& path, int error) {
  const bool full = error == ENOSPC || error == EDQUOT;
  throw std::runtime_error("cannot write " + path + ": " + std::strerror(error) + "; " +
                           (full ? "free space" : "make it writable") +
                           " and resume the run (trainer run --resume " +
                           std::filesystem::path(path).parent_path().string() +
                           "): it goes on from its last checkpoint and cuts this file back to it");
}

void sync_record_file(const std::string& path) {
  const checkpoint::FileDescriptor file(path, O_RDONLY);
  if (!file || ::fsync(file.get()) != 0) throw_write_failed(path, errno != 0 ? errno : EIO);
}

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  // A failed open leaves its reason in errno (ENOSPC, EACCES, ...).
  if (!out_) throw_write_failed(path, errno != 0 ? errno : EIO);
  std::error_code ec;
  if (append) bytes_ = std::filesystem::file_size(path, ec);
}

void MetricsWriter::sync() const {
  if (out_.is_open()) sync_record_file(path_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  const std::string line = json_text(record) + '\n';
  errno = 0;
  out_ << line;
  out_.flush();
  if (!out_) throw_write_failed(path_, errno ? errno : EIO);
  bytes_ += line.size();
}

}  // namespace trainer::train
