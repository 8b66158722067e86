// The run directory: created with its resolved config and manifest, checked
// before a new run takes it, and reopened by a resume.
#include "runner/train/run_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "data/file_kind.h"
#include "runner/build_info.h"
#include "runner/checkpoint/durable_file.h"
#include "runner/config/diagnostics.h"
#include "runner/config/emit.h"
#include "runner/config/value_changes.h"
#include "runner/train/devices.h"
#include "runner/train/host_info.h"
#include "runner/train/manifest_file.h"
#include "runner/train/session.h"
#include "runner/train/sha256.h"
#include "runner/train/tfevents.h"
#include "runner/usage_error.h"

#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/device_report.h"
#endif

namespace trainer::train {
namespace fs = std::filesystem;
namespace {

std::string now_text(const char* format) {
  char stamp[64];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, format, &tm);
  return stamp;
}

// The command line as typed (from /proc/self/cmdline), arguments quoted when needed.
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out, arg;
  std::istringstream args(all);
  while (std::getline(args, arg, '\0')) {
    if (!out.empty()) out += ' ';
    const bool quote = arg.empty() || arg.find_first_of(" \t'\"$*?[]{}") != std::string::npos;
    out += quote ? "'" + arg + "'" : arg;
  }
  return out;
}

std::string run_and_read(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  std::array<char, 256> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), pipe)) out += buf.data();
  pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// The commit of the repository holding the config file, or null. With
// "-dirty" when a tracked file has changes, or when the config file itself is
// not tracked (a new experiment's file, which that commit does not hold).
nlohmann::json git_commit(const std::string& config_path) {
  std::string dir = fs::path(config_path).parent_path().string();
  if (dir.empty()) dir = ".";
  const std::string name = fs::path(config_path).filename().string();
  for (char c : dir + name)
    if (c == '\'') return nullptr;
  const std::string git = "git -C '" + dir + "' ";
  const std::string commit = run_and_read(git + "rev-parse HEAD 2>/dev/null");
  if (commit.size() != 40) return nullptr;
  const bool changed =
      !run_and_read(git + "status --porcelain --untracked-files=no 2>/dev/null").empty();
  const bool untracked = run_and_read(git + "ls-files -- '" + name + "' 2>/dev/null").empty();
  return commit + (changed || untracked ? "-dirty" : "");
}

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "unknown";
}

nlohmann::json library_versions() {
  const dnnl_version_t* dv = dnnl_version();
  nlohmann::json v = {{"onednn", std::to_string(dv->major) + "." + std::to_string(dv->minor) + "." +
                                     std::to_string(dv->patch)}};
#ifdef TRAINER_WITH_CUDA
  const cuda::CudaReport r = cuda::cuda_report(cuda::GpuQuery::properties);
  v["cuda_runtime"] = cuda::cuda_version_string(r.runtime_version);
  v["cuda_driver"] = r.driver_missing ? "none" : cuda::cuda_version_string(r.driver_version);
  v["cudnn"] = r.cudnn_loaded.empty() ? r.cudnn_compiled : r.cudnn_loaded;
  v["cublas"] = r.cublas_loaded.empty() ? r.cublas_compiled : r.cublas_loaded;
  v["nccl"] = r.nccl_loaded.empty() ? r.nccl_compiled : r.nccl_loaded;
#endif
  return v;
}

nlohmann::json devices_of(const config::Config& config, const std::string& backend_name) {
  nlohmann::json d = {{"backend", backend_name},
                      {"hardware_threads", std::thread::hardware_concurrency()},
                      // The compute threads used (backend.threads: 0 resolved).
                      {"threads", cpu_compute_threads(config)},
                      {"world_size", config.devices.world_size}};
  if (!config.devices.gpus.empty()) d["gpus"] = config.devices.gpus;
#ifdef TRAINER_WITH_CUDA
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : cuda::cuda_report(cuda::GpuQuery::properties).gpus)
    gpus.push_back(
        {{"index", g.index},
         {"name", g.name},
         {"compute_capability", std::to_string(g.major) + "." + std::to_string(g.minor)}});
  d["visible_gpus"] = gpus;
#endif
  return d;
}

