// Writing, verifying, loading and pruning checkpoints.
#include "runner/checkpoint/checkpoint_store.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>

#include "runner/checkpoint/durable_file.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/checkpoint/weights.h"
#include "runner/config/diagnostics.h"
#include "runner/json_text.h"
#include "runner/train/sha256.h"

namespace trainer::checkpoint {
namespace fs = std::filesystem;
namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "state.safetensors";
constexpr const char* kAveragedModelFile = "model_ema.safetensors";
constexpr const char* kSumsFile = "SHA256SUMS";
constexpr const char* kStateKey = "trainer_state";

// Complete checkpoints (step-N folders), newest first. A folder whose N is no
// step a run can reach (more digits than int64 holds) is not one. A
// step-N.old without its step-N is one: the checkpoint of step N, which a
// process stopped while it replaced it (between two renames) left so. A
// step-N that is a link to a folder (a checkpoint moved to another disk and
// linked back) is one too; pruning it removes the link.
std::vector<std::pair<std::int64_t, fs::path>> list_checkpoints(const fs::path& dir) {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    // An entry that cannot be looked at (a link that loops) is no checkpoint.
    std::error_code status;
    if (!entry.is_directory(status) || name.rfind("step-", 0) != 0) continue;
    if (name.ends_with(".old")) {
      name.resize(name.size() - 4);
      if (fs::is_directory(fs::symlink_status(dir / name, status))) continue;
    }
    if (const auto step = checkpoint_step(name)) out.emplace_back(*step, entry.path());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

// The first entry of checkpoint folder `dir` that no checkpoint writes (a
// user's notes, another run put there), quoted; "" when it holds only a
// checkpoint's files. A link to a folder (a checkpoint moved to another
// disk) is looked at only as the link, which is all pruning removes.
std::string foreign_entry(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(dir, ec))) return "";
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours =
        name == kModelFile || name == kStateFile || name == kAveragedModelFile || name == kSumsFile;
    if (!ours) return "'" + name + "'";
  }
  return "";
}

// Renames a damaged checkpoint to <name>.bad (or .bad-2, ...: an earlier
// one is never replaced) so that a new one may take its name. Returns the new
// path, or "" when it could not be moved.
std::string set_aside(const fs::path& path) {
  std::error_code ec;
  fs::path bad = path.string() + ".bad";
  for (int n = 2; fs::exists(bad, ec); ++n) bad = path.string() + ".bad-" + std::to_string(n);
  fs::rename(path, bad, ec);
  return ec ? "" : bad.string();
}

// Whether damaged checkpoints were set aside here before.
bool holds_set_aside(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find(".bad") != std::string::npos) return true;
  }
  return false;
}

// The checksums SHA256SUMS in `dir` lists, by file name ("HEX  NAME", or
// "HEX *NAME" as `sha256sum -b` writes it).
std::map<std::string, std::string> listed_checksums(const fs::path& dir) {
  std::istringstream lines(read_file_bytes((dir / kSumsFile).string()));
  std::string hex, name;
  std::map<std::string, std::string> expected;
  while (lines >> hex >> name) expected[name.starts_with('*') ? name.substr(1) : name] = hex;
  return expected;
}

// The file at `path`, open, once its SHA-256 (read a piece at a time from the
// descriptor it is then read from) is `expected`; CheckpointError otherwise.
PieceReader verified_file(const fs::path& path, std::string expected) {
  // As sha256sum -c reads it: either case.
  for (char& c : expected) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  PieceReader file(path.string());
  train::Sha256 sha;
  file.read(0, file.size(), kCheckpointPieceBytes, "the file",
            [&](std::string_view piece, std::uint64_t) { sha.update(piece); });
  const std::string actual = sha.hex();
  if (actual == expected) return file;
  const bool listed_is_hash = expected.size() == actual.size() &&
                              expected.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!listed_is_hash)
    throw CheckpointError(path.parent_path().string() + "/" + kSumsFile + ": the checksum of " +
                          path.filename().string() + " is not 64 hex digits: the " + kSumsFile +
                          " file is damaged (the checkpoint cannot be verified)");
  // Both shown far enough to differ: 16 digits, or to 8 past the first that differs.
  const std::size_t differ = static_cast<std::size_t>(
      std::mismatch(actual.begin(), actual.end(), expected.begin()).first - actual.begin());
  const std::size_t shown = std::max<std::size_t>(16, differ + 8);
  const auto cut = [&](const std::string& hex) {
    return shown >= hex.size() ? hex : hex.substr(0, shown) + "...";
  };
  throw CheckpointError(file.path() + ": checksum mismatch (" + std::to_string(file.size()) +
                        " bytes, SHA-256 " + cut(actual) + ", expected " + cut(expected) +
                        " by the " + kSumsFile +
                        " beside it): the file (or that line of it) is truncated or corrupted");
}

