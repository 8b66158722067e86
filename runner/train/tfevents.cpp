// TFRecord framing and the few protocol-buffer fields of Event, Summary and
// Summary.Value that scalar summaries use (field numbers from TensorFlow's
// event.proto and summary.proto).
#include "runner/train/tfevents.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "runner/train/metrics.h"  // throw_write_failed

namespace trainer::train {
namespace {

std::array<std::uint32_t, 256> crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected
    table[i] = c;
  }
  return table;
}

// Protocol-buffer encoding: varints, tags, and length-delimited fields.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire_type));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

template <typename T>
void put_fixed(std::string& out, T value) {  // little-endian, as x86-64 stores it
  char bytes[sizeof value];
  std::memcpy(bytes, &value, sizeof value);
  out.append(bytes, sizeof value);
}

// Event fields: wall_time = 1 (double), step = 2 (int64), file_version = 3, summary = 5.
std::string event_header(double wall_time, std::int64_t step) {
  std::string e;
  put_tag(e, 1, 1);
  put_fixed(e, wall_time);
  if (step != 0) {
    put_tag(e, 2, 0);
    put_varint(e, static_cast<std::uint64_t>(step));
  }
  return e;
}

double seconds_since_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  static const std::array<std::uint32_t, 256> table = crc32c_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ bytes[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  const std::uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  const std::uint64_t length = data.size();
  put_fixed(r, length);
  put_fixed(r, masked_crc32c(r.data(), sizeof length));
  r += data;
  put_fixed(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::string file_version_event(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, std::int64_t step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;  // Summary.Value: tag = 1, simple_value = 2 (float)
    put_bytes(v, 1, tag);
    put_tag(v, 2, 5);
    put_fixed(v, value);
    put_bytes(summary, 1, v);  // Summary.value = 1 (repeated)
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

EventsWriter::EventsWriter(const std::string& path, bool append)
    : path_(path), out_(path, std::ios::binary | (append ? std::ios::app : std::ios::trunc)) {
  // A failed open leaves its reason in errno (ENOSPC, EACCES, ...).
  if (!out_) throw_write_failed(path, errno != 0 ? errno : EIO);
  std::error_code ec;
  if (append) bytes_ = std::filesystem::file_size(path, ec);
  if (bytes_ == 0) write_record(file_version_event(seconds_since_epoch()));
}

void EventsWriter::write_scalars(std::int64_t step, const Scalars& scalars) {
  if (!out_.is_open() || scalars.empty()) return;
  write_record(scalars_event(seconds_since_epoch(), step, scalars));
}

void EventsWriter::sync() const {
  if (out_.is_open()) sync_record_file(path_);
}

void EventsWriter::write_record(const std::string& event) {
  const std::string record = tfrecord(event);
  errno = 0;
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
  if (!out_) throw_write_failed(path_, errno ? errno : EIO);
  bytes_ += record.size();
}

}  // namespace trainer::train
