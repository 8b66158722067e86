// A resumed training loop (train_loop.h): the newest good checkpoint taken
// and checked against the config and the data, the record files cut back to
// it, a finished run's summary, and an evaluation the checkpoint left to make.
#include "runner/train/train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "data/content_digest.h"
#include "runner/checkpoint/durable_file.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/dist/rank_config.h"
#include "runner/json_text.h"
#include "runner/train/run_records.h"
#include "runner/train/tfevents.h"
#include "runner/usage_error.h"

namespace trainer::train::loop {
namespace {

// Cuts a JSON-lines file back to `bytes` (what it held at the checkpoint) before appending.
// The length of the longest prefix of `bytes` made of whole JSON lines.
std::uint64_t whole_lines(const std::string& bytes) {
  const auto end = bytes.rfind('\n');
  return end == std::string::npos ? 0 : end + 1;
}

// The length of the longest prefix of `bytes` made of whole event records
// (8-byte length, 4-byte CRC, data, 4-byte CRC).
std::uint64_t whole_event_records(const std::string& bytes) {
  std::uint64_t at = 0;
  while (bytes.size() - at >= 16) {
    std::uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at, sizeof length);
    if (length > bytes.size() - at - 16) break;
    at += 16 + length;
  }
  return at;
}

// Cuts a record file back to the `bytes` the checkpoint recorded, so the
// records after it are written again. A file shorter than that lost records
// (restored from an older copy, edited): it is cut back to its last whole
// record instead, and the returned warning says so ("" otherwise).
std::string restore_record_file(const std::string& path, std::uint64_t bytes,
                                std::uint64_t (*whole_records)(const std::string&)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return bytes == 0 ? ""
                      : path + " is missing (the checkpoint recorded " + std::to_string(bytes) +
                            " bytes): its records up to the checkpoint are lost; the run "
                            "writes the ones after it";
  std::uint64_t keep = bytes;
  std::string warning;
  if (const std::uint64_t size = fs::file_size(path, ec); !ec && size < bytes) {
    std::ifstream in(path, std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    keep = whole_records(content);
    warning = path + " holds " + std::to_string(size) + " bytes, fewer than the " +
              std::to_string(bytes) + " the checkpoint recorded: records were lost since; it is " +
              "cut back to its last whole record (" + std::to_string(keep) +
              " bytes) and the run appends after it";
  }
  if (!ec && fs::file_size(path, ec) > keep) fs::resize_file(path, keep, ec);
  if (ec)
    throw std::runtime_error("cannot cut " + path +
                             " back to its checkpointed length: " + ec.message());
  return warning;
}

// Keeps the records of the JSON-lines file at `path` up to `step` (the
// resumed checkpoint's), for a file whose length no checkpoint records (the
// ranks' load reports): the steps after it are trained, and recorded, again.
// A line that is no record with a step is kept.
void drop_records_after(const std::string& path, std::int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<std::int64_t>() > step) {
      dropped = true;
      continue;
    }
    kept += line + '\n';
  }
  in.close();
  if (dropped) checkpoint::write_file_atomically(path, kept);
}

}  // namespace

// The run's summary.json names a newer checkpoint than the one loaded, and
// that one is gone (deleted by hand; a damaged one set aside was said):
// its steps are trained again and the records after the loaded one cut.
void TrainLoop::warn_if_newer_checkpoint_gone(std::int64_t loaded_step) {
  if (!collective_.is_root()) return;
  std::ifstream in(run_dir_ + "/summary.json");
  const nlohmann::json summary = nlohmann::json::parse(in, nullptr, false);
  if (!summary.is_object() || !summary.contains("last_checkpoint") ||
      !summary["last_checkpoint"].is_string())
    return;
  const std::filesystem::path last = summary["last_checkpoint"].get<std::string>();
  const std::string name = last.filename().string();
  if (const auto step = checkpoint::checkpoint_step(name); !step || *step <= loaded_step) return;
  std::error_code ec;
  const std::filesystem::path folder = std::filesystem::path(store_.directory()) / name;
  // There, or set aside as damaged (which load_newest said).
  if (std::filesystem::exists(folder, ec) || std::filesystem::exists(folder.string() + ".bad", ec))
    return;
  log_->warn(
      "the run's last checkpoint, {} (summary.json), is gone from {}: it resumes from step {}, "
      "the newest there, and its records after that step are cut and those steps trained again",
      name, store_.directory(), loaded_step);
}