// Verifies SHA256SUMS and returns the model and state files, open (their
// headers read).
std::pair<SafetensorsFile, SafetensorsFile> read_verified(const fs::path& dir) {
  const auto expected = listed_checksums(dir);
  for (const char* file : {kModelFile, kStateFile})
    if (!expected.count(file))
      throw CheckpointError((dir / kSumsFile).string() + ": no checksum for " + std::string(file));
  SafetensorsFile model(verified_file(dir / kModelFile, expected.at(kModelFile)));
  return {std::move(model),
          SafetensorsFile(verified_file(dir / kStateFile, expected.at(kStateFile)))};
}

// The step a checkpoint folder's name gives ("step-00000120": 120), or
// nullopt for a folder named otherwise (one given to `eval` by its path).
std::optional<std::int64_t> step_of_folder(fs::path dir) {
  if (dir.filename().empty()) dir = dir.parent_path();  // "step-00000120/"
  return checkpoint_step(dir.filename().string());
}

TrainState state_of(const Safetensors& state_file, const std::string& path) {
  auto it = state_file.metadata.find(kStateKey);
  if (it == state_file.metadata.end())
    throw CheckpointError(path + ": no " + std::string(kStateKey) + " in __metadata__");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::parse_error& e) {
    throw CheckpointError(path + ": " + kStateKey + " is not valid JSON (byte " +
                          std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception& e) {  // a number beyond a double's range
    const std::string what = e.what();
    throw CheckpointError(path + ": " + kStateKey + " holds what no JSON reader here can: " +
                          what.substr(what.find("] ") + 2));
  }
  return TrainState::from_json(j, path);
}

// The state of checkpoint folder `dir`, whose name says the step it was
// written at: a state of another step was edited (its checksum recomputed).
TrainState checked_state_of(const Safetensors& state_file, const fs::path& dir) {
  const std::string path = (dir / kStateFile).string();
  TrainState state = state_of(state_file, path);
  if (const auto step = step_of_folder(dir); step && *step != state.step)
    throw CheckpointError(path + ": state 'step' is " + std::to_string(state.step) +
                          ", but the checkpoint's folder is named for step " +
                          std::to_string(*step));
  return state;
}

// Throws, naming the state file and `key`, when `bytes` (the length of
// JSON-lines file `path` that the state recorded) falls inside a record (the
// byte before it is no line end): the resume would cut that record in two. A
// file shorter than that lost records since, which the resume reports and
// mends (it keeps the whole records): no fault of the checkpoint.
void check_line_boundary(const fs::path& path, std::uint64_t bytes, const char* key,
                         const std::string& state_path) {
  std::error_code ec;
  if (bytes == 0 || !fs::is_regular_file(path, ec)) return;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec || size < bytes) return;
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(bytes - 1));
  char before = '\n';
  if (!in.get(before) || before == '\n') return;  // unreadable: the resume's own error
  throw RecordsChanged(state_path + ": state '" + key + "' is " + std::to_string(bytes) +
                       ", inside a record of " + path.string() + " (" + std::to_string(size) +
                       " bytes; the byte before it is no line end)");
}

// The lengths of metrics.jsonl and timing.jsonl the state recorded each end
// a record, as they did when it was taken. (The TensorBoard events file is
// not asked: garbage there would make intact checkpoints unusable, and the
// resume cuts it back as it is.)
void check_record_lengths(const TrainState& state, const fs::path& run_dir,
                          const std::string& state_path) {
  check_line_boundary(run_dir / "metrics.jsonl", state.metrics_bytes, "metrics_bytes", state_path);
  check_line_boundary(run_dir / "timing.jsonl", state.timing_bytes, "timing_bytes", state_path);
}

// What in run directory `run_dir` says that it wrote a checkpoint: its
// summary.json naming one, or a line of train.log reporting one; "" when
// nothing does (a run stopped before its first checkpoint).
std::string checkpoint_on_record(const fs::path& run_dir) {
  std::error_code ec;
  if (fs::is_regular_file(run_dir / "summary.json", ec)) {
    std::ifstream in(run_dir / "summary.json");
    const nlohmann::json summary = nlohmann::json::parse(in, nullptr, false);
    if (summary.is_object() && summary.contains("last_checkpoint") &&
        summary["last_checkpoint"].is_string() &&
        !summary["last_checkpoint"].get_ref<const std::string&>().empty())
      return (run_dir / "summary.json").string() + " names checkpoint " +
             summary["last_checkpoint"].get<std::string>();
  }
  if (fs::is_regular_file(run_dir / "train.log", ec)) {
    std::ifstream in(run_dir / "train.log");
    for (std::string line; std::getline(in, line);)
      if (const auto at = line.find("] checkpoint ");
          at != std::string::npos && line.find("/checkpoints/step-", at) != std::string::npos)
        return (run_dir / "train.log").string() + " reports one (" + line.substr(at + 2) + ")";
  }
  return "";
}

