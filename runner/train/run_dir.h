// The run directory: where a run keeps everything it did. Created up front with
// the resolved config (re-runnable as is), its hash and a manifest (command
// line, overrides, git commit, versions, host, CPU ISA, devices, determinism
// flags, precision); the kernels chosen per node are added once compiled.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/commands.h"
#include "runner/config/config.h"
#include "runner/graph/program.h"
#include "runner/train/run_lock.h"
#include "runner/train/session.h"

namespace trainer::train {

// Whether directory `dir` holds only what a run that stopped while creating
// it left (a crash, a full disk): its lock file, temporary files, and the
// manifest.json and config.yaml a run writes first (the config with its
// `# resolved from` line on top; either with the lock file beside it) before
// config.sha256. Nothing of a user's is lost when a new run takes it.
bool unfinished_run_dir(const std::string& dir);

// What a folder given as a run directory that is none holds instead, and
// the command meant (`eval` true: `trainer eval`, else `trainer run
// --resume`): a sweep's directory (its runs are its trials), or a run's
// checkpoints/ folder or one checkpoint in it (the run is above). "" for
// anything else.
std::string run_dir_advice(const std::string& dir, bool eval);

// Why `--out DIR` cannot take a new run: a directory that is not empty (a run
// in it would be overwritten, or files mixed with the run's); "" when it can,
// also when it holds only what a run stopped while creating it left
// (unfinished_run_dir).
std::string refuse_used_run_dir(const std::string& out);

// Throws when creating the output directory `dir` (`what`: "run directory",
// "sweep directory") failed with `error`: a usage error naming the directory
// and what to do when the path the user chose cannot be a directory (a file
// in the way, no permission, a read-only file system), a runtime error for
// anything else. Returns when `error` is empty.
void check_output_directory_created(const std::filesystem::path& dir, const std::error_code& error,
                                    const std::string& what);

// Creates `out` (refused, as a UsageError, when refuse_used_run_dir says so)
// or runs/<name>/<YYYYmmdd-HHMMSS>[-N], takes its lock into `lock`, and writes
// config.yaml, config.sha256 and manifest.json (with the model.init_from
// file the session resolved, Session::init_from_file, in both: the path
// written stays in the manifest). Returns the directory.
std::string create_run_dir(const config::Config& config, const CommandArgs& args,
                           const std::string& backend_name, const std::string& init_from_file,
                           RunDirLock& lock);

// What the precision means on this run's devices when it is not what it says
// (fp16 emulated on the CPU, tf32 computing in float32 there); "" otherwise.
std::string precision_note(const config::Config& config);

// Throws, naming DIR/manifest.json and what is wrong, when a resume could not
// add its entry to the manifest there (a directory, unreadable, not a JSON
// object, "resumes" not a list); a missing one is no error. A resume checks
// it before anything in the directory changes.
void check_manifest(const std::string& dir);

// `trainer run --resume DIR`: keeps the directory; when the config differs
// from the recorded one (a longer max_steps), rewrites config.yaml and
// config.sha256 and records the change; appends the resume to manifest.json.
// Returns a line describing what changed ("" when nothing did).
std::string reopen_run_dir(const std::string& dir, const config::Config& config,
                           const CommandArgs& args);

// Whether DIR/config.yaml was edited by hand since a run wrote it: its
// sha256 is neither config.sha256's nor that of a config the manifest keeps.
bool config_edited_by_hand(const std::string& dir);

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
std::optional<RecordedBatch> recorded_batch(const std::string& dir);

// The accumulation micro_batch_size: auto chose for the run in `dir`
// (manifest.json "batch"), which a resume keeps whatever memory there is now
// (the checkpoint's steps are of that many micro-batches); nullopt when the
// run did not choose one so.
std::optional<std::int64_t> recorded_auto_accumulation(const std::string& dir);

}  // namespace trainer::train