// Resume: the newest checkpoint that verifies; bad ones are reported and
// skipped (and set aside by the root). With several ranks, every rank must
// have taken the same one, or they would train out of step.
void TrainLoop::resume_or_initialize() {
  if (!options_.resume) return;
  std::optional<checkpoint::LoadedCheckpoint> loaded;
  try {
    loaded = store_.load_newest(program_, collective_.is_root(),
                                [&](const std::string& m) { log_->warn("{}", m); });
  } catch (const checkpoint::CheckpointMismatch& e) {
    throw UsageError(
        std::string("the run's checkpoint does not fit the model (and optimizer) this config "
                    "builds: ") +
        e.what() +
        "\n  resume with the run's own config (its model and optimizer: trainer run --resume " +
        run_dir_ +
        "; train.max_steps / train.epochs may grow); to train the changed model, start a "
        "new run (model.init_from: that file, with model.init_strict: false, starts it from the "
        "tensors that fit)");
  }
  if (collective_.world() > 1) {
    const std::vector<double> steps =
        values_over_ranks(collective_, loaded ? static_cast<double>(loaded->state.step) : -1.0);
    if (std::adjacent_find(steps.begin(), steps.end(), std::not_equal_to<>()) != steps.end()) {
      std::string found;
      for (std::size_t r = 0; r < steps.size(); ++r)
        found += (r ? ", rank " : "rank ") + std::to_string(r) + ": " +
                 (steps[r] < 0 ? "none" : "step " + std::to_string(std::llround(steps[r])));
      throw std::runtime_error("the ranks found different checkpoints to resume from in " +
                               store_.directory() + " (" + found +
                               "): is the run directory on storage every rank sees alike?");
    }
  }
  if (!loaded) {
    log_->warn("no usable checkpoint in {}: starting from the beginning", store_.directory());
    initialize_parameters(s_, program_);
    return;
  }
  const auto& st = loaded->state;
  // A checkpoint of an earlier version records no batch size.
  const bool same_batch = st.batch_size == 0 || st.batch_size == s_.batch.global;
  // Only the accumulation differs: the micro-batch over this number of ranks
  // (train.micro_batch_size fixed, devices.world_size changed) that keeps it.
  std::string keep_accumulation;
  const std::int64_t per_step = s_.batch.global / world_;
  if (st.seed == cfg_.seed && same_batch && st.accumulation != accumulation_ &&
      st.accumulation > 0 && per_step % st.accumulation == 0)
    keep_accumulation = "; the accumulation follows train.micro_batch_size over the " +
                        std::to_string(world_) + (world_ == 1 ? " rank" : " ranks") +
                        " (batch / (micro-batch x ranks)): train.micro_batch_size=" +
                        std::to_string(per_step / st.accumulation) + " keeps the run's " +
                        std::to_string(st.accumulation);
  // Another count of training samples: the data changed under the run (or
  // an override of data.split moved samples between the sets). A checkpoint
  // of an earlier version records no count: the config as the run's but
  // another number of steps per epoch says the same.
  const std::int64_t samples = s_.train_data->size();
  const bool count_changed = st.train_samples > 0 && st.train_samples != samples;
  const bool steps_changed_alone = st.train_samples == 0 && st.batch_size > 0 &&
                                   st.seed == cfg_.seed && same_batch &&
                                   st.accumulation == accumulation_ && world_ == 1;
  if (st.steps_per_epoch != steps_per_epoch_ && (count_changed || steps_changed_alone))
    throw UsageError(
        "checkpoint " + loaded->path + " was written when " +
        (count_changed
             ? "the training set held " + std::to_string(st.train_samples) + " samples (" +
                   std::to_string(st.steps_per_epoch) + " steps per epoch); it now holds " +
                   std::to_string(samples) + " (" + std::to_string(steps_per_epoch_) + ")"
             : "an epoch was " + std::to_string(st.steps_per_epoch) +
                   " steps; the training data now gives " + std::to_string(steps_per_epoch_) +
                   " (" + std::to_string(samples) + " samples)") +
        ": the training data changed since the run started (a file replaced, images added or "
        "removed), or an override changed data.split. Restore the run's data to resume it "
        "exactly, or start a new run from these weights (model.init_from=" +
        loaded->path + "/model.safetensors)");
  if (st.seed != cfg_.seed || st.accumulation != accumulation_ ||
      st.steps_per_epoch != steps_per_epoch_ || !same_batch)
    throw UsageError(
        "checkpoint " + loaded->path + " was written with seed " + std::to_string(st.seed) + ", " +
        (st.batch_size > 0 ? "batch " + std::to_string(st.batch_size) + ", " : "") +
        std::to_string(st.steps_per_epoch) + " steps per epoch and accumulation " +
        std::to_string(st.accumulation) + "; this config gives seed " + std::to_string(cfg_.seed) +
        ", " + (st.batch_size > 0 ? "batch " + std::to_string(s_.batch.global) + ", " : "") +
        std::to_string(steps_per_epoch_) + " and " + std::to_string(accumulation_) +
        ": resume with the run's own config.yaml (its seed, batch, data and accumulation; "
        "train.max_steps / train.epochs may grow, and settings that change no step, such as "
        "train.log_every or backend.threads, may change)" +
        keep_accumulation +
        (world_ > 1 && cfg_.data.drop_last && st.seed == cfg_.seed &&
                 st.accumulation == accumulation_
             ? std::string("; with several ranks and data.drop_last: true, a trainer before "
                           "2026-12-01 counted each rank's shard as ceil(N / ranks) samples, "
                           "wrapping some: finish such a run with the trainer that started it")
             : std::string()));
  if (!st.optimizer.empty() && st.optimizer != cfg_.optimizer.type)
    throw UsageError("checkpoint " + loaded->path + " holds the moments of optimizer " +
                     st.optimizer + "; this config uses " + cfg_.optimizer.type +
                     ": resume with the run's own config.yaml, or start a new run");
  // The base rate as applied: with optimizer.lr_scaling it follows the
  // number of ranks, which a resume may change while the global batch stays.
  if (collective_.is_root() && st.base_lr > 0 &&
      std::abs(st.base_lr - cfg_.optimizer.lr) > 1e-12 * st.base_lr) {
    const bool scaled = cfg_.optimizer.lr_scaling != "none";
    log_->warn(
        "optimizer.lr: the run trained at a base rate of {} and goes on at {}{}; to go on at the "
        "run's rates, resume with {}",
        st.base_lr, cfg_.optimizer.lr,
        scaled ? fmt::format(" (optimizer.lr_scaling: {} scales it by the number of ranks, now {})",
                             cfg_.optimizer.lr_scaling, world_)
               : std::string(),
        dist::overrides_keeping_rates(cfg_, st.base_lr));
  }
  // The same steps per epoch, another count: it resumes, on other samples.
  if (count_changed && collective_.is_root())
    log_->warn(
        "checkpoint {} was written when the training set held {} samples; it now holds {}: the "
        "training data changed since the run started, so the resume trains on other samples "
        "than the run would have",
        loaded->path, st.train_samples, samples);
  // The same count, other content: a file replaced, labels edited.
  if (const std::string digest = data::digest_text(s_.train_data->content_digest());
      !count_changed && !st.train_digest.empty() && st.train_digest != digest &&
      collective_.is_root())
    log_->warn(
        "checkpoint {} was written when the training data's content digest was {}; it is now {} "
        "(the same {} samples): the data changed since that checkpoint was written (a file "
        "replaced or edited, labels changed), so the resume trains on other data than the run "
        "did; restore that data to resume exactly, or start a new run from these weights "
        "(model.init_from={}/model.safetensors). A file the run stopped at, unable to read it, "
        "and restored since changes the digest too: it was never trained on, and the resume is "
        "the exact one",
        loaded->path, st.train_digest, digest, samples, loaded->path);
  warn_if_eval_data_changed(st, loaded->path);
  warn_if_newer_checkpoint_gone(st.step);
  resumed_ = st;
  resumed_from_ = loaded->path;
  log_->info("resuming from {}: step {}, epoch {}, {} of its {} steps done", loaded->path, st.step,
             st.epoch, st.epoch_step, steps_per_epoch_);
}

