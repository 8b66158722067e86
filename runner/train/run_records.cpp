// What a run directory's records say, added to as the run goes on (the
// compiled program, failures) and read back by resumes, reruns and `eval`.
#include "runner/train/run_records.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "data/content_digest.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/durable_file.h"
#include "runner/config/value_changes.h"
#include "runner/json_text.h"
#include "runner/train/devices.h"
#include "runner/train/manifest_file.h"
#include "runner/train/sha256.h"

namespace trainer::train {
namespace fs = std::filesystem;
namespace {

// The compute threads a CPU session of the run that wrote `manifest`
// recorded: its last session's (a resume's entry, or the run's start), or its
// first's; nullopt when that is not on record (an older trainer's resume).
std::optional<std::int64_t> recorded_threads(const nlohmann::json& manifest, bool last_session) {
  const nlohmann::json* recorded = nullptr;
  if (const auto resumes = manifest.find("resumes");
      last_session && resumes != manifest.end() && resumes->is_array() && !resumes->empty()) {
    const nlohmann::json& last = resumes->back();
    if (!last.is_object() || !last.contains("threads")) return std::nullopt;
    recorded = &last["threads"];
  } else if (const auto devices = manifest.find("devices");
             devices != manifest.end() && devices->is_object() && devices->contains("threads")) {
    recorded = &(*devices)["threads"];
  }
  if (!recorded || !recorded->is_number_integer() || recorded->get<std::int64_t>() < 1)
    return std::nullopt;
  return recorded->get<std::int64_t>();
}

std::string threads_text(std::int64_t n) {
  return std::to_string(n) + (n == 1 ? " thread" : " threads");
}

}  // namespace

std::string resume_thread_change(const std::string& dir, const config::Config& config) {
  if (!config.deterministic || !config.devices.gpus.empty()) return "";
  const auto before = recorded_threads(read_manifest(dir), true);
  const int now = cpu_compute_threads(config);
  if (!before || *before == now) return "";
  return "backend.threads: this resume computes on " + threads_text(now) +
         " where the run's last session computed on " + threads_text(*before) +
         ": deterministic: true repeats results bit for bit on the same thread count only, so "
         "from here the run differs in the last bits from one that was not stopped; to continue "
         "it bit-identically, resume with backend.threads=" +
         std::to_string(*before);
}

std::vector<std::string> rerun_differences(const std::string& config_path, const Session& session) {
  const fs::path dir = fs::path(config_path).parent_path();
  std::error_code ec;
  if (fs::path(config_path).filename() != "config.yaml" ||
      !fs::is_regular_file(dir / "config.sha256", ec) ||
      !fs::is_regular_file(dir / "manifest.json", ec))
    return {};
  const nlohmann::json manifest = read_manifest(dir);
  if (!manifest.is_object()) return {};
  const std::string run = dir.string();
  std::vector<std::string> differences;
  // The data as the run's start recorded them.
  const nlohmann::json* data = manifest.contains("data") ? &manifest["data"] : nullptr;
  const auto compare_data = [&](const char* which, const data::Dataset* dataset) {
    if (!dataset || !data || !data->is_object() || !data->contains(which)) return;
    const nlohmann::json& recorded = (*data)[which];
    if (!recorded.is_object() || !recorded.contains("content_digest") ||
        !recorded["content_digest"].is_string())
      return;
    const std::string now = data::digest_text(dataset->content_digest());
    const std::string before = recorded["content_digest"].get<std::string>();
    if (now != before)
      differences.push_back(std::string("data.") + which + ": its content digest is " + now +
                            ", the run in " + run + " recorded " + before +
                            " (the data changed since)");
  };
  compare_data("train", session.train_data.get());
  compare_data("eval", session.eval_data.get());
  // A resume that changed the config's values (not only how it is written):
  // config.yaml is the last of the configs the run trained with.
  if (const auto configs = manifest.find("configs");
      configs != manifest.end() && configs->is_object() && configs->size() > 1) {
    std::vector<std::string> texts;
    for (const auto& [hash, text] : configs->items())
      if (text.is_string()) texts.push_back(config::resolved_today(text.get<std::string>()));
    const bool values_changed =
        std::any_of(texts.begin(), texts.end(), [&](const std::string& text) {
          return !config::value_changes(texts.front(), text).empty();
        });
    if (values_changed)
      differences.push_back(
          "config.yaml: the run in " + run + " trained with " + std::to_string(configs->size()) +
          " configs, a resume (or an edit before one) changing it (its manifest.json keeps each, "
          "and under \"resumes\" when; train.log says from which step); config.yaml is the "
          "last, and this run trains every step with it");
  }
  if (const auto from = manifest.find("init_from");
      from != manifest.end() && from->is_object() && from->contains("sha256") &&
      (*from)["sha256"].is_string() && !session.init_from_file.empty()) {
    const std::string now = sha256_of_file(session.init_from_file);
    if (now != (*from)["sha256"].get<std::string>())
      differences.push_back("model.init_from: " + session.init_from_file + " has SHA-256 " +
                            now.substr(0, 16) + "..., the run in " + run + " started from " +
                            (*from)["sha256"].get<std::string>().substr(0, 16) +
                            "... (the weights changed since)");
  }
  if (session.config.deterministic && session.config.devices.gpus.empty())
    if (const auto before = recorded_threads(manifest, false);
        before && *before != cpu_compute_threads(session.config))
      differences.push_back(
          "backend.threads: this run computes on " +
          threads_text(cpu_compute_threads(session.config)) + " where the run in " + run +
          " computed on " + threads_text(*before) +
          " (deterministic: true repeats results bit for bit on the same thread count only; "
          "add backend.threads=" +
          std::to_string(*before) + ")");
  return differences;
}

void record_program(const std::string& dir, const graph::Program& program, const Session& session) {
  nlohmann::json manifest = read_manifest(dir);
  nlohmann::json kernels = nlohmann::json::object(), compute = nlohmann::json::object();
  const auto& nodes = program.graph().nodes;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::string impl = program.implementation_of(static_cast<int>(i));
    if (!impl.empty()) kernels[nodes[i].name] = impl;
    if (nodes[i].compute != DType::f32) compute[nodes[i].name] = dtype_name(nodes[i].compute);
  }
  manifest["kernels"] = kernels;
  manifest["compute_types"] = compute;
  manifest["batch"] = {{"global", session.batch.global},
                       {"micro", session.batch.micro},
                       {"accumulation", session.batch.accumulation},
                       {"world", session.batch.world},
                       {"micro_batch_auto", session.config.train.micro_batch_auto}};
  // What the loader does to each sample, with the normalize statistics computed from the data.
  manifest["transforms"] = {{"train", session.train_pipeline->describe()},
                            {"eval", session.eval_pipeline->describe()}};
  nlohmann::json statistics = nlohmann::json::array();
  for (const auto& [type, attrs] : session.train_pipeline->resolved()) {
    if (type != "normalize") continue;
    const auto numbers = [&](const char* name) {
      const auto it = attrs.values().find(name);
      const auto* list =
          it == attrs.values().end() ? nullptr : std::get_if<std::vector<double>>(&it->second);
      return list ? nlohmann::json(*list) : nlohmann::json();
    };
    statistics.push_back({{"mean", numbers("mean")}, {"std", numbers("std")}});
  }
  manifest["normalize_statistics"] = statistics;
  if (const auto names = session.train_data->class_names(); !names.empty())
    manifest["class_names"] = names;
  // What the session trains and evaluates on, to tell later whether the data
  // is still the same: where it is, how many samples, their content digest.
  const auto data_record = [](const data::Dataset& dataset) {
    return nlohmann::json{{"source", dataset.describe()},
                          {"samples", dataset.size()},
                          {"content_digest", data::digest_text(dataset.content_digest())}};
  };
  nlohmann::json data = {{"train", data_record(*session.train_data)}};
  // The classes the model was built for (read off the labels when the source
  // has no `classes:`): an evaluation whose training data is gone needs them.
  if (session.num_classes > 0) data["train"]["classes"] = session.num_classes;
  if (session.eval_data) data["eval"] = data_record(*session.eval_data);
  // The run's start keeps its record; each resume's goes with that resume.
  if (const auto resumes = manifest.find("resumes");
      resumes != manifest.end() && resumes->is_array() && !resumes->empty())
    resumes->back()["data"] = std::move(data);
  else
    manifest["data"] = std::move(data);
  manifest["memory"] = {{"arena_bytes", program.memory_plan().arena_bytes},
                        {"persistent_bytes", program.persistent_bytes()}};
  write_manifest(dir, manifest);
}

