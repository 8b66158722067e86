// labels: cpu
// TensorBoard events: CRC-32C against published check values, TFRecord
// framing, and a run's events file read back by a decoder written here from
// the format (every record's checksums, the Event and Summary fields): the
// scalars are metrics.jsonl's records, a resumed run's events equal those of
// the run that never stopped (also when it found no checkpoint and started
// over), and output.tensorboard: false writes none.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "runner/train/tfevents.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
using trainer::train::crc32c;
using trainer::train::masked_crc32c;
namespace fs = std::filesystem;

namespace {

struct Scalar {
  std::int64_t step;
  std::string tag;
  float value;
  bool operator==(const Scalar&) const = default;
};

struct Decoded {
  std::string version;
  int version_records = 0;
  std::vector<Scalar> scalars;
};

std::uint64_t varint(const std::string& b, std::size_t& i) {
  std::uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    REQUIRE(i < b.size());
    const auto byte = static_cast<unsigned char>(b[i++]);
    v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
    if (byte < 0x80) return v;
  }
}

// Calls `field(number, wire_type, bytes)` for each field of a message.
template <typename F>
void each_field(const std::string& message, F field) {
  std::size_t i = 0;
  while (i < message.size()) {
    const std::uint64_t key = varint(message, i);
    const int number = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    std::size_t size = 0;
    if (wire == 0) {
      const std::size_t start = i;
      varint(message, i);
      field(number, wire, message.substr(start, i - start));
      continue;
    }
    if (wire == 1) size = 8;
    if (wire == 5) size = 4;
    if (wire == 2) size = varint(message, i);
    REQUIRE((wire == 1 || wire == 2 || wire == 5));
    REQUIRE(i + size <= message.size());
    field(number, wire, message.substr(i, size));
    i += size;
  }
}

template <typename T>
T fixed(const std::string& bytes) {
  REQUIRE(bytes.size() == sizeof(T));
  T v;
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

Decoded decode_events(const std::string& path) {
  const std::string data = read_text(path);
  Decoded d;
  std::size_t i = 0;
  while (i < data.size()) {
    REQUIRE(i + 12 <= data.size());
    const auto length = fixed<std::uint64_t>(data.substr(i, 8));
    CHECK(fixed<std::uint32_t>(data.substr(i + 8, 4)) == masked_crc32c(data.data() + i, 8));
    REQUIRE(i + 16 + length <= data.size());
    const std::string event = data.substr(i + 12, length);
    CHECK(fixed<std::uint32_t>(data.substr(i + 12 + length, 4)) ==
          masked_crc32c(event.data(), event.size()));
    i += 16 + length;
    std::int64_t step = 0;
    double wall_time = 0;
    each_field(event, [&](int number, int, const std::string& bytes) {
      if (number == 1) wall_time = fixed<double>(bytes);
      if (number == 2) {
        std::size_t at = 0;
        step = static_cast<std::int64_t>(varint(bytes, at));
      }
      if (number == 3) {
        d.version = bytes;
        ++d.version_records;
      }
      if (number == 5)
        each_field(bytes, [&](int value_field, int, const std::string& value) {
          REQUIRE(value_field == 1);
          Scalar s{step, "", 0};
          each_field(value, [&](int f, int, const std::string& b) {
            if (f == 1) s.tag = b;
            if (f == 2) s.value = fixed<float>(b);
          });
          d.scalars.push_back(s);
        });
    });
    CHECK(wall_time > 1.7e9);  // seconds since 1970, now
  }
  return d;
}

// The scalars of `d` without the throughput, which no two runs share.
std::vector<Scalar> without_timing(const Decoded& d) {
  std::vector<Scalar> kept;
  for (const auto& s : d.scalars)
    if (s.tag != "train/samples_per_s" && s.tag != "train/step_ms" &&
        s.tag != "train/data_wait_pct" && s.tag != "train/memory_reserved_mib")
      kept.push_back(s);
  return kept;
}

}  // namespace