// manifest.json of `dir` for a resume to add its entry to; throws, naming the
// file and what is wrong, when it is damaged (a resume would replace it).
// The run's own files are plain files, or absent: a FIFO would block the
// resume where it opens one, a device would never end.
void check_run_files(const fs::path& dir) {
  // (manifest.json: its own message, from parse_manifest.)
  for (const char* name : {"config.yaml", "config.sha256", "train.log", "metrics.jsonl",
                           "timing.jsonl", "summary.json", kEventsFile}) {
    const std::string path = (dir / name).string();
    if (const std::string what = data::not_a_regular_file(path); !what.empty())
      throw std::runtime_error(path + " is " + what +
                               ", not a file: the run's records cannot be read or written "
                               "there. Put the run's own file back, or start again in a new "
                               "directory (trainer run " +
                               (dir / "config.yaml").string() + " --out NEW_DIR)");
  }
}

nlohmann::json manifest_to_resume(const fs::path& dir) {
  check_run_files(dir);
  std::string problem;
  nlohmann::json manifest = parse_manifest(dir, problem);
  if (problem.empty() && manifest.contains("resumes") && !manifest["resumes"].is_array())
    problem = "its \"resumes\" is " + std::string(manifest["resumes"].type_name()) + ", not a list";
  if (!problem.empty())
    throw std::runtime_error(
        (dir / "manifest.json").string() + ": " + problem +
        ": the resume would replace the run's record. Put a good copy back, or move it "
        "aside (the resume then starts a new manifest.json holding its own entry)");
  return manifest;
}

// Writes config.yaml and config.sha256; returns the hash.
std::string write_config(const fs::path& dir, const config::Config& config,
                         const CommandArgs& args) {
  const std::string yaml = config::to_yaml(config.resolved);
  const std::string hash = sha256_hex(yaml);
  checkpoint::write_file_atomically((dir / "config.yaml").string(),
                                    config::resolved_from_comment(args.config_path) + yaml);
  checkpoint::write_file_atomically((dir / "config.sha256").string(), hash + "\n");
  return hash;
}

// config.yaml's text without the "# resolved from" line a run writes on top.
std::string config_body(const std::string& text) {
  if (text.rfind("# resolved from ", 0) != 0) return text;
  const std::size_t end = text.find('\n');
  return end == std::string::npos ? std::string() : text.substr(end + 1);
}

// The resolved config the manifest keeps under `hash` (manifest "configs",
// by SHA-256: every config the run trained with), or none.
std::optional<std::string> recorded_config(const nlohmann::json& manifest,
                                           const std::string& hash) {
  const auto configs = manifest.find("configs");
  if (configs == manifest.end() || !configs->is_object()) return std::nullopt;
  const auto text = configs->find(hash);
  if (text == configs->end() || !text->is_string()) return std::nullopt;
  if (sha256_hex(text->get<std::string>()) != hash) return std::nullopt;  // edited too
  return text->get<std::string>();
}

// model.init_from as the run found it: the path, the file a link there led
// to when the session opened (`init_from_file`: checkpoints/last moves on as
// its run goes on), and the SHA-256 of its bytes, so that the weights a run
// started from can be told later; null without init_from.
nlohmann::json init_from_record(const config::Config& config, const std::string& init_from_file) {
  if (init_from_file.empty()) return nullptr;
  return {{"path", init_from_path(config)},
          {"resolved", init_from_file},
          {"sha256", sha256_of_file(init_from_file)}};
}

}  // namespace

bool unfinished_run_dir(const std::string& dir) {
  std::error_code ec;
  bool has_lock = false, has_config = false, has_manifest = false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool temporary = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    if (name == kLockFileName)
      has_lock = true;
    else if (name == "config.yaml" && entry.is_regular_file(ec))
      has_config = true;
    else if (name == "manifest.json" && entry.is_regular_file(ec))
      has_manifest = true;
    else if (!(temporary && entry.is_regular_file(ec)))
      return false;
  }
  if (ec) return false;
  // The manifest is written before config.sha256 too: beside a run's lock.
  if (has_manifest && !has_lock) return false;
  if (!has_config) return true;
  // config.yaml counts only as the one written first by a run creating its
  // directory (its lock file there, the comment line a run writes on top),
  // never as a file of the user's.
  std::ifstream in(fs::path(dir) / "config.yaml");
  std::string first_line;
  std::getline(in, first_line);
  return has_lock && first_line.rfind("# resolved from ", 0) == 0;
}