namespace {

// The numbers of a recorded statistic (`key` of `stats`), or "" and `problem`
// saying why they cannot be used: a list of finite numbers, and for std
// positive ones.
std::vector<double> recorded_numbers(const nlohmann::json& stats, const char* key,
                                     std::string& problem) {
  const auto it = stats.is_object() ? stats.find(key) : stats.end();
  if (!stats.is_object() || it == stats.end() || !it->is_array() || it->empty()) {
    problem = std::string("has no list of ") + key;
    return {};
  }
  std::vector<double> values;
  for (const auto& v : *it) {
    // The bounds the config's normalize takes: float32 must hold the value
    // and its inverse.
    const bool is_std = std::string(key) == "std";
    const bool usable = v.is_number() && std::isfinite(v.get<double>()) &&
                        std::fabs(v.get<double>()) <= 1e30 && (!is_std || v.get<double>() >= 1e-30);
    if (!usable) {
      problem = std::string("has ") + key + " " + (v.is_structured() ? v.type_name() : v.dump()) +
                (is_std ? " (not a number from 1e-30 to 1e30)" : " (not a number within +-1e30)");
      return {};
    }
    values.push_back(v.get<double>());
  }
  return values;
}

// The list manifest.json of `dir` records as "normalize_statistics", or null
// and `problem` saying why there is none to use.
nlohmann::json recorded_statistics(const std::string& dir, std::string& problem) {
  nlohmann::json manifest = parse_manifest(dir, problem);
  std::error_code ec;
  if (problem.empty() && !fs::exists(fs::path(dir) / "manifest.json", ec))
    problem = "it is missing";
  if (!problem.empty()) return nullptr;
  const auto recorded = manifest.find("normalize_statistics");
  if (recorded == manifest.end()) {
    problem = "it records no normalize_statistics";
    return nullptr;
  }
  if (!recorded->is_array()) {
    problem = "its normalize_statistics is " + std::string(recorded->type_name()) + ", not a list";
    return nullptr;
  }
  return std::move(*recorded);
}

// The transforms before the `rank`-th normalize of `transforms` (all of
// them when it has fewer).
std::vector<config::TypedItem> before_normalize(const std::vector<config::TypedItem>& transforms,
                                                std::size_t rank) {
  std::vector<config::TypedItem> out;
  for (const config::TypedItem& item : transforms) {
    if (item.type == "normalize" && rank-- == 0) break;
    out.push_back(item);
  }
  return out;
}

bool same_transforms(const std::vector<config::TypedItem>& a,
                     const std::vector<config::TypedItem>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.type == y.type && x.attrs.values() == y.attrs.values();
  });
}

}  // namespace