// Throws CheckpointUnreadable for a checkpoints folder this process may not
// look at or list (its checkpoints would seem to be none).
void refuse_unlistable(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::exists(status) && system_refused(ec))
    throw CheckpointUnreadable(dir.string() + ": cannot look at it: " + ec.message());
  if (!fs::is_directory(status)) return;
  const fs::directory_iterator listing(dir, ec);
  if (ec)
    throw CheckpointUnreadable(dir.string() + ": cannot list the checkpoints: " + ec.message());
}

// Refuses, before anything is read or moved, a checkpoints folder that
// cannot hold the run's checkpoints: not a directory, not readable, or gone
// from a run that wrote some (starting over would replace its records).
void check_checkpoint_folder(const fs::path& dir) {
  const std::string fix =
      "put the run's checkpoints back there, or start again in a new directory (trainer run " +
      (dir.parent_path() / "config.yaml").string() + " --out NEW_DIR)";
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(dir, ec);
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::none)
    throw CheckpointUnreadable(dir.string() + ": cannot look at it: " + ec.message());
  if (fs::is_directory(status)) {
    refuse_unlistable(dir);
    // A checkpoint moved to another disk and linked back, that disk not there
    // now, newer than every checkpoint there is: resuming from an older one
    // would train its steps again and replace the link. (A link that loops is
    // passed over, as damage.)
    const auto listed = list_checkpoints(dir);
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      std::error_code looked;
      if (!entry.is_symlink(looked)) continue;
      const std::optional<std::int64_t> step = step_of_folder(entry.path());
      if (!step || (!listed.empty() && listed.front().first >= *step)) continue;
      if (fs::status(entry.path(), looked).type() == fs::file_type::not_found)
        throw CheckpointUnreadable(
            entry.path().string() + " is a link to " +
            fs::read_symlink(entry.path(), looked).string() +
            ", which is missing (a disk not mounted?): mount it, or remove the link to resume "
            "from the checkpoint before it");
    }
    if (!list_checkpoints(dir).empty() || holds_set_aside(dir)) return;
    if (const std::string written = checkpoint_on_record(dir.parent_path()); !written.empty())
      throw CheckpointError(dir.string() + " holds no checkpoint, but the run wrote checkpoints (" +
                            written +
                            "): resuming would train it again from the beginning and replace "
                            "its records; " +
                            fix);
    return;
  }
  if (fs::exists(status))
    throw CheckpointError(dir.string() +
                          " is not a directory: the run's checkpoints cannot be read there, nor "
                          "new ones written; " +
                          fix);
  if (fs::is_symlink(link))
    throw CheckpointError(dir.string() + " is a link to " + fs::read_symlink(dir, ec).string() +
                          ", which is missing; " + fix);
  if (const std::string written = checkpoint_on_record(dir.parent_path()); !written.empty())
    throw CheckpointError(dir.string() + " is missing, but the run wrote checkpoints (" + written +
                          "): resuming would train it again from the beginning and replace its "
                          "records; " +
                          fix);
}

// The training state the checkpoint in `dir` recorded, its header alone
// read; null for a damaged file. CheckpointUnreadable when the system refuses
// to read it.
nlohmann::json recorded_state(const fs::path& dir) {
  try {
    const auto meta = read_safetensors_metadata((dir / kStateFile).string());
    const auto it = meta.find(kStateKey);
    if (it == meta.end()) return nullptr;
    const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
    return j.is_object() ? j : nullptr;
  } catch (const CheckpointUnreadable&) {
    throw;
  } catch (const std::exception&) {
    return nullptr;
  }
}

// The value of `metric` the checkpoint in `dir` recorded. A checkpoint of an
// earlier version recorded no name: its value counts as the metric asked for.
// Nothing for a damaged file; CheckpointUnreadable when the system refuses to
// read it (its value is not known, not absent).
std::optional<double> metric_of(const fs::path& dir, const std::string& metric) {
  const nlohmann::json j = recorded_state(dir);
  if (j.is_null()) return std::nullopt;
  const bool same_metric =
      metric.empty() || !j.contains("metric_name") || j["metric_name"] == nlohmann::json(metric);
  if (same_metric && j.contains("metric") && j["metric"].is_number())
    return j["metric"].get<double>();
  return std::nullopt;
}

// Whether the checkpoint in `dir` was saved off the schedule (TrainState::
// unscheduled); false when its state cannot be read (it is then kept).
bool unscheduled_of(const fs::path& dir) {
  try {
    const nlohmann::json j = recorded_state(dir);
    return j.is_object() && j.contains("unscheduled") && j["unscheduled"] == true;
  } catch (const CheckpointUnreadable&) {
    return false;
  }
}