std::string run_dir_advice(const std::string& dir, bool eval) {
  std::error_code ec;
  fs::path path = fs::path(dir).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "a/b/" as "a/b"
  const auto holds_run = [&](const fs::path& p) {
    return !p.empty() && fs::exists(p / "config.sha256", ec);
  };
  if (fs::exists(path / "sweep.yaml", ec) && fs::is_directory(path / "trials", ec)) {
    const std::string trial = (path / "trials/trial-000").string();
    return eval ? "it is a sweep's directory: evaluate one of its trials, e.g. trainer eval " +
                      trial + " (results.md ranks them)"
                : "it is a sweep's directory: its runs are its trials (trainer run --resume " +
                      trial + "); the `trainer sweep` command run again resumes the whole sweep";
  }
  fs::path run;
  std::string checkpoint = "last";
  if (path.filename() == "checkpoints" && holds_run(path.parent_path())) {
    run = path.parent_path();
  } else if (path.parent_path().filename() == "checkpoints" &&
             holds_run(path.parent_path().parent_path())) {
    run = path.parent_path().parent_path();
    checkpoint = path.filename().string();
  }
  if (run.empty()) return "";
  return eval ? "it is in the run " + run.string() + ": trainer eval " + run.string() +
                    " --checkpoint " + checkpoint
              : "it is in the run " + run.string() + ": trainer run --resume " + run.string() +
                    " (the run goes on from its newest good checkpoint)";
}

std::string refuse_inside_run_checkpoints(const std::string& out) {
  std::error_code ec;
  for (fs::path at = fs::weakly_canonical(fs::absolute(out, ec), ec); at.has_relative_path();
       at = at.parent_path())
    if (at.filename() == "checkpoints" && fs::exists(at.parent_path() / "config.sha256", ec))
      return "--out " + out + ": it is inside the checkpoints of the run " +
             at.parent_path().string() +
             ", which that run's retention and resumes manage; give a directory outside it";
  return "";
}

std::string refuse_used_run_dir(const std::string& out) {
  std::error_code ec;
  if (const std::string inside = refuse_inside_run_checkpoints(out); !inside.empty()) return inside;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec))
    return "--out " + out + ": exists and is not a directory; give a directory for the run";
  if (!fs::is_directory(out, ec)) return "";
  // What a run that stopped while its directory was being created leaves
  // (a crash, a full disk): such a directory can take a new run.
  if (unfinished_run_dir(out)) return "";
  // A run training there: not one to continue now.
  if (std::string in_use = held_by_another(out, "run directory"); !in_use.empty())
    return "--out " + out + ": " + in_use;
  const bool holds_run = fs::exists(fs::path(out) / "config.sha256", ec);
  return "--out " + out + ": the directory is not empty" +
         (holds_run ? " (it holds a run); to continue that run: trainer run --resume " + out
                    : std::string()) +
         "; give a new directory, or remove this one";
}

namespace {

// The config as the run records it: model.init_from naming the file it led
// to when the session opened (`init_from_file`; a checkpoints/last link moves
// on), so that `trainer run RUN_DIR/config.yaml` starts from the same weights.
config::Config as_recorded(const config::Config& config, const std::string& init_from_file) {
  config::Config recorded = config;
  config::Node* model = recorded.resolved.find("model");
  config::Node* from = model && model->is_map() ? model->find("init_from") : nullptr;
  if (from && from->is_scalar() && !init_from_file.empty() && from->text() != init_from_file)
    *from = config::Node::scalar(init_from_file, from->mark(), from->quoted());
  return recorded;
}

}  // namespace

void check_output_directory_created(const fs::path& dir, const std::error_code& error,
                                    const std::string& what) {
  if (!error) return;
  const std::string failed =
      "cannot create " + what + " '" + dir.string() + "': " + error.message();
  if (error == std::errc::not_a_directory)  // the path the user gave: a usage error
    throw UsageError(failed +
                     "\n    a file stands where a folder belongs (a folder above it): move it "
                     "aside, or choose another directory (--out, or output.dir)");
  if (error == std::errc::permission_denied || error == std::errc::read_only_file_system)
    throw UsageError(failed +
                     "\n    choose a directory this user may write (--out, or output.dir)");
  std::error_code looked;
  if (fs::is_symlink(fs::symlink_status(dir, looked)))
    throw UsageError(failed + "\n    it is a link to " + fs::read_symlink(dir, looked).string() +
                     ", which is missing: create that folder, remove the link, or choose "
                     "another directory (--out, or output.dir)");
  if (error == std::errc::no_such_file_or_directory)  // a file system that takes no folders there
    throw UsageError(failed +
                     "\n    a folder cannot be made there: choose another directory (--out, or "
                     "output.dir)");
  throw std::runtime_error(failed);
}

