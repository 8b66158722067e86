// labels: cpu
// Safetensors reading and writing, and the errors for bad checkpoint files:
// each names the file and the byte offset, and no corruption crashes the
// reader. model.init_from loads matching weights strictly by default and lists
// every mismatch.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/safetensors.h"
#include "runner/checkpoint/train_state.h"
#include "test_resume_fixtures.h"

using namespace trainer::checkpoint;
using namespace trainer::testing;
namespace fs = std::filesystem;

namespace {

Safetensors sample_file() {
  Safetensors f;
  f.metadata["format"] = "pt";
  StoredTensor a{"fc1.weight", "F32", {2, 3}, std::string(24, '\0')};
  for (int i = 0; i < 6; ++i) {
    const float v = 0.5f * static_cast<float>(i) - 1.0f;
    std::memcpy(a.bytes.data() + 4 * i, &v, 4);
  }
  StoredTensor b{"fc1.bias", "F32", {2}, std::string(8, '\x01')};
  f.tensors = {b, a};  // sorted by name, as the header orders them
  return f;
}

std::string error_of(const std::string& bytes) {
  try {
    decode_safetensors(bytes, "ckpt/model.safetensors");
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors round trip keeps names, shapes, bytes and metadata") {
  const std::string bytes = encode_safetensors(sample_file());
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);  // little-endian length
  CHECK((8 + header) % 8 == 0);
  const auto header_json = nlohmann::json::parse(bytes.substr(8, header));
  CHECK(header_json["fc1.weight"]["data_offsets"] == nlohmann::json::array({8, 32}));
  CHECK(header_json["fc1.weight"]["shape"] == nlohmann::json::array({2, 3}));
  CHECK(header_json["__metadata__"]["format"] == "pt");

  const Safetensors back = decode_safetensors(bytes, "x");
  REQUIRE(back.tensors.size() == 2);
  const StoredTensor* w = back.find("fc1.weight");
  REQUIRE(w);
  CHECK(w->shape == std::vector<std::int64_t>{2, 3});
  CHECK(w->bytes == sample_file().tensors[1].bytes);
  CHECK(back.metadata.at("format") == "pt");
}

TEST_CASE("malformed safetensors files are errors naming the file and the offset") {
  const std::string good = encode_safetensors(sample_file());
  std::uint64_t header = 0;
  std::memcpy(&header, good.data(), 8);

  CHECK(error_of(good.substr(0, 5)).find("ckpt/model.safetensors: offset 0: file is 5 bytes") == 0);
  std::string huge = good;
  huge[7] = '\x7f';
  CHECK(error_of(huge).find("offset 0: header length") != std::string::npos);
  std::string bad_json = good;
  bad_json[8] = 'x';
  CHECK(error_of(bad_json).find("ckpt/model.safetensors: offset ") == 0);
  CHECK(error_of(bad_json).find("not valid JSON") != std::string::npos);
  const std::string truncated = good.substr(0, good.size() - 4);
  const std::string message = error_of(truncated);
  CHECK(message.find("tensor 'fc1.weight'") != std::string::npos);
  CHECK(message.find("truncated") != std::string::npos);
  CHECK(message.find("offset " + std::to_string(8 + header + 8)) != std::string::npos);
}

TEST_CASE("no corruption of a checkpoint crashes the reader") {
  const std::string good = encode_safetensors(sample_file());
  std::mt19937 rng(7);
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    if (rng() % 3 == 0) bytes.resize(rng() % bytes.size());
    try {
      decode_safetensors(bytes, "fuzz");
    } catch (const CheckpointError& e) {
      CHECK(std::string(e.what()).find("fuzz: offset ") == 0);
      ++rejected;
    }
  }
  CHECK(rejected > 500);
}