// Deletes what `policy` no longer keeps. keep_last counts the checkpoints of
// the schedule; one saved off it (a stop signal's) is kept only while it is
// the newest, so that an interrupted run keeps what a straight one does. A
// checkpoint whose metric cannot be read, or whose folder holds files no
// checkpoint writes, is kept, and warned of once (its path goes into
// `kept_unread`).
void apply_retention(const fs::path& dir, const RetentionPolicy& policy,
                     const std::function<void(const std::string&)>& warn,
                     std::set<std::string>& kept_unread) {
  const auto all = list_checkpoints(dir);  // newest first
  if (all.empty()) return;
  std::vector<bool> keep(all.size(), policy.keep_last == 0);
  keep[0] = true;
  std::int64_t scheduled = 0;
  for (std::size_t i = 0; i < all.size() && scheduled < policy.keep_last; ++i) {
    if (i > 0 && unscheduled_of(all[i].second)) continue;
    keep[i] = true;
    if (i > 0 || !unscheduled_of(all[i].second)) ++scheduled;
  }
  if (policy.keep_best > 0) {
    std::vector<std::pair<double, std::size_t>> ranked;
    for (std::size_t i = 0; i < all.size(); ++i) {
      std::optional<double> m;
      try {
        m = metric_of(all[i].second, policy.metric);
      } catch (const CheckpointUnreadable& e) {
        keep[i] = true;  // it may be among the best: never deleted unread
        if (kept_unread.insert(all[i].second.string()).second)
          warn("checkpoint " + all[i].second.string() +
               " is kept: checkpoint.keep_best cannot read its metric (" + e.what() + ")");
      }
      if (m && std::isfinite(*m)) ranked.emplace_back(*m, i);
    }
    std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
      return policy.maximize ? a.first > b.first : a.first < b.first;
    });
    for (std::size_t r = 0; r < ranked.size() && static_cast<std::int64_t>(r) < policy.keep_best;
         ++r)
      keep[ranked[r].second] = true;
  }
  bool removed = false;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (keep[i]) continue;
    if (const std::string other = foreign_entry(all[i].second); !other.empty()) {
      if (kept_unread.insert(all[i].second.string()).second)
        warn(all[i].second.string() + " is kept: it holds " + other +
             ", which no checkpoint writes (retention deletes only checkpoints); move it out "
             "of the run's checkpoints/");
      continue;
    }
    std::error_code ec;
    fs::remove_all(all[i].second, ec);
    if (ec)  // a resume sets a torn one aside, by its checksums
      warn("could not delete checkpoint " + all[i].second.string() +
           " that checkpoint.keep_last / keep_best no longer keep: " + ec.message() +
           "; delete it yourself");
    removed = true;
  }
  if (removed) fsync_directory(dir.string());
}

// What a process stopped while writing a checkpoint left: step-*.tmp, and
// step-N.old once step-N replaced it. Without step-N, step-N.old is the
// checkpoint of that step, and gets its name back; beside a step-N that is
// no checkpoint folder it is kept, unless `saving` (step-N itself, whose
// save replaces both). The run directory is this process's alone.
void remove_unfinished(const fs::path& dir, const std::string& saving,
                       const std::function<void(const std::string&)>& warn) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !entry.is_directory(ec)) continue;
    const fs::path replacement = dir / name.substr(0, name.size() - 4);
    const bool old = name.ends_with(".old");
    const fs::file_status replaced_by = fs::symlink_status(replacement, ec);
    if (old && !fs::exists(replaced_by)) {
      std::error_code renamed;
      fs::rename(entry.path(), replacement, renamed);
      if (renamed)
        warn("could not rename " + entry.path().string() + " back to " + replacement.string() +
             ": " + renamed.message());
      continue;
    }
    if (old && !fs::is_directory(replaced_by) && replacement.filename() != saving) {
      warn(entry.path().string() + " is kept: it is step " + name.substr(5, name.size() - 9) +
           "'s checkpoint, and " + replacement.string() +
           " is no checkpoint folder; move that aside and rename it back");
      continue;
    }
    if (!name.ends_with(".tmp") && !old) continue;
    std::error_code removed;
    fs::remove_all(entry.path(), removed);
    if (removed)
      warn("could not delete " + entry.path().string() +
           ", an unfinished checkpoint: " + removed.message());
  }
}

// The safetensors dtype of a program tensor's element type: its name in
// capitals ("f32": "F32", "bf16": "BF16").
std::string safetensors_dtype_of(DType dtype) {
  std::string name(dtype_name(dtype));
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

// Writes the program's `tensors` to the safetensors file `path` (synced),
// copied from the device a piece of at most kCheckpointPieceBytes at a time, and
// returns the file's SHA-256: a checkpoint takes that much memory beyond
// training's, whatever the model's size.
std::string write_safetensors(const std::string& path,
                              const std::map<std::string, std::string>& metadata,
                              const std::vector<NamedTensor>& tensors, Backend& backend) {
  std::vector<TensorLayout> layout;
  std::size_t largest = 0;
  for (const NamedTensor& t : tensors) {
    layout.push_back(
        {t.name, safetensors_dtype_of(t.tensor.dtype), t.tensor.shape, t.tensor.bytes()});
    largest = std::max(largest, t.tensor.bytes());
  }
  SyncedFileWriter file(path);
  train::Sha256 sha;
  const auto put = [&](std::string_view piece) {
    file.append(piece);
    sha.update(piece);
  };
  put(encode_safetensors_header(metadata, layout));
  std::string staging(std::min(largest, kCheckpointPieceBytes), '\0');
  for (const NamedTensor& t : tensors) {
    const auto* data = static_cast<const char*>(t.tensor.data);
    for (std::size_t done = 0; done < t.tensor.bytes(); done += staging.size()) {
      const std::size_t n = std::min(staging.size(), t.tensor.bytes() - done);
      backend.copy_to_host(staging.data(), data + done, n);
      put({staging.data(), n});
    }
  }
  file.finish();
  return sha.hex();
}

}  // namespace