void TrainLoop::warn_if_eval_data_changed(const checkpoint::TrainState& st,
                                          const std::string& path) const {
  if (!s_.eval_data || st.eval_digest.empty() || !collective_.is_root()) return;
  const std::string digest = data::digest_text(s_.eval_data->content_digest());
  if (digest == st.eval_digest) return;
  const bool early_stopping = cfg_.train.early_stopping.patience > 0;
  const std::string comparing = keeps_best() && early_stopping ? "checkpoint.keep_best and "
                                                                 "train.early_stopping compare"
                                : keeps_best()                 ? "checkpoint.keep_best compares"
                                : early_stopping               ? "train.early_stopping compares"
                                                               : "";
  log_->warn(
      "checkpoint {} was written when the evaluation data's content digest was {}; it is now {} "
      "({} samples): the evaluation data changed since then, so the evaluations from here on "
      "measure other data than the run's earlier ones{}; restore that data to compare them",
      path, st.eval_digest, digest, s_.eval_data->size(),
      comparing.empty()
          ? comparing
          : " (" + comparing + " them with the best so far, measured on the old data)");
}

void TrainLoop::open_metrics() {
  if (!collective_.is_root()) return;
  const std::string metrics_path = run_dir_ + "/metrics.jsonl";
  const std::string timing_path = run_dir_ + "/timing.jsonl";
  const auto restore = [&](const std::string& path, std::uint64_t bytes,
                           std::uint64_t (*whole_records)(const std::string&)) {
    if (const std::string warning = restore_record_file(path, bytes, whole_records);
        !warning.empty())
      log_->warn("{}", warning);
  };
  // The records after the checkpoint are cut, to be written again; a resume
  // that writes none keeps them (a max_steps stop inside an epoch checkpoints
  // the state before its last record and evaluation).
  const bool cut = options_.resume && !writes_nothing();
  if (cut) {
    restore(metrics_path, resumed_.metrics_bytes, whole_lines);
    restore(timing_path, resumed_.timing_bytes, whole_lines);
    drop_records_after(run_dir_ + "/ranks.jsonl", resumed_.step);
  }
  metrics_ = MetricsWriter(metrics_path, options_.resume);
  timing_ = MetricsWriter(timing_path, options_.resume);
  // The events file is cut back to the checkpoint as the records are, also
  // when this part of the run writes none (output.tensorboard turned off):
  // its steps after the checkpoint are trained again, and a later part that
  // turns it on again must not find their old values there. Without a
  // checkpoint the run starts over, and so does the file (its file-version
  // record is written again); a checkpoint that recorded no length (no part
  // of the run had written the file by then) leaves it as it is.
  const std::string events_path = run_dir_ + "/" + kEventsFile;
  std::error_code ec;
  const bool events_exist = std::filesystem::exists(events_path, ec);
  const std::optional<std::uint64_t> events_bytes =
      resumed_from_.empty() ? std::optional<std::uint64_t>(0) : resumed_.events_bytes;
  if (cut && events_bytes && (cfg_.output.tensorboard || events_exist))
    restore(events_path, *events_bytes, whole_event_records);
  if (cfg_.output.tensorboard) {
    events_ = EventsWriter(events_path, options_.resume);
  } else if (events_exist) {
    const std::uintmax_t bytes = std::filesystem::file_size(events_path, ec);
    if (!ec) unwritten_events_bytes_ = bytes;
  }
}