std::string create_run_dir(const config::Config& run_config, const CommandArgs& args,
                           const std::string& backend_name, const std::string& init_from_file,
                           RunDirLock& lock) {
  const config::Config config = as_recorded(run_config, init_from_file);
  fs::path dir = args.out_dir;
  std::error_code ec;
  if (dir.empty()) {
    // runs/<name>/<time>, with -2, -3, ... when runs start within the same second.
    const fs::path base = fs::path(config.output.dir) / config.name / now_text("%Y%m%d-%H%M%S");
    fs::create_directories(base.parent_path(), ec);
    dir = base;
    for (int n = 2; !ec && !fs::create_directory(dir, ec); ++n)
      dir = base.string() + "-" + std::to_string(n);
  } else {
    if (const std::string refused = refuse_used_run_dir(dir.string()); !refused.empty())
      throw UsageError(refused);
    fs::create_directories(dir, ec);
  }
  check_output_directory_created(dir, ec, "run directory");
  lock = RunDirLock(dir.string(), "run directory");
  // Another process may have started a run here since the check above.
  if (const std::string refused = refuse_used_run_dir(dir.string()); !refused.empty())
    throw UsageError(refused);

  nlohmann::json manifest = {
      {"command", command_line()},
      {"config", args.config_path},
      // Every resolved config the run trains with, by SHA-256 (config.sha256):
      // config.yaml may be edited by hand before a resume.
      {"configs",
       {{sha256_hex(config::to_yaml(config.resolved)), config::to_yaml(config.resolved)}}},
      {"overrides", args.overrides},
      {"started", now_text("%Y-%m-%dT%H:%M:%S%z")},
      {"git_commit", git_commit(args.config_path)},
      {"trainer_version", TRAINER_VERSION},
      {"trainer_commit", trainer_commit()},
      {"compiler", __VERSION__},
      {"libraries", library_versions()},
      {"host", host_name()},
      {"cpu_isa", cpu_isa()},
      {"devices", devices_of(config, backend_name)},
      {"backend", backend_name},
      {"seed", config.seed},
      {"deterministic", config.deterministic},
      {"determinism",
       {{"deterministic", config.deterministic},
        {"autotune", config.backend.autotune && !config.deterministic},
        {"tf32", config.precision.mode == "tf32" && !config.devices.gpus.empty()}}},
      {"precision", config.precision.mode},
      // bf16 runs through oneDNN's bf16 kernels; fp16 has none on CPUs, so it is
      // emulated: fp16 rounding around float32 kernels.
      {"precision_emulation", config.precision.mode == "fp16" && config.devices.gpus.empty()},
  };
  if (const std::string note = precision_note(config); !note.empty())
    manifest["precision_note"] = note;
  if (const nlohmann::json weights = init_from_record(config, init_from_file); !weights.is_null())
    manifest["init_from"] = weights;
  // The manifest before config.yaml and config.sha256, which make the
  // directory one that holds a run: a run cut off before them left an
  // unfinished directory a new run takes over, never one that resumes
  // without its manifest.
  write_manifest(dir, manifest);
  write_config(dir, config, args);
  return dir.string();
}

std::string precision_note(const config::Config& config) {
  if (!config.devices.gpus.empty()) return "";
  if (config.precision.mode == "fp16")
    return "emulated: fp16 values (fp16 rounding of every matmul/convolution argument) with "
           "float32 compute";
  if (config.precision.mode == "tf32")
    return "tf32 is a GPU matmul mode: on the CPU every operation computes in float32";
  return "";
}

void check_manifest(const std::string& dir) {
  manifest_to_resume(dir);
}

std::string unwritable_run_dir_advice(const std::string& dir, bool read_only) {
  const std::string copy = "go on in a copy on a writable disk: cp -rL " + dir +
                           " NEW (-L copies what links lead to), then trainer run --resume NEW";
  return read_only ? "its file system is mounted read-only: " + copy
                   : "give this user write access (chmod -R u+w " + dir + "), or " + copy;
}