namespace {

// Points `last` in checkpoints folder `dir` at checkpoint `name`. A `last`
// that is a folder holding a checkpoint is a stale copy (the run directory
// was copied with links followed, as cp -rL or rsync -L copy): it is removed,
// with a note. Any other folder there is the user's: an error, with the fix.
void point_last_at(const fs::path& dir, const std::string& name,
                   const std::function<void(const std::string&)>& warn) {
  const fs::path last = dir / "last";
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(last, ec))) {
    if (!fs::exists(last / kSumsFile, ec))
      throw std::runtime_error(last.string() +
                               " is a folder that holds no checkpoint: move it away, so that "
                               "`last` can be the link to the newest checkpoint");
    fs::remove_all(last, ec);
    if (ec)
      throw std::runtime_error(last.string() + ", a copy of a checkpoint, cannot be removed (" +
                               ec.message() + "): remove it, so that `last` can be the link");
    warn(last.string() +
         " was a copy of a checkpoint, not a link (the run directory was copied with links "
         "followed, as cp -rL or rsync -L copy): it is the link to " +
         name + " again");
  }
  replace_symlink(last.string(), name);
}

}  // namespace

std::string checkpoint_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

CheckpointStore::CheckpointStore(const std::string& run_dir)
    : dir_((fs::path(run_dir) / "checkpoints").string()) {}

bool CheckpointStore::holds_checkpoints() const {
  return !list_checkpoints(dir_).empty();
}

namespace {

std::string mib_text(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// The bytes under `path` (a folder an earlier process left), 0 when unknown.
std::uint64_t bytes_under(const fs::path& path) {
  std::uint64_t bytes = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size;
    if (it->is_regular_file(size)) bytes += it->file_size(size);
  }
  return bytes;
}

}  // namespace

void CheckpointStore::check_writable() const {
  const auto refuse = [&](const std::error_code& ec) {
    // Where the folder really is, when a link leads there.
    std::error_code resolved;
    const fs::path real = fs::weakly_canonical(dir_, resolved);
    const bool linked = !resolved && real != fs::absolute(dir_, resolved).lexically_normal();
    const std::string where = dir_ + (linked ? " (a link to " + real.string() + ")" : "");
    const std::string copy =
        "; a resume can go on in a copy of the run directory on a writable disk: cp -rL RUN "
        "NEW (-L copies what links lead to), then trainer run --resume NEW";
    throw CheckpointError(
        "checkpoints cannot be written in " + where + ": " + ec.message() +
        " (the run would train and then fail saving its first checkpoint)" +
        (ec == std::errc::read_only_file_system
             ? "; the file system there is mounted read-only" + copy
             : "; make it writable (chmod -R u+w " + (linked ? real.string() : dir_) + ")" + copy));
  };
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) refuse(ec);
  const fs::path probe = fs::path(dir_) / (".writable." + std::to_string(::getpid()));
  fs::create_directory(probe, ec);
  if (ec) refuse(ec);
  fs::remove(probe, ec);
}

std::string CheckpointStore::check_room(const CheckpointSize& size, std::int64_t kept) const {
  if (size.total == 0) return "";
  struct rlimit limit {};
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      size.largest_file > limit.rlim_cur)
    throw CheckpointError("a checkpoint of this model writes a file of " +
                          mib_text(size.largest_file) +
                          ", over this process's file size limit of " + mib_text(limit.rlim_cur) +
                          " (ulimit -f): the run would train and then fail saving its first "
                          "checkpoint; raise the limit (ulimit -f unlimited) and run again");
  std::error_code ec;
  const fs::space_info space = fs::space(dir_, ec);
  if (ec) return "";  // a file system that does not say: nothing to check
  // The unfinished folders a stopped process left go at the first save.
  std::uint64_t unfinished = 0;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code status;
    if (name.rfind("step-", 0) == 0 && name.ends_with(".tmp") && entry.is_directory(status))
      unfinished += bytes_under(entry.path());
  }
  const std::uint64_t available = space.available + unfinished;
  const std::string free_text = mib_text(available) + " free" +
                                (unfinished > 0 ? " (" + mib_text(unfinished) +
                                                      " of it in unfinished step-*.tmp folders "
                                                      "the first save removes)"
                                                : "");
  constexpr std::uint64_t kRecords = 1 << 20;  // the run's records beside it
  if (available < size.total + kRecords)
    throw CheckpointError("a checkpoint of this model takes " + mib_text(size.total) +
                          " and the file system of " + dir_ + " has " + free_text +
                          ": the run would train and then fail saving its first checkpoint; free "
                          "some space there, or give the run a directory on another disk");
  if (kept <= 0) return "";
  // The ones already there count towards what retention keeps.
  const auto there = static_cast<std::int64_t>(list_checkpoints(dir_).size());
  const std::int64_t more = std::max<std::int64_t>(1, kept + 1 - there);
  const std::uint64_t fit = (available - kRecords) / size.total;
  if (fit >= static_cast<std::uint64_t>(more)) return "";
  return "the file system of " + dir_ + " has room for " + std::to_string(fit) +
         " more checkpoint" + (fit == 1 ? "" : "s") + " of " + mib_text(size.total) + " (" +
         free_text + "), and this run keeps up to " + std::to_string(kept) +
         " (checkpoint.keep_last + keep_best; " + std::to_string(there) +
         " there now) with one more while it writes: a later checkpoint would fail; free some "
         "space there, or lower checkpoint.keep_last";
}