TEST_CASE("model.init_from loads matching weights and lists every mismatch") {
  TempDir tmp("init-from");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "train.max_steps=3", "--out", tmp / "base"},
                     tmp / "b.log") == 0);
  const std::string weights = tmp / "base/checkpoints/last/model.safetensors";
  const auto file = read_safetensors(weights);
  CHECK(file.find("fc1.weight") != nullptr);
  CHECK(file.find("fc2.bias") != nullptr);

  // Same model: loads, and training starts from those weights.
  write_text(tmp / "same.yaml", "extends: tiny.yaml\nmodel: {init_from: " + weights + "}\n");
  REQUIRE(run_to_end({"run", tmp / "same.yaml", "train.max_steps=3", "--out", tmp / "same"},
                     tmp / "s.log") == 0);
  CHECK(read_text(tmp / "s.log").find("loaded 4 tensor(s)") != std::string::npos);

  // A relative path, from the YAML file's folder: the run's config.yaml names
  // the file absolute, so it runs again as it is, and the run resumes.
  fs::create_directories(tmp / "rel");
  write_text(
      tmp / "rel/ft.yaml",
      "extends: ../tiny.yaml\nmodel: {init_from: ../base/checkpoints/last/model.safetensors}\n");
  REQUIRE(run_to_end({"run", tmp / "rel/ft.yaml", "train.max_steps=3", "--out", tmp / "rel_run"},
                     tmp / "r.log") == 0);
  CHECK(read_text(tmp / "rel_run/config.yaml").find("init_from: " + weights + "\n") !=
        std::string::npos);
  CHECK(run_to_end({"run", tmp / "rel_run/config.yaml", "--out", tmp / "rerun"}, tmp / "rr.log") ==
        0);
  CHECK(run_to_end({"run", "--resume", tmp / "rel_run", "train.max_steps=5"}, tmp / "res.log") ==
        0);

  // fc1 with 16 outputs: strict fails naming the file and each mismatch.
  std::string narrow = tiny_experiment();
  narrow.replace(narrow.find("out_features: 32"), 16, "out_features: 16");
  write_text(tmp / "narrow.yaml", narrow);
  write_text(tmp / "ft.yaml", "extends: narrow.yaml\nmodel: {init_from: " + weights + "}\n");
  CHECK(run_to_end({"run", tmp / "ft.yaml", "train.max_steps=3", "--out", tmp / "ft"},
                   tmp / "f.log") == 2);
  const std::string log = read_text(tmp / "f.log");
  INFO(log);
  // The error names where init_from is set, then the file and what does not match.
  CHECK(log.find("ft.yaml:2:20: error: model.init_from: " + weights +
                 ": 3 tensor(s) do not match") != std::string::npos);
  CHECK(log.find("fc1.weight: shape [32, 64] in the file, [16, 64] in the model") !=
        std::string::npos);
  CHECK(log.find("fc2.weight: shape [4, 32] in the file, [4, 16] in the model") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "ft"));  // refused before the run directory was made
  // validate finds the same, as does it a damaged file.
  CHECK(run_to_end({"validate", tmp / "ft.yaml"}, tmp / "v.log") == 2);
  CHECK(read_text(tmp / "v.log")
            .find("ft.yaml:2:20: error: model.init_from: " + weights +
                  ": 3 tensor(s) do not match") != std::string::npos);
  fs::copy_file(weights, tmp / "damaged.safetensors");
  fs::resize_file(tmp / "damaged.safetensors", 100);
  CHECK(
      run_to_end({"validate", tmp / "tiny.yaml", "model.init_from=" + tmp / "damaged.safetensors"},
                 tmp / "d.log") == 2);
  CHECK(read_text(tmp / "d.log")
            .find("error: model.init_from: " + tmp / "damaged.safetensors" + ": offset ") !=
        std::string::npos);
  // Opt-in non-strict: loads what matches (fc2.bias) and lists the rest.
  CHECK(run_to_end({"run", tmp / "ft.yaml", "train.max_steps=3", "model.init_strict=false", "--out",
                    tmp / "ns"},
                   tmp / "n.log") == 0);
  CHECK(read_text(tmp / "n.log").find("loaded 1 tensor(s)") != std::string::npos);

  // A file that is not there is found by validate, at its key, before any data is read.
  write_text(tmp / "missing.yaml",
             "extends: tiny.yaml\nmodel: {init_from: w/missing.safetensors}\n");
  CHECK(run_to_end({"validate", tmp / "missing.yaml"}, tmp / "m.log") == 2);
  CHECK(read_text(tmp / "m.log") ==
        tmp / "missing.yaml" + ":2:20: error: model.init_from: cannot read '" + tmp / "w" +
            "/missing.safetensors': no such file\n"
            "    a relative path is taken from the folder of the YAML file that names it\n"
            "1 error\n");
}