TEST_CASE("CRC-32C and the TFRecord framing") {
  // Check values: "123456789" (the CRC catalogue) and 32 zero bytes (RFC 3720 B.4).
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  const std::string zeros(32, '\0');
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  const std::string record = trainer::train::tfrecord("abc");
  REQUIRE(record.size() == 8 + 4 + 3 + 4);
  CHECK(fixed<std::uint64_t>(record.substr(0, 8)) == 3);
  CHECK(fixed<std::uint32_t>(record.substr(12 + 3, 4)) == masked_crc32c("abc", 3));
  const std::uint32_t c = crc32c("abc", 3);
  CHECK(masked_crc32c("abc", 3) == ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST_CASE("a run's TensorBoard scalars are its metrics records; a resume continues them") {
  TempDir tmp("tfevents");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "full", "schedule.type=constant"},
                     tmp / "full.log") == 0);
  const Decoded full = decode_events(tmp / "full/events.out.tfevents.trainer");
  CHECK(full.version == "brain.Event:2");

  // Every number of every metrics.jsonl record, as <split>/<key> at its step.
  std::vector<Scalar> want;
  for (const auto& r : metrics_records(tmp / "full")) {
    for (const auto& [key, value] : r.items())
      if (key != "step" && key != "epoch" && value.is_number())
        want.push_back({r["step"].get<std::int64_t>(), r["split"].get<std::string>() + "/" + key,
                        value.get<float>()});
  }
  std::vector<Scalar> metrics_part;  // without the throughput (timing.jsonl here)
  for (const auto& s : full.scalars)
    if (s.tag.find("samples_per_s") == std::string::npos &&
        s.tag.find("step_ms") == std::string::npos &&
        s.tag.find("data_wait_pct") == std::string::npos &&
        s.tag.find("memory_reserved_mib") == std::string::npos)
      metrics_part.push_back(s);
  CHECK(metrics_part == want);
  CHECK(std::count_if(full.scalars.begin(), full.scalars.end(), [](const Scalar& s) {
          return s.tag == "train/samples_per_s" && s.value > 0;
        }) == 10);  // one per logged window, from timing.jsonl

  // Stopped at step 22 and resumed: the metrics records are the same, and so
  // are the events (the file is cut back to the checkpoint, then appended to).
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "part", "schedule.type=constant",
                      "train.max_steps=22"},
                     tmp / "part.log") == 0);
  REQUIRE(run_to_end({"run", "--resume", tmp / "part", "train.max_steps=0"}, tmp / "resume.log") ==
          0);
  REQUIRE(read_text(tmp / "full/metrics.jsonl") == read_text(tmp / "part/metrics.jsonl"));
  const Decoded resumed = decode_events(tmp / "part/events.out.tfevents.trainer");
  CHECK(without_timing(resumed) == without_timing(full));

  // Turned off: no events file.
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "off", "output.tensorboard=false",
                      "train.max_steps=5"},
                     tmp / "off.log") == 0);
  CHECK_FALSE(fs::exists(tmp / "off/events.out.tfevents.trainer"));
  CHECK(fs::exists(tmp / "off/metrics.jsonl"));
}

TEST_CASE("a resume that finds no checkpoint starts the events file over, as metrics.jsonl") {
  // What a run killed before its first checkpoint leaves: records and no
  // checkpoint. The resume trains from step 0; before, it cut metrics.jsonl
  // but appended to the events file, which then held those steps twice.
  TempDir tmp("tfevents-no-checkpoint");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::vector<std::string> run = {"run", tmp / "tiny.yaml", "schedule.type=constant",
                                        "checkpoint.every_steps=0", "train.max_steps=15"};
  std::vector<std::string> full = run, part = run;
  full.insert(full.end(), {"--out", tmp / "full"});
  part.insert(part.end(), {"--out", tmp / "part"});
  REQUIRE(run_to_end(full, tmp / "full.log") == 0);
  REQUIRE(run_to_end(part, tmp / "part.log") == 0);
  // Killed before its first checkpoint: no checkpoint, no summary.json, and
  // no line of train.log reporting a checkpoint (a run that wrote one and
  // lost its checkpoints folder is refused instead).
  fs::remove_all(tmp / "part/checkpoints");
  fs::remove(tmp / "part/summary.json");
  std::string log;
  for (const auto& line : read_lines(tmp / "part/train.log"))
    if (line.find("] checkpoint ") == std::string::npos) log += line + "\n";
  write_text(tmp / "part/train.log", log);
  REQUIRE(run_to_end({"run", "--resume", tmp / "part"}, tmp / "resume.log") == 0);
  INFO(read_text(tmp / "resume.log"));
  REQUIRE(read_text(tmp / "resume.log").find("starting from the beginning") != std::string::npos);

  REQUIRE(read_text(tmp / "full/metrics.jsonl") == read_text(tmp / "part/metrics.jsonl"));
  const Decoded want = decode_events(tmp / "full/events.out.tfevents.trainer");
  const Decoded got = decode_events(tmp / "part/events.out.tfevents.trainer");
  CHECK(got.version_records == 1);  // one file-version record, at the start
  CHECK(got.version == want.version);
  REQUIRE_FALSE(without_timing(want).empty());
  CHECK(without_timing(got) == without_timing(want));
}

TEST_CASE("a part of a run with TensorBoard off cuts the events file back to its checkpoint") {
  // On to step 22, then resumed from step 16 (as if killed after step 22,
  // its last checkpoints lost) with TensorBoard off, then on again: the
  // steps 17-22 of the first part must not stay in the file, where the third
  // part's scalars would follow them.
  TempDir tmp("tfevents-toggle");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "run", "schedule.type=constant",
                      "train.max_steps=22"},
                     tmp / "1.log") == 0);
  fs::remove_all(tmp / "run/checkpoints/step-00000022");
  fs::remove_all(tmp / "run/checkpoints/step-00000021");
  REQUIRE(
      run_to_end({"run", "--resume", tmp / "run", "output.tensorboard=false", "train.max_steps=30"},
                 tmp / "2.log") == 0);
  REQUIRE(read_text(tmp / "2.log").find("resuming from") != std::string::npos);
  REQUIRE(
      run_to_end({"run", "--resume", tmp / "run", "output.tensorboard=true", "train.max_steps=40"},
                 tmp / "3.log") == 0);
  const Decoded events = decode_events(tmp / "run/events.out.tfevents.trainer");
  CHECK(events.version_records == 1);
  std::map<std::string, std::int64_t> last_step;  // each tag's steps only go up
  std::set<std::int64_t> steps;
  for (const Scalar& s : events.scalars) {
    INFO(s.tag << " at step " << s.step);
    if (last_step.count(s.tag)) CHECK(s.step > last_step[s.tag]);
    last_step[s.tag] = s.step;
    steps.insert(s.step);
  }
  // The first part's up to its checkpoint at 16, none of the second's, the third's.
  CHECK(steps.count(15));
  CHECK_FALSE(steps.count(20));
  CHECK(steps.count(35));
}