std::string CheckpointStore::save(const graph::Program& program, const TrainState& state,
                                  const RetentionPolicy& policy,
                                  const std::function<void(const std::string&)>& warn) {
  fs::create_directories(dir_);
  const std::string name = checkpoint_name(state.step);
  remove_unfinished(dir_, name, warn);
  const fs::path final_path = fs::path(dir_) / name;
  const fs::path tmp = fs::path(dir_) / (name + ".tmp");
  fs::remove_all(tmp);
  fs::create_directory(tmp);

  try {
    const auto write = [&](const char* name, const std::map<std::string, std::string>& metadata,
                           const std::vector<NamedTensor>& tensors) {
      return write_safetensors((tmp / name).string(), metadata, tensors, program.backend()) + "  " +
             name + "\n";
    };
    std::string sums = write(kModelFile, {{"format", "pt"}}, parameter_tensors(program));
    sums += write(kStateFile, {{kStateKey, json_text(state.to_json())}},
                  optimizer_state_tensors(program));
    // The averaged weights on their own, for other tools (a resume reads them
    // from the state file).
    if (const auto averaged = averaged_parameter_tensors(program); !averaged.empty())
      sums += write(kAveragedModelFile, {{"format", "pt"}}, averaged);
    write_file_synced((tmp / kSumsFile).string(), sums);
    fsync_directory(tmp.string());
  } catch (...) {
    // A full disk: give back what the unfinished one holds, so a resume can write.
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }

  // The same step written twice (an epoch end that is also the last step): replace it.
  const fs::path old = fs::path(dir_) / (name + ".old");
  fs::remove_all(old);
  // (Not followed: a link there, even one that loops, is replaced as it is.)
  std::error_code looked;
  if (fs::exists(fs::symlink_status(final_path, looked))) fs::rename(final_path, old);
  fs::rename(tmp, final_path);
  fsync_directory(dir_);
  // Saved: nothing below may undo that (a resume finds the newest itself).
  std::error_code ec;
  fs::remove_all(old, ec);
  try {
    point_last_at(dir_, name, warn);
  } catch (const std::exception& e) {
    std::error_code left;
    fs::remove(fs::path(dir_) / "last.tmp", left);
    warn(std::string("checkpoint ") + final_path.string() + " is saved, but " + e.what() +
         "; a resume finds the newest checkpoint without it");
  }
  apply_retention(dir_, policy, warn, kept_unread_);
  return final_path.string();
}

