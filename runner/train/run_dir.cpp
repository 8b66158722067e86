// Run directory creation, resolved config and manifest.
#include "runner/train/run_dir.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "data/content_digest.h"
#include "data/file_kind.h"
#include "runner/build_info.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/durable_file.h"
#include "runner/config/emit.h"
#include "runner/config/value_changes.h"
#include "runner/json_text.h"
#include "runner/train/devices.h"
#include "runner/train/host_info.h"
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

// The deepest nesting read from manifest.json (the trainer writes 4 levels):
// deeper, writing or printing it would recurse that deep.
constexpr int kMaxManifestDepth = 64;

// Whether `j` nests deeper than `levels` levels.
bool nests_deeper(const nlohmann::json& j, int levels) {
  if (!j.is_structured()) return false;
  if (levels <= 0) return true;
  for (const auto& [key, value] : j.items())
    if (nests_deeper(value, levels - 1)) return true;
  return false;
}

// manifest.json of `dir` as an object, or why it cannot be one (`problem`).
// Missing: an empty object and no problem.
nlohmann::json parse_manifest(const fs::path& dir, std::string& problem) {
  const fs::path path = dir / "manifest.json";
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) return nlohmann::json::object();
  if (const std::string what = data::not_a_regular_file(path.string()); !what.empty()) {
    problem = "it is " + what + ", not a file";
    return nlohmann::json::object();
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad()) {
    problem = std::string("it cannot be read (") + std::strerror(errno ? errno : EIO) + ")";
    return nlohmann::json::object();
  }
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    problem = text.empty()           ? "it is empty"
              : e.byte > text.size() ? "it is not valid JSON: it ends early, after " +
                                           std::to_string(text.size()) + " bytes (truncated)"
                                     : "it is not valid JSON (at byte " + std::to_string(e.byte) +
                                           " of " + std::to_string(text.size()) + ")";
    return nlohmann::json::object();
  } catch (const nlohmann::json::exception& e) {  // a number beyond a double's range
    const std::string what = e.what();
    problem = "it holds what no JSON reader here can: " + what.substr(what.find("] ") + 2);
    return nlohmann::json::object();
  }
  if (!manifest.is_object()) {
    problem = "it holds " + std::string(manifest.type_name()) + ", not a JSON object";
    return nlohmann::json::object();
  }
  if (nests_deeper(manifest, kMaxManifestDepth)) {
    problem = "it nests deeper than " + std::to_string(kMaxManifestDepth) + " levels";
    return nlohmann::json::object();
  }
  return manifest;
}

// manifest.json of `dir`, or {} when it is missing or damaged: for what adds
// to it after the resume checked it (check_manifest), and for readers that
// fall back on their own.
nlohmann::json read_manifest(const fs::path& dir) {
  std::string problem;
  return parse_manifest(dir, problem);
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

void write_manifest(const fs::path& dir, const nlohmann::json& manifest) {
  checkpoint::write_file_atomically((dir / "manifest.json").string(),
                                    json_text(manifest, 2) + "\n");
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

std::string refuse_used_run_dir(const std::string& out) {
  std::error_code ec;
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

}  // namespace

namespace {

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
    return recorded->get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception&) {
    return {};  // a damaged record: the classes are read from the data
  }
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
    summary["last_checkpoint"] = last.string();
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

std::optional<RecordedBatch> recorded_batch(const std::string& dir) {
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
  const auto chosen = batch->find("micro_batch_auto");
  recorded.micro_batch_auto = chosen != batch->end() && chosen->is_boolean() && chosen->get<bool>();
  return recorded;
}

std::optional<std::int64_t> recorded_auto_accumulation(const std::string& dir) {
  const auto batch = recorded_batch(dir);
  if (!batch || !batch->micro_batch_auto) return std::nullopt;
  return batch->accumulation;
}

}  // namespace trainer::train
