// TensorBoard event files, written by hand: a file of TFRecords (length,
// masked CRC-32C of the length, data, masked CRC-32C of the data), each
// holding one `Event` protocol buffer: first the file version, then scalar
// summaries (`Summary.Value` with a tag and a simple_value) at a step.
// `tensorboard --logdir runs/` reads them; nothing else is needed here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace trainer::train {

// CRC-32C (Castagnoli), and the rotated, offset form TFRecord stores.
std::uint32_t crc32c(const void* data, std::size_t size);
std::uint32_t masked_crc32c(const void* data, std::size_t size);

// One TFRecord around `data`.
std::string tfrecord(const std::string& data);

using Scalars = std::vector<std::pair<std::string, float>>;

// Serialised Event messages.
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, std::int64_t step, const Scalars& scalars);

// Appends events to `path` (created with its file-version record when new or
// empty). The run directory's file is `events.out.tfevents.trainer`.
class EventsWriter {
 public:
  EventsWriter() = default;
  EventsWriter(const std::string& path, bool append);
  void write_scalars(std::int64_t step, const Scalars& scalars);
  // The file's length so far (where a resumed run cuts it back to).
  std::uint64_t bytes_written() const { return bytes_; }
  // What was written, on the disk (before a checkpoint records the length).
  void sync() const;

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::ofstream out_;
  std::uint64_t bytes_ = 0;
};

inline constexpr const char* kEventsFile = "events.out.tfevents.trainer";

}  // namespace trainer::train