std::optional<std::int64_t> checkpoint_step(const std::string& name) {
  if (name.rfind("step-", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  std::int64_t step = 0;
  if (std::from_chars(digits.data(), digits.data() + digits.size(), step).ec != std::errc())
    return std::nullopt;
  return step;
}

CheckpointSize checkpoint_size(const graph::Program& program) {
  CheckpointSize size;
  // A file's header names each tensor, its dtype, shape and offsets (under
  // 256 bytes each), then its metadata; each file ends on a 4 KiB block. The
  // largest file counts its tensors alone: a limit below that fails for certain.
  const auto add_file = [&](const std::vector<NamedTensor>& tensors, std::uint64_t metadata) {
    if (tensors.empty()) return;
    std::uint64_t bytes = 0;
    for (const NamedTensor& t : tensors) bytes += t.tensor.bytes();
    size.largest_file = std::max(size.largest_file, bytes);
    size.total += (bytes + 8 + 256 * tensors.size() + metadata + 4095) / 4096 * 4096;
  };
  add_file(parameter_tensors(program), 64);
  add_file(optimizer_state_tensors(program), 16 * 1024);  // the training state's JSON
  add_file(averaged_parameter_tensors(program), 64);
  size.total += 4096;  // SHA256SUMS
  return size;
}

TrainState load_checkpoint_weights(graph::Program& program, const std::string& path,
                                   bool averaged) {
  const auto [model, state_file] = read_verified(path);
  const std::string state_path = (fs::path(path) / kStateFile).string();
  TrainState state = checked_state_of(state_file.contents(), path);
  if (averaged)
    load_averaged_parameters(program, state_file, state_path);
  else
    load_parameters(program, model, (fs::path(path) / kModelFile).string(), true);
  model.check_unchanged();  // what was loaded is what was verified
  state_file.check_unchanged();
  return state;
}

namespace {

// TRAINER_INJECT_LOAD_DELAY (seconds): a test hook standing in for a slow
// disk between a checkpoint's checksums and the copy of its values, the
// moment a file written under a resume would go unseen.
void inject_load_delay(const std::function<void(const std::string&)>& warn) {
  const char* text = std::getenv("TRAINER_INJECT_LOAD_DELAY");
  const double seconds = text ? std::atof(text) : 0.0;
  if (!(seconds > 0)) return;
  warn("TRAINER_INJECT_LOAD_DELAY: copying the checkpoint's values " + std::string(text) +
       " s late");
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// Whether `path` is a checkpoint folder (a directory holding SHA256SUMS); a
// path this process may not look at, or into, is unreadable, not "no
// checkpoint" (when `refusal_matters`; else it is no match).
bool is_checkpoint_folder(const fs::path& path, bool refusal_matters) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status) && system_refused(ec)) {
    if (!refusal_matters) return false;
    throw CheckpointUnreadable(path.string() + ": cannot be looked at: " + ec.message());
  }
  if (!fs::is_directory(status)) return false;
  const bool holds = fs::exists(path / kSumsFile, ec);
  if (system_refused(ec) && refusal_matters)
    throw CheckpointUnreadable(path.string() + ": cannot look inside: " + ec.message());
  return holds;
}

}  // namespace

std::string CheckpointStore::find(const std::string& which, const std::string& metric,
                                  bool maximize) const {
  refuse_unlistable(dir_);
  const auto all = list_checkpoints(dir_);  // newest first
  std::vector<std::string> listed;
  for (const auto& [step, path] : all) listed.push_back(path.filename().string());
  const std::string names = config::join(listed);
  const std::string here =
      all.empty() ? dir_ + " holds no checkpoint" : dir_ + " holds " + names + " (newest first)";
  if (which == "last") {
    if (all.empty()) throw CheckpointError(here);
    return all.front().second.string();
  }
  if (which == "best") {
    std::optional<std::pair<double, fs::path>> best;
    for (const auto& [step, path] : all)
      if (const auto m = metric_of(path, metric); m && std::isfinite(*m))
        if (!best || (maximize ? *m > best->first : *m < best->first)) best.emplace(*m, path);
    if (!best)
      throw CheckpointError("no checkpoint recorded a finite " + metric +
                            " of its own weights: " + here + "; name one, or use last");
    return best->second.string();
  }
  // A name under checkpoints/ first, then a path of the user's: there, a
  // folder on the way the user may not search (the current one) only
  // means it is not that.
  if (is_checkpoint_folder(fs::path(dir_) / which, true)) return (fs::path(dir_) / which).string();
  if (is_checkpoint_folder(which, which.find('/') != std::string::npos)) return which;
  std::error_code ec;  // a path that cannot be looked at (a link that loops) names nothing
  for (const fs::path& candidate : {fs::path(dir_) / which, fs::path(which)})
    if (fs::is_regular_file(candidate, ec) &&
        fs::exists(fs::absolute(candidate, ec).parent_path() / kSumsFile, ec)) {
      const std::string folder = fs::absolute(candidate, ec).parent_path().string();
      throw CheckpointError("'" + which + "' is a file inside the checkpoint folder " + folder +
                            "; give the folder: " + folder);
    }
  // Something is there, but not a checkpoint of this trainer's (weights from elsewhere).
  if (fs::exists(which, ec))
    throw CheckpointError(
        "'" + which + "' is " + (fs::is_directory(which, ec) ? "a folder" : "a file") +
        " but no checkpoint: one is a folder of model.safetensors, state.safetensors and " +
        kSumsFile +
        " that a run wrote; weights alone are evaluated from their file (--checkpoint "
        "FILE.safetensors)");
  // A path (a weights file's, a folder's) that is not there is said so first.
  if (which.find('/') != std::string::npos || which.ends_with(".safetensors"))
    throw CheckpointError("no such file or folder '" + which +
                          "' (nor a checkpoint of that name: " + here + ")");
  throw CheckpointError("no checkpoint '" + which + "': " + here +
                        "; use last, best, one of those names or a checkpoint folder's path");
}

bool CheckpointStore::run_moved_on(const fs::path& path, const std::string& which,
                                   const std::string& metric, bool maximize) const {
  std::error_code error;
  if (!fs::exists(path, error) && !error) return true;
  // Pruning removes a folder's files before the folder itself.
  try {
    return find(which, metric, maximize) != path;
  } catch (const std::exception&) {
    return false;  // the error being reported is the read's
  }
}

