// labels: cpu
// Safetensors reading and writing, and the errors for bad checkpoint files:
// each names the file and the byte offset, and no corruption crashes the
// reader. model.init_from loads matching weights strictly by default and lists
// every mismatch; a link in its path is resolved once, so the check, the load
// and the manifest's record read the same file.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/layer_renames.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/checkpoint/train_state.h"
#include "runner/checkpoint/weights.h"
#include "runner/config/load.h"
#include "runner/train/session.h"
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
  // The parser's reason follows, without the bytes it read (not UTF-8 here).
  std::string not_utf8 = good;
  not_utf8[10] = '\xFF';  // inside the first name
  const std::string reason = error_of(not_utf8);
  CHECK(reason.find("offset 10: header is not valid JSON (syntax error while parsing object key - "
                    "invalid string: ill-formed UTF-8 byte; expected string literal)") !=
        std::string::npos);
  CHECK(reason.find('\xFF') == std::string::npos);
  // A number beyond a double's range is JSON no reader here can hold.
  const std::string overflow_header =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,1e999]}})";
  std::string overflow(8, '\0');
  overflow[0] = static_cast<char>(overflow_header.size());
  overflow += overflow_header + std::string(4, '\0');
  CHECK(error_of(overflow) ==
        "ckpt/model.safetensors: offset 8: header holds what no JSON reader here can: number "
        "overflow parsing '1e999'");
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

TEST_CASE("PyTorch's batchnorm step counter in a weights file is no mismatch") {
  Safetensors file;
  for (const char* name : {"bn.running_mean", "bn.num_batches_tracked", "fc.num_batches_tracked"})
    file.tensors.push_back({name, std::string(name).ends_with("tracked") ? "I64" : "F32", {4}});
  // Beside a batchnorm's running mean it is passed over; elsewhere it is extra.
  const auto mismatches = mismatches_of(file, {{"bn.running_mean", {4}}}, "");
  REQUIRE(mismatches.size() == 1);
  CHECK(mismatches[0] == "fc.num_batches_tracked: in the file, not in the model");
}

TEST_CASE("model.init_from of this model's weights laid out or named otherwise says how") {
  TempDir tmp("init-from-layout");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "train.max_steps=1", "--out", tmp / "base"},
                     tmp / "b.log") == 0);
  const Safetensors weights = read_safetensors(tmp / "base/checkpoints/last/model.safetensors");
  // Each way of writing it, and the advice it gets.
  const auto advice_for = [&](const std::string& name, const Safetensors& file) {
    write_text(tmp / name, encode_safetensors(file));
    const auto config =
        trainer::config::load_config(tmp / "tiny.yaml", {"model.init_from=" + tmp / name});
    const trainer::train::Session session = trainer::train::prepare_session(config);
    trainer::config::Diagnostics diags;
    trainer::train::check_init_from(session, diags);
    REQUIRE(diags.list().size() == 1);
    return diags.list()[0].suggestion;
  };
  Safetensors transposed = weights;
  for (auto& t : transposed.tensors)
    if (t.shape.size() == 2) std::swap(t.shape[0], t.shape[1]);  // the bytes do not matter here
  CHECK_THAT(advice_for("t.safetensors", transposed),
             Catch::StartsWith("2 weight(s) are stored transposed, [in, out]"));
  Safetensors wrapped = weights;
  for (auto& t : wrapped.tensors) t.name = "module." + t.name;
  CHECK_THAT(advice_for("m.safetensors", wrapped),
             Catch::StartsWith("every name in the file starts with 'module.'"));
  const Safetensors state = read_safetensors(tmp / "base/checkpoints/last/state.safetensors");
  CHECK_THAT(advice_for("s.safetensors", state),
             Catch::StartsWith("this is a checkpoint's state file"));
  // An nn.Sequential's export: layers numbered by their place ("1" the
  // first linear after the flatten, "4" the second).
  Safetensors sequential = weights;
  for (auto& t : sequential.tensors)
    t.name = (t.name.starts_with("fc1.") ? "1." : "4.") + t.name.substr(4);
  CHECK(advice_for("q.safetensors", sequential) ==
        "the file holds this model's weights under other layer names (matched by their "
        "tensors' shapes, in order): rename them when writing the file, e.g. names = {'1': "
        "'fc1', '4': 'fc2'}; {names.get(k.rpartition('.')[0], k.rpartition('.')[0]) + '.' + "
        "k.rpartition('.')[2]: v for k, v in weights.items()}");
}