RestoredStatistics restore_normalize_statistics(
    const std::string& dir, config::Config& config,
    const std::vector<config::TypedItem>& trained_with) {
  RestoredStatistics out;
  std::vector<config::TypedItem*> wanted;  // each normalize, nullptr when it has its own
  for (config::TypedItem& item : config.data.transforms)
    if (item.type == "normalize")
      wanted.push_back(item.attrs.has("mean") || item.attrs.has("std") ? nullptr : &item);
  // A normalize after other transforms than the run's: its statistics are not the run's.
  for (std::size_t rank = 0; rank < wanted.size(); ++rank)
    if (wanted[rank] && !same_transforms(before_normalize(config.data.transforms, rank),
                                         before_normalize(trained_with, rank))) {
      out.problems.push_back("data.transforms: normalize " + std::to_string(rank) +
                             " follows other transforms than in the run, whose statistics are of "
                             "its own transforms' samples");
      wanted[rank] = nullptr;
    }
  if (std::all_of(wanted.begin(), wanted.end(), [](auto* item) { return !item; })) return out;
  const std::string where = (fs::path(dir) / "manifest.json").string();
  std::string problem;
  const nlohmann::json recorded = recorded_statistics(dir, problem);
  if (!problem.empty()) {
    out.problems.push_back(where + ": " + problem);
    return out;
  }
  for (std::size_t rank = 0; rank < wanted.size(); ++rank) {
    if (!wanted[rank]) continue;
    const std::string entry = where + ": normalize_statistics[" + std::to_string(rank) + "] ";
    if (rank >= recorded.size()) {
      out.problems.push_back(entry + "is missing");
      continue;
    }
    const nlohmann::json& stats = recorded[rank];
    std::vector<double> mean = recorded_numbers(stats, "mean", problem);
    std::vector<double> std_dev =
        problem.empty() ? recorded_numbers(stats, "std", problem) : std::vector<double>{};
    if (!problem.empty()) {
      out.problems.push_back(entry + problem);
      problem.clear();
      continue;
    }
    wanted[rank]->attrs.set("mean", std::move(mean));
    wanted[rank]->attrs.set("std", std::move(std_dev));
    ++out.filled;
  }
  return out;
}

std::vector<std::string> recorded_class_names(const std::string& dir) {
  const nlohmann::json manifest = read_manifest(dir);
  const auto recorded = manifest.find("class_names");
  if (recorded == manifest.end()) return {};
  try {
    auto names = recorded->get<std::vector<std::string>>();
    // A damaged record (a name twice): the classes are read from the data.
    auto sorted = names;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return {};
    return names;
  } catch (const nlohmann::json::exception&) {
    return {};  // a damaged record: the classes are read from the data
  }
}