void check_run_files_writable(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> refused;
  bool read_only = false;  // the file system's doing, not the modes'
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code status;
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(status) || name == ".lock") continue;
    if (::access(entry.path().c_str(), W_OK) != 0) {
      read_only |= errno == EROFS;
      refused.push_back(name + " (" + std::strerror(errno) + ")");
    }
  }
  // A file it adds (config.<hash>.yaml), and each one it replaces through a
  // temporary file beside it.
  const std::string probe = (fs::path(dir) / (".writable." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    read_only |= errno == EROFS;
    refused.insert(refused.begin(),
                   "the directory itself (" + std::string(std::strerror(errno)) + ")");
  } else {
    ::close(fd);
    ::unlink(probe.c_str());
  }
  if (refused.empty()) return;
  throw std::runtime_error(
      "the run directory " + dir +
      " holds what this process may not write, and a resume writes it: " + config::join(refused) +
      "; nothing was changed; " + unwritable_run_dir_advice(dir, read_only));
}

std::string reopen_run_dir(const std::string& dir, const config::Config& config,
                           const CommandArgs& args) {
  nlohmann::json manifest = manifest_to_resume(dir);  // before anything is written
  std::string old_hash;
  std::ifstream(fs::path(dir) / "config.sha256") >> old_hash;
  const std::string new_yaml = config::to_yaml(config.resolved);
  const std::string new_hash = sha256_hex(new_yaml);
  std::string change;
  std::ifstream old_file(fs::path(dir) / "config.yaml", std::ios::binary);
  const std::string old_text((std::istreambuf_iterator<char>(old_file)),
                             std::istreambuf_iterator<char>());
  // The config the run trained with: config.yaml, unless it was edited by
  // hand since (its hash no longer config.sha256's, nor that of a config the
  // manifest keeps: a resume that stopped between the two files); then the
  // manifest's copy.
  const std::string body_hash = sha256_hex(config_body(old_text));
  bool sha256_behind = false;  // that stop: config.sha256 is still to be written
  if (body_hash != old_hash && recorded_config(manifest, body_hash)) {
    old_hash = body_hash;
    sha256_behind = true;
  }
  if (new_hash != old_hash) {
    const bool edited = body_hash != old_hash;
    const std::optional<std::string> trained_with =
        edited ? recorded_config(manifest, old_hash) : config_body(old_text);
    // Keep it next to the new one for the record.
    const std::string kept = "config." + old_hash.substr(0, 12) + ".yaml";
    if (trained_with)
      checkpoint::write_file_atomically(
          (fs::path(dir) / kept).string(),
          config::resolved_from_comment(manifest.value("config", std::string("?"))) +
              *trained_with);
    if (!manifest["configs"].is_object()) manifest["configs"] = nlohmann::json::object();
    manifest["configs"][new_hash] = new_yaml;
    std::string what;
    if (trained_with) {
      // Through today's defaults: those an older trainer did not fill in are no change.
      const std::string changes =
          config::value_changes(config::resolved_today(*trained_with), new_yaml);
      what = changes.empty() ? "it holds the same values, with defaults this trainer fills in "
                               "that the run's did not"
                             : "the config differs from the run's: " + changes;
      what += "; the run's is " + kept;
    } else {
      what =
          "the config the run trained with is not on record (its manifest.json predates the "
          "copies it keeps), so its changes cannot be listed";
    }
    change = std::string(edited ? "config.yaml had been edited since the run wrote it (its "
                                  "sha256 is no longer config.sha256's); "
                                : "") +
             "config.yaml rewritten (sha256 " + old_hash.substr(0, 12) + " -> " +
             new_hash.substr(0, 12) + "): " + what;
  }
  manifest["resumes"].push_back({{"command", command_line()},
                                 {"overrides", args.overrides},
                                 {"time", now_text("%Y-%m-%dT%H:%M:%S%z")},
                                 {"config_sha256", new_hash},
                                 {"threads", cpu_compute_threads(config)},
                                 // The job's (a rank's config holds the launcher's world).
                                 {"ranks", config.devices.world_size}});
  write_manifest(dir, manifest);
  // After the manifest keeps the new config: stopped between config.yaml and
  // config.sha256, the next resume tells that from an edit.
  if (!change.empty() || sha256_behind) write_config(dir, config, args);
  return change;
}

bool config_edited_by_hand(const std::string& dir) {
  std::string recorded_hash;
  std::ifstream(fs::path(dir) / "config.sha256") >> recorded_hash;
  std::ifstream file(fs::path(dir) / "config.yaml", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::string hash = sha256_hex(config_body(text));
  if (recorded_hash.empty() || hash == recorded_hash) return false;
  return !recorded_config(read_manifest(dir), hash);  // a resume's config is no edit
}

}  // namespace trainer::train