bool TrainLoop::early_stopped_at_checkpoint() const {
  const nlohmann::json& stop = resumed_.early_stopping;
  const std::int64_t patience = cfg_.train.early_stopping.patience;
  return patience > 0 && stop.is_object() && stop.value("bad", std::int64_t{0}) >= patience;
}

bool TrainLoop::replay_evaluation_at_checkpoint() {
  const std::int64_t every = cfg_.train.eval_every;
  const std::int64_t in_epoch = resumed_.epoch_step;
  if (!options_.resume || every <= 0 || step_ == 0 || step_ % every != 0 || step_ >= total_steps_ ||
      in_epoch <= 0 || in_epoch >= steps_per_epoch_ ||
      (last_eval_.is_object() && last_eval_.value("step", std::int64_t{-1}) == step_))
    return false;
  run_eval(step_);
  // Saved before this evaluation (stopped or failed in it): saved again with
  // its metric, as the run that went on saved it, for keep_best to rank.
  if (early_stopped_ || keeps_best()) save_checkpoint(epoch_, in_epoch);
  return true;
}

// Until this session records its end, summary.json says that it trains
// rather than how the last session ended: one killed outright (SIGKILL, the
// out-of-memory killer) records nothing, and a "complete" left from before
// would name a checkpoint retention has since removed.
void TrainLoop::record_session_running() const {
  if (!collective_.is_root()) return;
  nlohmann::json summary = {{"status", "running"},
                            {"steps", resumed_.step},
                            // counted as the end counts them: one begun counts
                            {"epochs", resumed_.epoch + (resumed_.epoch_step > 0 ? 1 : 0)},
                            {"resumed_at_step", resumed_.step}};
  if (!resumed_from_.empty()) {
    summary["resumed_from"] = recorded_path(resumed_from_);
    summary["last_checkpoint"] = recorded_path(resumed_from_);
  }
  // How the last session ended, kept for a failure recorded from outside
  // (the launcher's, for a rank killed): that of the session before a
  // running one that left no end.
  std::ifstream in(run_dir_ + "/summary.json");
  nlohmann::json earlier = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (earlier.is_object() && earlier.contains("status") && earlier["status"] == "running")
    earlier = earlier.value("earlier_summary", nlohmann::json());
  if (earlier.is_object()) summary["earlier_summary"] = earlier;
  checkpoint::write_file_atomically(run_dir_ + "/summary.json", json_text(summary, 2) + "\n");
}

std::optional<nlohmann::json> TrainLoop::finished_summary(std::int64_t at_step) const {
  std::ifstream in(run_dir_ + "/summary.json");
  if (!in) return std::nullopt;
  try {
    nlohmann::json summary = nlohmann::json::parse(in);
    if (summary.is_object() && summary.value("status", "") == "complete" &&
        summary.value("steps", std::int64_t{-1}) == at_step)
      return summary;
  } catch (const nlohmann::json::exception&) {
  }
  return std::nullopt;
}

}  // namespace trainer::train::loop