TEST_CASE("safetensors data must be covered exactly once, each name given once") {
  const std::string good = encode_safetensors(sample_file());
  std::uint64_t header = 0;
  std::memcpy(&header, good.data(), 8);
  const std::string data_start = std::to_string(8 + header);
  // Bytes after the last tensor's data.
  const std::string extra = error_of(good + std::string(8, '\0'));
  CHECK(extra.find("ckpt/model.safetensors: offset " + std::to_string(good.size()) +
                   ": 8 bytes after the last tensor's data") == 0);
  // A header of the same length whose offsets overlap, leave a gap, or name a tensor twice.
  const auto with_header = [&](std::string text) {
    text.resize(header, ' ');
    return good.substr(0, 8) + text + good.substr(8 + header);
  };
  const std::string overlap =
      with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[6],"data_offsets":[4,28]}})");
  CHECK(error_of(overlap).find("tensor 'b': its data overlaps tensor 'a's") != std::string::npos);
  const std::string gap = with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                      R"("b":{"dtype":"F32","shape":[6],"data_offsets":[8,32]}})");
  CHECK(error_of(gap).find("4 bytes of data belong to no tensor (before 'b')") !=
        std::string::npos);
  const std::string twice =
      with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("a":{"dtype":"F32","shape":[6],"data_offsets":[8,32]}})");
  CHECK(error_of(twice).find("offset 8: header names 'a' twice") != std::string::npos);
  // The well-formed file still reads.
  CHECK(error_of(good).empty());
}

TEST_CASE("a state with counts that cannot be is refused, naming the field") {
  TrainState state;
  state.step = 101;
  state.epoch = 0;
  state.epoch_step = 101;
  state.steps_per_epoch = 128;
  state.accumulation = 1;
  const nlohmann::json good = state.to_json();
  CHECK(TrainState::from_json(good, "s").step == 101);
  const auto error_of_state = [&](const char* key, std::int64_t value) {
    nlohmann::json j = good;
    j[key] = value;
    try {
      TrainState::from_json(j, "ckpt/state.safetensors");
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error_of_state("step", -3) == "ckpt/state.safetensors: state 'step' is -3, below 0");
  CHECK(error_of_state("steps_per_epoch", 0).find("'steps_per_epoch' is 0, below 1") !=
        std::string::npos);
  CHECK(error_of_state("epoch_step", 500) ==
        "ckpt/state.safetensors: state 'epoch_step' 500 is past its epoch of 128 steps");
}

TEST_CASE("tensor sizes and data offsets too large to count are errors, not wrapped numbers") {
  // A header of the given tensor entry, followed by `data` bytes of data.
  const auto file_with = [](const std::string& entry, std::size_t data) {
    std::string header = "{\"t\":" + entry + "}";
    while ((8 + header.size()) % 8 != 0) header.push_back(' ');
    std::string bytes(8, '\0');
    const std::uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    return bytes + header + std::string(data, '\0');
  };
  // 2^40 x 2^24 elements: the product 2^64 once wrapped to 0, and 0 bytes fitted.
  const std::string wraps = error_of(
      file_with(R"({"dtype":"F32","shape":[1099511627776,16777216],"data_offsets":[0,0]})", 0));
  CHECK(wraps.find("ckpt/model.safetensors: offset 8: tensor 't': shape "
                   "[1099511627776,16777216] holds more than 1099511627776 elements") == 0);
  const std::string five = error_of(
      file_with(R"({"dtype":"F32","shape":[1099511627776,16777216,1099511627776,16777216,4],)"
                R"("data_offsets":[0,0]})",
                0));
  CHECK(five.find("tensor 't': shape") != std::string::npos);
  CHECK(five.find("needs 0") == std::string::npos);
  // Offsets near 2^64: said as they are, at the header, with the data's real size.
  const std::string far_file = file_with(
      R"({"dtype":"U8","shape":[15],"data_offsets":[18446744073709551600,18446744073709551615]})",
      16);
  CHECK(error_of(far_file) ==
        "ckpt/model.safetensors: offset 8: tensor 't': data_offsets "
        "[18446744073709551600, 18446744073709551615] lie past the data section's 16 bytes (the "
        "file has " +
            std::to_string(far_file.size()) + "): damaged, or not a safetensors file");
  // A plausible size still reads.
  CHECK(error_of(file_with(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})", 16)).empty());
}