TEST_CASE("a model's layers are matched to a file's layers of other names by their tensors") {
  const auto file_of = [](const std::vector<std::pair<std::string, trainer::Shape>>& tensors) {
    Safetensors file;
    for (const auto& [name, shape] : tensors) file.tensors.push_back({name, "F32", shape});
    return file;
  };
  const std::vector<TensorShape> model = {
      {"a.weight", {4, 4}},     {"a.bias", {4}},         {"b.weight", {4, 4}},
      {"b.bias", {4}},          {"bn.weight", {4}},      {"bn.bias", {4}},
      {"bn.running_mean", {4}}, {"bn.running_var", {4}}, {"c.weight", {2, 4}}};
  // Two layers of the same shapes take the file's in natural order: "2"
  // before "10", whatever the file's (sorted) order.
  const Safetensors numbered = file_of({{"10.bias", {4}},
                                        {"10.weight", {4, 4}},
                                        {"11.bias", {4}},
                                        {"11.num_batches_tracked", {}},
                                        {"11.running_mean", {4}},
                                        {"11.running_var", {4}},
                                        {"11.weight", {4}},
                                        {"2.bias", {4}},
                                        {"2.weight", {4, 4}},
                                        {"20.weight", {2, 4}}});
  auto found = layer_renames(model, numbered);
  REQUIRE(found.renames.size() == 4);
  CHECK(found.renames[0].file_layer == "2");
  CHECK(found.renames[0].model_layer == "a");
  CHECK(found.renames[1].file_layer == "10");
  CHECK(found.renames[2].file_layer == "11");
  CHECK(found.renames[2].model_layer == "bn");
  CHECK(found.renames[3].file_layer == "20");
  // a and b share their shapes, but the file's names differ only in their
  // numbers (an nn.Sequential's indices, in the order the layers run).
  CHECK(found.paired_by_name_order.empty());
  CHECK(found.other_file_layers.empty());
  CHECK(layer_rename_advice(found) ==
        "the file holds this model's weights under other layer names (matched by their "
        "tensors' shapes, in order): rename them when writing the file, e.g. names = {'2': 'a', "
        "'10': 'b', '11': 'bn', '20': 'c'}; {names.get(k.rpartition('.')[0], "
        "k.rpartition('.')[0]) + '.' + k.rpartition('.')[2]: v for k, v in weights.items()}");
  // Names of words: which of two same-shaped layers is which is a guess.
  const Safetensors worded = file_of({{"up.weight", {4, 4}},
                                      {"up.bias", {4}},
                                      {"down.weight", {4, 4}},
                                      {"down.bias", {4}},
                                      {"norm.weight", {4}},
                                      {"norm.bias", {4}},
                                      {"norm.running_mean", {4}},
                                      {"norm.running_var", {4}},
                                      {"head.weight", {2, 4}}});
  found = layer_renames(model, worded);
  REQUIRE(found.renames.size() == 4);
  CHECK(found.renames[0].file_layer == "down");  // first in the file's order, not the model's
  CHECK(found.paired_by_name_order == std::vector<std::string>{"a"});
  CHECK_THAT(layer_rename_advice(found),
             Catch::EndsWith("; a has tensors of the same shapes as other layers, paired in the "
                             "order of the file's names, which need not be the order they run "
                             "in: check those pairs"));
  // The same last part of the name pairs layers of the same shapes
  // (torchvision's "layer2.0.bn1" for "stage2.bn1"), whatever the order.
  const std::vector<TensorShape> block = {
      {"stage.proj_bn.weight", {4}}, {"stage.bn1.weight", {4}}, {"stage.bn2.weight", {4}}};
  const Safetensors torchvision = file_of({{"layer2.0.bn1.weight", {4}},
                                           {"layer2.0.bn2.weight", {4}},
                                           {"layer2.0.downsample.1.weight", {4}}});
  found = layer_renames(block, torchvision);
  REQUIRE(found.renames.size() == 3);
  CHECK(found.renames[0].file_layer == "layer2.0.downsample.1");
  CHECK(found.renames[1].file_layer == "layer2.0.bn1");
  CHECK(found.renames[2].file_layer == "layer2.0.bn2");
  CHECK(found.paired_by_name_order.empty());
  // A layer under its own name keeps it, though another of its shapes comes
  // first; a layer of the file no layer of the model takes is named.
  const Safetensors own = file_of({{"0.bias", {4}},
                                   {"0.weight", {4, 4}},
                                   {"b.bias", {4}},
                                   {"b.weight", {4, 4}},
                                   {"bn.bias", {4}},
                                   {"bn.running_mean", {4}},
                                   {"bn.running_var", {4}},
                                   {"bn.weight", {4}},
                                   {"c.weight", {2, 4}},
                                   {"head.weight", {7, 4}}});
  found = layer_renames(model, own);
  REQUIRE(found.renames.size() == 1);
  CHECK(found.renames[0].file_layer == "0");
  CHECK(found.renames[0].model_layer == "a");
  CHECK(found.paired_by_name_order.empty());
  CHECK(found.other_file_layers == std::vector<std::string>{"head"});
  CHECK_THAT(layer_rename_advice(found),
             Catch::EndsWith("; the file's head is no layer of this model: load the rest with "
                             "model.init_strict: false"));
  // A layer of the model with no layer of its shapes in the file, or a file
  // of the model's own names: nothing to rename.
  const Safetensors other = file_of({{"0.weight", {4, 4}}, {"0.bias", {4}}});
  CHECK(layer_renames(model, other).renames.empty());
  Safetensors same;
  for (const auto& t : model) same.tensors.push_back({t.name, "F32", t.shape});
  CHECK(layer_renames(model, same).renames.empty());
  // Many layers: every pair, so that the Python runs as it is.
  LayerRenames many;
  for (int i = 0; i < 30; ++i) many.renames.push_back({std::to_string(i), "l" + std::to_string(i)});
  CHECK_THAT(layer_rename_advice(many), Catch::Contains("'28': 'l28', '29': 'l29'}; {names.get"));
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
  // The manifest tells which file that was: `last` resolved, and its hash.
  const auto started_from =
      nlohmann::json::parse(read_text(tmp / "same/manifest.json"))["init_from"];
  CHECK(started_from["path"] == weights);
  CHECK(started_from["resolved"] ==
        fs::canonical(tmp / "base/checkpoints/step-00000003/model.safetensors").string());
  FILE* pipe = popen(("sha256sum " + weights).c_str(), "r");
  REQUIRE(pipe);
  char digest[65] = {};
  REQUIRE(std::fread(digest, 1, 64, pipe) == 64);
  pclose(pipe);
  CHECK(started_from["sha256"] == std::string(digest));

  // `last` resolved once, when the session opens: the check (and the load,
  // and the record) read that file though `last` moves on to another model's.
  {
    write_text(tmp / "wide.yaml",
               "extends: tiny.yaml\nmodel: {layers: [{type: flatten}, {type: "
               "linear, out_features: 40}, {type: relu}, {type: linear, "
               "out_features: 4}]}\n");
    REQUIRE(run_to_end({"run", tmp / "wide.yaml", "train.max_steps=1", "--out", tmp / "wide"},
                       tmp / "w.log") == 0);
    fs::create_directory_symlink(tmp / "base/checkpoints/step-00000003", tmp / "moving");
    const auto config = trainer::config::load_config(
        tmp / "tiny.yaml", {"model.init_from=" + tmp / "moving/model.safetensors"});
    const trainer::train::Session session = trainer::train::prepare_session(config);
    CHECK(session.init_from_file ==
          fs::canonical(tmp / "base/checkpoints/step-00000003/model.safetensors").string());
    fs::remove(tmp / "moving");
    fs::create_directory_symlink(tmp / "wide/checkpoints/step-00000001", tmp / "moving");
    trainer::config::Diagnostics diags;
    trainer::train::check_init_from(session, diags);
    CHECK(diags.list().empty());
  }

  // A relative path, from the YAML file's folder: the run's config.yaml names
  // the file `last` led to, absolute, so it runs again from the same weights
  // when `last` has moved on, and the run resumes.
  fs::create_directories(tmp / "rel");
  write_text(
      tmp / "rel/ft.yaml",
      "extends: ../tiny.yaml\nmodel: {init_from: ../base/checkpoints/last/model.safetensors}\n");
  REQUIRE(run_to_end({"run", tmp / "rel/ft.yaml", "train.max_steps=3", "--out", tmp / "rel_run"},
                     tmp / "r.log") == 0);
  const std::string step3 =
      fs::canonical(tmp / "base/checkpoints/step-00000003/model.safetensors").string();
  CHECK(read_text(tmp / "rel_run/config.yaml").find("init_from: " + step3 + "\n") !=
        std::string::npos);
  CHECK(nlohmann::json::parse(read_text(tmp / "rel_run/manifest.json"))["init_from"]["path"]
            .get<std::string>()
            .ends_with("base/checkpoints/last/model.safetensors"));  // as written
  REQUIRE(run_to_end({"run", "--resume", tmp / "base", "train.max_steps=5"}, tmp / "b5.log") == 0);
  CHECK(run_to_end({"run", tmp / "rel_run/config.yaml", "--out", tmp / "rerun"}, tmp / "rr.log") ==
        0);
  CHECK(nlohmann::json::parse(read_text(tmp / "rerun/manifest.json"))["init_from"]["resolved"] ==
        step3);
  CHECK(run_to_end({"run", "--resume", tmp / "rel_run", "train.max_steps=5"}, tmp / "res.log") ==
        0);
  // Resumed from a checkpoint, it needs the init_from file no more.
  fs::rename(tmp / "base", tmp / "base_moved");
  CHECK(run_to_end({"run", "--resume", tmp / "rel_run", "train.max_steps=7"}, tmp / "gone.log") ==
        0);
  INFO(read_text(tmp / "gone.log"));
  CHECK(read_text(tmp / "gone.log").find("resuming from ") != std::string::npos);
  CHECK(read_text(tmp / "gone.log").find("loaded 4 tensor(s)") == std::string::npos);
  fs::rename(tmp / "base_moved", tmp / "base");

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
  // YAML's other spellings of false mean false too.
  write_text(tmp / "ft_false.yaml",
             "extends: narrow.yaml\nmodel: {init_from: " + weights + ", init_strict: False}\n");
  CHECK(run_to_end({"validate", tmp / "ft_false.yaml"}, tmp / "F.log") == 0);
  // Non-strict, but nothing fits (other names): an error, not a run from scratch.
  CHECK(run_to_end({"validate", tmp / "ft.yaml", "model.init_strict=false",
                    "model.layers[1].name=a", "model.layers[4].name=b"},
                   tmp / "none.log") == 2);
  CHECK(
      read_text(tmp / "none.log")
          .find("none of the model's 4 tensors is in the file with its name, shape and type, so it "
                "would load nothing") != std::string::npos);
  // The model's names and shapes in another type: said so, with the conversion.
  auto half = read_safetensors(weights);
  for (auto& t : half.tensors) {
    t.dtype = "F16";
    t.bytes.resize(t.bytes.size() / 2);
  }
  write_text(tmp / "half.safetensors", encode_safetensors(half));
  CHECK(run_to_end({"validate", tmp / "tiny.yaml", "model.init_strict=false",
                    "model.init_from=" + (tmp / "half.safetensors")},
                   tmp / "half.log") == 2);
  CHECK(read_text(tmp / "half.log")
            .find("(4 of the model's 4 tensors are there with their names and shapes but "
                  "stored as F16: this reader loads F32 tensors;") != std::string::npos);
  // Strict, the advice is the conversion, not init_strict: false (which would load nothing).
  CHECK(run_to_end({"validate", tmp / "tiny.yaml", "model.init_from=" + (tmp / "half.safetensors")},
                   tmp / "half_strict.log") == 2);
  CHECK(read_text(tmp / "half_strict.log")
            .find("    convert the file to F32 (4 of the model's 4 tensors") != std::string::npos);
  // A frozen layer the file does not hold would keep its random initial weights.
  CHECK(run_to_end({"validate", tmp / "ft.yaml", "model.init_strict=false", "model.freeze=[fc1]"},
                   tmp / "frozen.log") == 2);
  CHECK(read_text(tmp / "frozen.log")
            .find(": fc1.weight, fc1.bias, which model.freeze keeps from training, are not in "
                  "it with the model's shapes") != std::string::npos);

  // A file that is not there is found by validate, at its key, before any data is read.
  write_text(tmp / "missing.yaml",
             "extends: tiny.yaml\nmodel: {init_from: w/missing.safetensors}\n");
  CHECK(run_to_end({"validate", tmp / "missing.yaml"}, tmp / "m.log") == 2);
  CHECK(read_text(tmp / "m.log") ==
        tmp / "missing.yaml" + ":2:20: error: model.init_from: cannot read '" + tmp / "w" +
            "/missing.safetensors': no such file\n"
            "    a relative path is taken from the folder of the YAML file that names it\n"
            "1 error\n");
  // A run's folder, or a checkpoint's, for its weights file.
  for (const std::string folder : {"base", "base/checkpoints/last"}) {
    INFO(folder);
    CHECK(run_to_end({"validate", tmp / "tiny.yaml", "model.init_from=" + tmp / folder},
                     tmp / "d.log") == 2);
    CHECK_THAT(read_text(tmp / "d.log"),
               Catch::Contains("error: model.init_from: '" + tmp / folder +
                               "' is a folder; init_from takes a .safetensors file") &&
                   Catch::Contains("did you mean '" + tmp / folder +
                                   (folder == "base" ? "/checkpoints/last" : "") +
                                   "/model.safetensors'?"));
  }
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
  // Nesting deeper than a header's (a million brackets would cost some 80
  // MB to parse), at the offset of the bracket too deep; brackets inside a
  // name (quotes escaped in it too) do not count.
  const std::string deep = with_header(R"({"a":{"dtype":"F32","shape":[[2]],)");
  CHECK(error_of(deep).find("ckpt/model.safetensors: offset " + std::to_string(8 + 29) +
                            ": the header nests deeper than a safetensors header does") == 0);
  const std::string bracketed_name =
      with_header(R"({"a[[[{\"{":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[6],"data_offsets":[8,32]}})");
  CHECK(error_of(bracketed_name).empty());
  // The well-formed file still reads.
  CHECK(error_of(good).empty());
}

namespace {

// A state of step 101 (epoch 0, 101 of its 128 steps) of a run of 1000 steps.
TrainState state_at_step_101() {
  TrainState state;
  state.step = 101;
  state.epoch = 0;
  state.epoch_step = 101;
  state.steps_per_epoch = 128;
  state.accumulation = 1;
  state.total_steps = 1000;
  state.window_steps = 1;
  state.window_samples = 32;
  state.window_rows = 32;
  state.window_top1 = 20;
  return state;
}

// The error from_json gives for `j` as read from a checkpoint ("" when none).
std::string state_error(const nlohmann::json& j) {
  try {
    TrainState::from_json(j, "ckpt/state.safetensors");
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

// `j` with the field at JSON pointer `where` ("/window/steps") set to `value`.
nlohmann::json with_field(nlohmann::json j, const std::string& where, const nlohmann::json& value) {
  j[nlohmann::json::json_pointer(where)] = value;
  return j;
}

}  // namespace

TEST_CASE("a state with counts that cannot be is refused, naming the field") {
  const nlohmann::json good = state_at_step_101().to_json();
  CHECK(TrainState::from_json(good, "s").step == 101);
  const auto error_of_state = [&](const char* key, std::int64_t value) {
    return state_error(with_field(good, std::string("/") + key, value));
  };
  CHECK(error_of_state("step", -3) == "ckpt/state.safetensors: state 'step' is -3, below 0");
  CHECK(error_of_state("steps_per_epoch", 0).find("'steps_per_epoch' is 0, below 1") !=
        std::string::npos);
  CHECK(error_of_state("epoch_step", 500) ==
        "ckpt/state.safetensors: state 'epoch_step' 500 is past its epoch of 128 steps");
  // The global batch: kept, absent in checkpoints of earlier versions (0:
  // not compared on resume), never below 1 when given.
  TrainState batched = state_at_step_101();
  batched.batch_size = 32;
  CHECK(TrainState::from_json(batched.to_json(), "s").batch_size == 32);
  CHECK_FALSE(good.contains("batch_size"));
  CHECK(TrainState::from_json(good, "s").batch_size == 0);
  CHECK(error_of_state("batch_size", 0).find("'batch_size' is 0, below 1") != std::string::npos);
  // The base rate as applied, likewise (0: not compared on resume).
  batched.base_lr = 0.4;
  CHECK(TrainState::from_json(batched.to_json(), "s").base_lr == 0.4);
  CHECK(TrainState::from_json(good, "s").base_lr == 0);
  CHECK(error_of_state("base_lr", -1).find("'base_lr' is -1, expected a rate > 0") !=
        std::string::npos);
  // The training and evaluation data's content digests, likewise ("": not
  // compared on resume).
  batched.train_digest = "0123456789abcdef";
  batched.eval_digest = "fedcba9876543210";
  const TrainState read = TrainState::from_json(batched.to_json(), "s");
  CHECK(read.train_digest == "0123456789abcdef");
  CHECK(read.eval_digest == "fedcba9876543210");
  CHECK(TrainState::from_json(good, "s").train_digest.empty());
  CHECK(TrainState::from_json(good, "s").eval_digest.empty());
  for (const std::string field : {"train_digest", "eval_digest"}) {
    CHECK(state_error(with_field(good, "/" + field, "0123456789ABCDEF"))
              .find("'" + field + "' is \"0123456789ABCDEF\", expected 16 lowercase hex digits") !=
          std::string::npos);
    CHECK(state_error(with_field(good, "/" + field, "0123")).find("'" + field + "' is \"0123\"") !=
          std::string::npos);
    CHECK(state_error(with_field(good, "/" + field, 7)).find("'" + field + "'") !=
          std::string::npos);
  }
}

TEST_CASE("a state whose numbers contradict each other, or the run's arithmetic, is refused") {
  const nlohmann::json good = state_at_step_101().to_json();
  REQUIRE(state_error(good).empty());
  const auto error_with = [&](const std::string& where, const nlohmann::json& value) {
    const std::string error = state_error(with_field(good, where, value));
    INFO(where << " = " << value.dump() << ": " << error);
    // Every error names the file and the field, and none is the JSON library's.
    CHECK(error.rfind("ckpt/state.safetensors: state '", 0) == 0);
    CHECK(error.find("json.exception") == std::string::npos);
    return error;
  };
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  // The step is epoch x steps_per_epoch + epoch_step, and no more than the run's steps.
  CHECK(error_with("/step", max).find("'step' is 9223372036854775807, above 'total_steps'") !=
        std::string::npos);
  CHECK(error_with("/step", 100).find("'step' is 100, but epoch 0 x 128 steps per epoch + 101") !=
        std::string::npos);
  CHECK(error_with("/epoch", std::int64_t{1} << 62).find("'step' is 101, but epoch") !=
        std::string::npos);
  CHECK(error_with("/total_steps", -5).find("above 'total_steps' (-5)") != std::string::npos);
  // The logging window's counts.
  CHECK(error_with("/window/steps", -3).find("'window.steps' is -3, below 0") != std::string::npos);
  CHECK(error_with("/window/steps", 102).find("'window.steps' is 102, above 'step'") !=
        std::string::npos);
  CHECK(error_with("/window/rows", max)
            .find("'window.rows' is 9223372036854775807, above "
                  "'window.samples' (32)") != std::string::npos);
  CHECK(error_with("/window/top1", 33).find("'window.top1' is 33, above 'window.rows'") !=
        std::string::npos);
  // Types, and numbers past int64: named, not the library's words.
  CHECK(error_with("/step", "101").find("'step' is \"101\" (string), expected an integer") !=
        std::string::npos);
  CHECK(error_with("/step", 1e300).find("expected an integer") != std::string::npos);
  CHECK(error_with("/step", std::uint64_t{1} << 63).find("expected an integer") !=
        std::string::npos);
  CHECK(error_with("/window/loss", "x")
            .find("'window.loss' is \"x\" (string), expected a "
                  "number") != std::string::npos);
  CHECK(error_with("/metrics_bytes", -1)
            .find("'metrics_bytes' is -1 (number), expected a byte "
                  "count") != std::string::npos);
  CHECK(error_with("/optimizer", 5).find("'optimizer' is 5 (number), expected a string") !=
        std::string::npos);
  CHECK(error_with("/metric_name", 5).find("'metric_name'") != std::string::npos);
  CHECK(error_with("/schedule", nullptr).find("'schedule' is null (null), expected an object") !=
        std::string::npos);
  // Records: objects of steps done, with numbers where numbers are read.
  CHECK(error_with("/last_eval", "zz")
            .find("'last_eval' is \"zz\" (string), expected a metrics "
                  "record") != std::string::npos);
  CHECK(error_with("/last_train", {1, 2, 3}).find("'last_train'") != std::string::npos);
  CHECK(error_with("/best_eval", {{"accuracy", "x"}}).find("'best_eval.accuracy'") !=
        std::string::npos);
  CHECK(error_with("/last_eval", {{"step", 500}, {"loss", 1.0}})
            .find("'last_eval.step' is 500, above 'step' (101)") != std::string::npos);
  // The loss scaler's and early stopping's state.
  CHECK(error_with("/loss_scale", {{"scale", "x"}, {"growth", {1}}}).find("'loss_scale.scale'") !=
        std::string::npos);
  CHECK(error_with("/early_stopping", {{"best", "x"}, {"best_step", 1}, {"bad", 2}})
            .find("'early_stopping.best'") != std::string::npos);
  CHECK(error_with("/early_stopping", {{"best", 0.5}, {"best_step", 1}, {"bad", -2}})
            .find("'early_stopping.bad' is -2, below 0") != std::string::npos);
  // A state that is not an object at all.
  CHECK(state_error(nlohmann::json::array({1, 2})) ==
        "ckpt/state.safetensors: state is a list of 2, expected an object");
  // Nested deeper than any state the trainer writes: refused before it is walked.
  nlohmann::json deep = nullptr;
  for (int i = 0; i < 1000; ++i) deep = nlohmann::json::array({std::move(deep)});
  CHECK(state_error(with_field(good, "/last_eval", deep)) ==
        "ckpt/state.safetensors: state nests deeper than 32 levels (no state the trainer writes "
        "does)");
}

TEST_CASE("a state's NaN and infinite numbers read back as they were written") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  TrainState state = state_at_step_101();
  state.window_loss = nan;  // a window that diverged before its log point
  state.lr = inf;
  state.loss_scale = {{"scale", inf},
                      {"clean_steps", 0},
                      {"hysteresis_left", 1},
                      {"skipped_steps", 3},
                      {"overflows_at_min", 0},
                      {"last_overflow_step", 7},
                      {"last_overflow_scale", -inf}};
  state.last_eval = {{"step", 100}, {"split", "eval"}, {"loss", nan}, {"accuracy", 0.25}};
  state.best_eval = {{"step", 50}, {"split", "eval"}, {"loss", inf}, {"accuracy", 0.5}};
  state.last_train = {{"step", 100}, {"split", "train"}, {"loss", nan}, {"lr", -inf}};
  state.metric = nan;
  state.metric_name = "eval.loss";
  state.early_stopping = {{"best", nan}, {"best_step", 100}, {"bad", 1}};

  // As a checkpoint stores it: JSON text, which has no NaN of its own.
  const std::string text = state.to_json().dump();
  CHECK(text.find("null") == std::string::npos);
  const TrainState back = TrainState::from_json(nlohmann::json::parse(text), "s");
  CHECK(std::isnan(back.window_loss));
  CHECK(back.lr == inf);
  CHECK(back.loss_scale["scale"].get<double>() == inf);
  CHECK(back.loss_scale["last_overflow_scale"].get<double>() == -inf);
  CHECK(std::isnan(back.last_eval["loss"].get<double>()));
  CHECK(back.last_eval["split"] == "eval");
  CHECK(back.best_eval["loss"].get<double>() == inf);
  CHECK(std::isnan(back.last_train["loss"].get<double>()));
  CHECK(back.last_train["lr"].get<double>() == -inf);
  REQUIRE(back.metric);
  CHECK(std::isnan(*back.metric));
  CHECK(std::isnan(back.early_stopping["best"].get<double>()));
  // Written again, the same text.
  CHECK(back.to_json().dump() == text);

  // Earlier versions wrote null for them: read as NaN, so a resume goes on
  // (a record's loss compared with the next evaluation's, say).
  nlohmann::json old = state_at_step_101().to_json();
  old["window"]["loss"] = nullptr;
  old["schedule"]["lr"] = nullptr;
  old["best_eval"] = {{"step", 50}, {"split", "eval"}, {"loss", nullptr}, {"accuracy", 1.0}};
  const TrainState read = TrainState::from_json(old, "s");
  CHECK(std::isnan(read.window_loss));
  CHECK(std::isnan(read.lr));
  CHECK(std::isnan(read.best_eval.value("loss", 0.0)));
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
  // A dimension nested far deeper than a message could print: refused before
  // the header is parsed, at its first bracket too deep.
  const std::string nested = std::string(100000, '[') + "1" + std::string(100000, ']');
  CHECK(error_of(
            file_with(R"({"dtype":"F32","shape":[)" + nested + R"(,2],"data_offsets":[0,0]})", 0))
            .find("ckpt/model.safetensors: offset 37: the header nests deeper than a safetensors "
                  "header does") == 0);
  // A plausible size still reads.
  CHECK(error_of(file_with(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})", 16)).empty());
}

TEST_CASE("weights holding NaN or infinity are refused, naming the tensor and the element") {
  TempDir tmp("not-finite");
  Safetensors file = sample_file();  // fc1.bias [2], fc1.weight [2, 3]
  const std::string path = tmp / "w.safetensors";
  // `file` as a file: check_finite reads what it checks from disk.
  const auto checked = [&](const std::vector<TensorShape>& wanted) {
    write_text(path, encode_safetensors(file));
    std::string error;
    try {
      check_finite(SafetensorsFile(path), wanted, "w.safetensors");
    } catch (const CheckpointNotFinite& e) {
      error = e.what();
    }
    return error;
  };
  const std::vector<TensorShape> model = {{"fc1.weight", {2, 3}}, {"fc1.bias", {2}}};
  CHECK(checked(model).empty());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  StoredTensor& weight = file.tensors[1];
  std::memcpy(weight.bytes.data() + 4 * 4, &nan, 4);  // element 4: [1, 1]
  std::memcpy(weight.bytes.data() + 5 * 4, &inf, 4);
  CHECK(checked(model) ==
        "w.safetensors: tensor 'fc1.weight' element 4 (at [1, 1]) is NaN; 2 of its 6 "
        "values are not finite (the run had diverged, or the file was edited)");
  // Another tensor too: counted.
  const float minus_inf = -inf;
  std::memcpy(file.tensors[0].bytes.data(), &minus_inf, 4);
  CHECK(checked(model).find("(and 1 more tensor(s) hold such values)") != std::string::npos);
  // Tensors the model does not take are not its concern.
  CHECK(checked({{"fc2.weight", {2, 3}}}).empty());
}
