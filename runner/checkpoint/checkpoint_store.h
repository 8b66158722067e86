// The checkpoints/ folder of a run directory. Each checkpoint is a folder
// `step-NNNNNNNN/` holding model.safetensors (the weights), state.safetensors
// (optimizer moments, and the TrainState JSON in its metadata) and SHA256SUMS.
// It is written as `<name>.tmp/`, every file fsynced, then renamed into place;
// `last` links to the newest one. Retention keeps the newest `keep_last`, the
// `keep_best` best by the checkpoint metric (among those that measured it on
// their own weights), and always the newest.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "runner/checkpoint/train_state.h"
#include "runner/graph/program.h"

namespace trainer::checkpoint {

struct RetentionPolicy {
  std::int64_t keep_last = 2;  // 0: keep all
  std::int64_t keep_best = 0;
  bool maximize = true;
  std::string metric;  // checkpoint.metric: checkpoints that recorded another one are not ranked
};

struct LoadedCheckpoint {
  std::string path;
  TrainState state;
};

// What a checkpoint of `program` takes on disk, its files' headers and block
// rounding counted: in all, and the tensors of its largest file.
struct CheckpointSize {
  std::uint64_t total = 0, largest_file = 0;
};

class CheckpointStore {
 public:
  explicit CheckpointStore(const std::string& run_dir);
  const std::string& directory() const { return dir_; }
  // Whether any checkpoint folder is here (whole or not: a resume loads one
  // of them, or stops).
  bool holds_checkpoints() const;
  // Makes the checkpoints folder if need be and writes (and removes) a folder
  // in it, as a save does: a folder the process may not write (its mode, a
  // read-only file system) is found before the first step, not at the first
  // checkpoint. Throws CheckpointError naming the folder and what to do.
  void check_writable() const;
  // The room for checkpoints of `size` on the checkpoints folder's file
  // system, counting the unfinished step-*.tmp folders the first save
  // removes as free: CheckpointError when not even one fits with 1 MiB for
  // the run's records, or when its largest file is over the process's file
  // size limit (ulimit -f): the run would fail at its first checkpoint. A
  // warning (returned; "" when none) when fewer fit than retention keeps
  // (`kept`, beyond those already there) and the one being written (0:
  // retention keeps them all, no count to check).
  std::string check_room(const CheckpointSize& size, std::int64_t kept) const;

  // Writes the program's tensors and `state` as checkpoint step-<state.step>,
  // points `last` at it and deletes what the policy no longer keeps (and the
  // unfinished step-*.tmp of a process that stopped while writing). Returns
  // its path. Once the checkpoint is in place, what fails after (`last`, an
  // old checkpoint that will not go) leaves it saved: each such problem is
  // passed to `warn`, naming the path.
  std::string save(const graph::Program& program, const TrainState& state,
                   const RetentionPolicy& policy,
                   const std::function<void(const std::string&)>& warn);

  // Loads the newest checkpoint that verifies (checksums, format, a state
  // that is consistent, with its folder's step) into `program`, its files
  // read a piece at a time. Each damaged one is reported through `warn` with
  // its path and why, renamed to <name>.bad (never replacing an earlier .bad)
  // when `set_aside_bad` (one process of a job does that: the others may
  // still be reading it), and the previous one is tried. Throws
  // CheckpointMismatch when the newest intact one does not fit the program's
  // tensors, CheckpointNotFinite when it holds a NaN or infinity,
  // RecordsChanged when the lengths of the run's record files it recorded no
  // longer end a record (an older one is not tried: it would set aside good
  // checkpoints), and CheckpointUnreadable when the system refuses to read
  // one (nothing is set aside for these), and CheckpointError when
  // checkpoints exist (or were set aside) but none loads, or when the checkpoints folder is not a
  // directory, or is missing although the run directory records a
  // checkpoint (summary.json, train.log). nullopt: no checkpoint was ever
  // written.
  std::optional<LoadedCheckpoint> load_newest(graph::Program& program, bool set_aside_bad,
                                              const std::function<void(const std::string&)>& warn);

  // The folder of the checkpoint `which` names: "last" (the newest), "best"
  // (the best value of `metric` the checkpoints recorded, the largest when
  // `maximize`), a folder name here ("step-00000120"), or a path to a
  // checkpoint folder. Throws CheckpointError, listing what there is, when
  // nothing matches, and CheckpointUnreadable when the system refuses to let
  // this process look at the folder, a checkpoint in it, or (for "best") a
  // checkpoint's recorded metric.
  std::string find(const std::string& which, const std::string& metric, bool maximize) const;

  // Calls `read` with the folder find() names and returns that folder. A run
  // still training prunes its older checkpoints as it goes: when `which` is
  // "last" or "best" and, by the time `read` fails, the folder is gone or
  // `which` names another one (a folder being pruned loses its files first),
  // `read` is called again with the folder `which` names now. Any other
  // failure, or one of a checkpoint named outright, is `read`'s own error.
  std::string read(const std::string& which, const std::string& metric, bool maximize,
                   const std::function<void(const std::string& path)>& read) const;

 private:
  // Whether the run went on past checkpoint `path` since find(which, ...)
  // named it: the folder is gone, or `which` names another one now.
  bool run_moved_on(const std::filesystem::path& path, const std::string& which,
                    const std::string& metric, bool maximize) const;
  std::string dir_;
  // Checkpoints retention kept because their metric could not be read or
  // they hold files no checkpoint writes, each warned of once.
  std::set<std::string> kept_unread_;
};

// Throws CheckpointError when the SHA256SUMS beside `file` (a checkpoint's
// model.safetensors or model_ema.safetensors, given to model.init_from) lists
// it with another checksum; nothing when no SHA256SUMS there lists it.
void check_listed_checksum(const std::string& file);

// Checks one checkpoint folder and returns its state without touching a
// program (throws CheckpointError naming the file and what is wrong).
TrainState verify_checkpoint(const std::string& path);

// Verifies checkpoint folder `path` and loads its weights (not the optimizer
// state) into `program`, strictly; returns its state. `averaged`: the
// averaged weights of a run with train.ema_decay instead.
TrainState load_checkpoint_weights(graph::Program& program, const std::string& path,
                                   bool averaged = false);

// "step-00000120".
std::string checkpoint_name(std::int64_t step);
// The step a checkpoint folder's name gives ("step-00000120": 120); nullopt
// for another name, or digits beyond what int64 holds.
std::optional<std::int64_t> checkpoint_step(const std::string& name);

// What a checkpoint of `program` will take (see CheckpointSize).
CheckpointSize checkpoint_size(const graph::Program& program);

}  // namespace trainer::checkpoint