std::string CheckpointStore::read(const std::string& which, const std::string& metric,
                                  bool maximize,
                                  const std::function<void(const std::string&)>& read) const {
  const bool follows_the_run = which == "last" || which == "best";
  // Each retry follows a checkpoint the run deleted after a newer one was
  // written: a few in a row mean the run outpaces this reader, not a race.
  constexpr int kAttempts = 8;
  for (int attempt = 1;; ++attempt) {
    const std::string path = find(which, metric, maximize);
    try {
      read(path);
      return path;
    } catch (...) {
      if (!follows_the_run || attempt == kAttempts || !run_moved_on(path, which, metric, maximize))
        throw;
    }
  }
}

void check_listed_checksum(const std::string& file) {
  const fs::path path(file);
  std::error_code ec;
  if (!fs::is_regular_file(path.parent_path() / kSumsFile, ec)) return;
  const auto expected = listed_checksums(path.parent_path());
  if (const auto it = expected.find(path.filename().string()); it != expected.end())
    verified_file(path, it->second);
}

TrainState verify_checkpoint(const std::string& path) {
  const auto [model, state] = read_verified(path);
  (void)model;
  return checked_state_of(state.contents(), path);
}

std::optional<LoadedCheckpoint> CheckpointStore::load_newest(
    graph::Program& program, bool set_aside_bad,
    const std::function<void(const std::string&)>& warn) {
  check_checkpoint_folder(dir_);
  const auto all = list_checkpoints(dir_);
  const auto unusable = [&](const fs::path& path, const std::string& why) {
    const std::string moved = set_aside_bad ? set_aside(path) : "";
    warn("checkpoint " + path.string() + " is unusable: " + why +
         (moved.empty() ? "" : "; moved to " + moved) + "; trying the previous one");
  };
  for (const auto& [step, path] : all) {
    try {
      const auto [model, state_file] = read_verified(path);
      TrainState state = checked_state_of(state_file.contents(), path);
      check_record_lengths(state, fs::path(dir_).parent_path(), (path / kStateFile).string());
      inject_load_delay(warn);
      load_parameters(program, model, (path / kModelFile).string(), true);
      load_optimizer_state(program, state_file, (path / kStateFile).string());
      model.check_unchanged();  // what was loaded is what was verified
      state_file.check_unchanged();
      return LoadedCheckpoint{path.string(), std::move(state)};
    } catch (const CheckpointMismatch&) {
      throw;  // the config changed, not the file: an older one would not fit either
    } catch (const CheckpointNotFinite& e) {
      // Its checksums match: the run wrote these values (it diverged before a
      // log point reported it), and the checkpoints before are most often
      // diverged too. Nothing is set aside: the user chooses.
      throw CheckpointNotFinite(
          "checkpoint " + path.string() + " cannot be resumed: " + e.what() +
          "\n  its checksums match, so the run wrote these values: it diverged before a log "
          "point reported it (or the file was edited). Resume from an earlier checkpoint by "
          "moving this one out of " +
          dir_ + " (with a lower optimizer.lr), or start a new run");
    } catch (const CheckpointUnreadable& e) {
      // Not damage: the same file reads once the system lets it.
      throw CheckpointUnreadable(
          "cannot resume from checkpoint " + path.string() + ": " + e.what() +
          "\n  that is not damage: nothing was set aside. Resume again once it can be read "
          "(its permissions, owner or disk; nothing writing it), or move it out of " +
          dir_ + " to resume from the one before");
    } catch (const RecordsChanged& e) {
      // An intact checkpoint whose recorded lengths no longer end a record:
      // the records changed since. An older checkpoint may still seem to fit
      // (the first one recorded nothing; an edit may lie after its length),
      // but resuming there would set aside good checkpoints and train their
      // steps again: stop, keeping everything.
      throw RecordsChanged(
          "cannot resume from checkpoint " + path.string() + ": " + e.what() +
          "\n  the run's records were changed since the checkpoint was taken (line ends "
          "converted, lines added or edited), and the checkpoints are kept as they are. Put the "
          "run's own records back, or remove that file (the resume then goes on, noting the "
          "records it lost)");
    } catch (const CheckpointError& e) {
      unusable(path, e.what());
    }
  }
  // Checkpoints were written but none loads: starting over here would
  // overwrite the run's records with another run's.
  if (!all.empty() || holds_set_aside(dir_))
    throw CheckpointError("no checkpoint in " + dir_ +
                          " loads (the damaged ones are set aside as step-*.bad): the run cannot "
                          "continue in this directory. Put a good copy of a checkpoint back, or "
                          "start again in a new directory (trainer run " +
                          (fs::path(dir_).parent_path() / "config.yaml").string() +
                          " --out NEW_DIR)");
  return std::nullopt;
}

}  // namespace trainer::checkpoint
