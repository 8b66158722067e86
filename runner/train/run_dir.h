// The run directory: where a run keeps everything it did. Created up front with
// the resolved config (re-runnable as is), its hash and a manifest (command
// line, overrides, git commit, versions, host, CPU ISA, devices, determinism
// flags, precision), and reopened by a resume. What is added to its records
// later, and read back from them, is in run_records.h.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include "runner/commands.h"
#include "runner/config/config.h"
#include "runner/train/run_lock.h"

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

// Why `--out DIR` cannot be used when it is (or is inside) a run's
// checkpoints/ folder, whose retention and resumes would take what a run or
// sweep made there for checkpoints; "" when it is not.
std::string refuse_inside_run_checkpoints(const std::string& out);

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

// Throws, naming each one and what to do, when this process may not write
// the directory `dir` or a file directly in it (its records, config.yaml,
// the manifest, summary.json, train.log): a resume rewrites them, and checks
// this before anything in the directory changes.
void check_run_files_writable(const std::string& dir);

// What to do about a run directory `dir` this process may not write: give
// it write access (unless its file system is `read_only`), or go on in a
// copy (cp -rL: what links lead to copied).
std::string unwritable_run_dir_advice(const std::string& dir, bool read_only);

// `trainer run --resume DIR`: keeps the directory; when the config differs
// from the recorded one (a longer max_steps), rewrites config.yaml and
// config.sha256 and records the change; appends the resume to manifest.json.
// Returns a line describing what changed ("" when nothing did).
std::string reopen_run_dir(const std::string& dir, const config::Config& config,
                           const CommandArgs& args);

// Whether DIR/config.yaml was edited by hand since a run wrote it: its
// sha256 is neither config.sha256's nor that of a config the manifest keeps.
bool config_edited_by_hand(const std::string& dir);

}  // namespace trainer::train