std::int64_t recorded_class_count(const std::string& dir) {
  const nlohmann::json manifest = read_manifest(dir);
  // The newest record that says: a resume's, else the run's start (an older
  // trainer's resume records none).
  std::vector<const nlohmann::json*> records;
  if (const auto resumes = manifest.find("resumes");
      resumes != manifest.end() && resumes->is_array() && !resumes->empty())
    records.push_back(&resumes->back());
  records.push_back(&manifest);
  for (const nlohmann::json* record : records) {
    if (!record->is_object() || !record->contains("data")) continue;
    const nlohmann::json& data = (*record)["data"];
    if (!data.is_object() || !data.contains("train") || !data["train"].is_object()) continue;
    const nlohmann::json& train = data["train"];
    if (const auto classes = train.find("classes");
        classes != train.end() && classes->is_number_integer() && classes->get<std::int64_t>() > 0)
      return classes->get<std::int64_t>();
  }
  return 0;
}

std::string recorded_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

void record_failure(const std::string& dir, const std::string& error,
                    const nlohmann::json& earlier) {
  std::error_code ec;
  if (dir.empty() || fs::exists(fs::path(dir) / "summary.json", ec)) return;
  nlohmann::json summary = {{"status", "failed"}, {"error", error}, {"steps", 0}};
  try {  // what a resume goes on from
    const fs::path last = checkpoint::CheckpointStore(dir).find("last", "", false);
    const std::string name = last.filename().string();
    if (name.rfind("step-", 0) == 0) summary["steps"] = std::stoll(name.substr(5));
    summary["last_checkpoint"] = recorded_path(last.string());
  } catch (const std::exception&) {  // none: nothing was kept
  }
  if (!earlier.is_null()) summary["earlier_summary"] = earlier;
  try {
    checkpoint::write_file_atomically((fs::path(dir) / "summary.json").string(),
                                      json_text(summary, 2) + "\n");
  } catch (const std::exception&) {
    // The error being reported matters more than its record.
  }
}

void record_stopped_before_training(const std::string& dir, int signal) {
  const nlohmann::json summary = {{"status", "interrupted"},
                                  {"signal", signal},
                                  {"steps", 0},
                                  {"epochs", 0},
                                  {"session_steps", 0},
                                  {"last_checkpoint", ""},
                                  {"stopped", "before training started"}};
  try {
    checkpoint::write_file_atomically((fs::path(dir) / "summary.json").string(),
                                      json_text(summary, 2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: could not write %s/summary.json: %s\n", dir.c_str(), e.what());
  }
}

void log_failure(const std::string& dir, const std::string& error) {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::ofstream(fs::path(dir) / "train.log", std::ios::app)
      << fmt::format("[{:%Y-%m-%d %H:%M:%S}.{:03}] error: {}\n",
                     fmt::localtime(std::chrono::system_clock::to_time_t(now)), ms.count(), error);
}

void record_step_execution(const std::string& dir, const graph::Program& program) {
  nlohmann::json manifest = read_manifest(dir);
  manifest["step_execution"] = program.step_execution();
  write_manifest(dir, manifest);
}

std::optional<RecordedBatch> recorded_batch(const std::string& dir, std::string* problem) {
  const nlohmann::json manifest = read_manifest(dir);
  const auto batch = manifest.find("batch");
  if (batch == manifest.end() || !batch->is_object()) return std::nullopt;
  RecordedBatch recorded;
  for (auto [key, field] : {std::pair{"global", &recorded.global},
                            {"micro", &recorded.micro},
                            {"accumulation", &recorded.accumulation},
                            {"world", &recorded.world}}) {
    const auto value = batch->find(key);
    if (value == batch->end() || !value->is_number_integer() || value->get<std::int64_t>() < 1)
      return std::nullopt;
    *field = value->get<std::int64_t>();
  }
  // An edited or damaged record: its parts do not make its whole.
  // (Divided, not multiplied: an edited value may be any 64-bit number.)
  if (recorded.global % recorded.world != 0 ||
      recorded.global / recorded.world % recorded.accumulation != 0 ||
      recorded.global / recorded.world / recorded.accumulation != recorded.micro) {
    if (problem)
      *problem = fmt::format(
          "{}/manifest.json records a batch of micro-batch {} x accumulation {} x {} rank(s), "
          "which is not its global batch {} (the file was edited or damaged)",
          dir, recorded.micro, recorded.accumulation, recorded.world, recorded.global);
    return std::nullopt;
  }
  const auto chosen = batch->find("micro_batch_auto");
  recorded.micro_batch_auto = chosen != batch->end() && chosen->is_boolean() && chosen->get<bool>();
  return recorded;
}

std::optional<std::int64_t> recorded_auto_accumulation(const std::string& dir,
                                                       std::string* problem) {
  const auto batch = recorded_batch(dir, problem);
  if (!batch || !batch->micro_batch_auto) return std::nullopt;
  return batch->accumulation;
}

}  // namespace trainer::train
