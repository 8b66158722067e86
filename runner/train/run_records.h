// What a run directory's records say (manifest.json, summary.json,
// train.log), added to as the run goes on (the compiled program, how its
// steps ran, failures) and read back by resumes, reruns and `trainer eval`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/config/config.h"
#include "runner/graph/program.h"
#include "runner/train/session.h"

namespace trainer::train {

// On a resume of a deterministic CPU run, a line saying that the compute
// threads differ from those of the run's last session (manifest.json keeps
// each session's count) and what to set for a bit-identical continuation; ""
// when they are the same or not on record.
std::string resume_thread_change(const std::string& dir, const config::Config& config);

// When `config_path` is the config.yaml of a run directory (a run repeated
// from its record), what keeps this session from repeating that run: data
// whose content digest differs from the run's start, model.init_from weights
// whose SHA-256 differs, a deterministic CPU run's thread count; each a line
// naming the key and both values. Empty for any other config.
std::vector<std::string> rerun_differences(const std::string& config_path, const Session& session);

// Records in manifest.json the implementation chosen for every node
// ("conv1": "onednn:conv2d brgconv avx512"), the compute type of the nodes
// that do not compute in float32, the batch split (and whether
// micro_batch_size: auto chose it), the training and eval transforms as the
// loader applies them (computed normalize statistics included, and exactly
// in "normalize_statistics"), the training data's class names when its
// source names them, the program's memory, and the data sets (source,
// samples, content digest: "data" for the run's start, in its entry of
// "resumes" for a resume).
void record_program(const std::string& dir, const graph::Program& program, const Session& session);

// What restore_normalize_statistics did: how many normalize transforms it
// filled, and why it could not fill the others (each naming manifest.json and
// what it lacks); those compute their statistics from the data again.
struct RestoredStatistics {
  std::size_t filled = 0;
  std::vector<std::string> problems;
};

// Gives each `normalize` of config.data.transforms that has neither mean nor
// std the statistics the run in `dir` recorded for it (manifest.json
// "normalize_statistics", in the order of the list), so that evaluating a
// run normalises as it trained even when its training data changed since.
// A record that is missing, damaged, or holds a value that is not finite (or
// a std not above 0) fills nothing and is reported; so does one whose
// normalize follows other transforms than it did in the run (`trained_with`,
// the run's own data.transforms: an override changed them), as the run's
// statistics are of the samples its own transforms made.
RestoredStatistics restore_normalize_statistics(const std::string& dir, config::Config& config,
                                                const std::vector<config::TypedItem>& trained_with);

// The training data's class names the run in `dir` recorded (manifest.json
// "class_names": a source that names its classes, as an image folder does);
// empty when it recorded none.
std::vector<std::string> recorded_class_names(const std::string& dir);

// The number of classes the run in `dir` built its model for (manifest.json
// data.train.classes, of the newest session that recorded it); 0 when none did.
std::int64_t recorded_class_count(const std::string& dir);

// A checkpoint's path as summary.json records it: absolute, so that it
// names the folder from wherever the record is read ("" stays "").
std::string recorded_path(const std::string& path);

// summary.json for a run that failed outside its training loop (which
// records its own failures): status "failed", the error, and the training
// its checkpoints keep (`steps` and `last_checkpoint` of the newest; steps 0
// without one); `earlier`, an earlier session's summary, kept under
// "earlier_summary" when given. Leaves a summary.json that is there alone.
void record_failure(const std::string& dir, const std::string& error,
                    const nlohmann::json& earlier = nullptr);

// summary.json for a new run stopped by `signal` once its directory was
// made, before its first step: status "interrupted", steps 0 (a resume
// trains it from the start).
void record_stopped_before_training(const std::string& dir, int signal);

// Ends the run's train.log with "[date time] error: <error>", stamped as its
// other lines are.
void log_failure(const std::string& dir, const std::string& error);

// Records in manifest.json how the training steps ran: "recorded" (replayed
// from a CUDA graph) or "eager: <why>".
void record_step_execution(const std::string& dir, const graph::Program& program);

// The batch of the run in `dir` as its manifest records it (nullopt without
// a whole record: an older or damaged manifest.json).
struct RecordedBatch {
  std::int64_t global = 0, micro = 0, accumulation = 1, world = 1;
  bool micro_batch_auto = false;  // micro and accumulation are what auto chose
};
// nullopt, with `problem` (when given) saying why, for a record whose parts
// do not multiply to its global batch (edited or damaged).
std::optional<RecordedBatch> recorded_batch(const std::string& dir, std::string* problem = nullptr);

// The accumulation micro_batch_size: auto chose for the run in `dir`
// (manifest.json "batch"), which a resume keeps whatever memory there is now
// (the checkpoint's steps are of that many micro-batches); nullopt when the
// run did not choose one so.
std::optional<std::int64_t> recorded_auto_accumulation(const std::string& dir,
                                                       std::string* problem = nullptr);

}  // namespace trainer::train
