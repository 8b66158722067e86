// labels: cpu
// Checkpoints whose training state no run can reach (edited, their
// checksums recomputed) are damaged checkpoints: named with the field and
// what is wrong, set aside, and the previous one used.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <limits>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/train/sha256.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

// `trainer run --resume DIR OVERRIDES...`, its output in `log`; the exit code.
int resume(const std::string& dir, const std::vector<std::string>& overrides,
           const std::string& log) {
  std::vector<std::string> args = {"run", "--resume", dir};
  args.insert(args.end(), overrides.begin(), overrides.end());
  return run_to_end(args, log);
}

// A finished tiny run (48 steps; checkpoints at 35, 42 and 48 kept) in tmp/name.
std::string finished_run(const TempDir& tmp, const std::string& name,
                         const std::vector<std::string>& overrides = {}) {
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / name, overrides), tmp / (name + ".log")) ==
          0);
  return tmp / name;
}

// A copy of run directory `from` at `to`.
std::string copy_run(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  return to;
}

// Rewrites the SHA256SUMS of checkpoint folder `checkpoint` for its files as they are now.
void rewrite_sums(const fs::path& checkpoint) {
  std::string sums;
  for (const char* name : {"model.safetensors", "state.safetensors"})
    sums +=
        trainer::train::sha256_hex(read_text((checkpoint / name).string())) + "  " + name + "\n";
  write_text((checkpoint / "SHA256SUMS").string(), sums);
}

// Edits the training state of checkpoint folder `checkpoint` as a user with
// a text editor would, and recomputes its checksums.
void edit_state(const fs::path& checkpoint, const std::function<void(nlohmann::json&)>& edit) {
  using namespace trainer::checkpoint;
  const std::string path = (checkpoint / "state.safetensors").string();
  Safetensors file = read_safetensors(path);
  nlohmann::json state = nlohmann::json::parse(file.metadata.at("trainer_state"));
  edit(state);
  file.metadata["trainer_state"] = state.dump();
  write_text(path, encode_safetensors(file));
  rewrite_sums(checkpoint);
}

// The error verify_checkpoint gives for checkpoint folder `path` ("" when none).
std::string verify_error(const std::string& path) {
  try {
    trainer::checkpoint::verify_checkpoint(path);
  } catch (const trainer::checkpoint::CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a state edited past what a run can reach is a damaged checkpoint") {
  TempDir tmp("edited-state");
  const std::string run = finished_run(tmp, "run");
  const std::string checkpoints = run + "/checkpoints";

  // Read on its own (as eval does): the field and what is wrong.
  const std::string copy = copy_run(run, tmp / "copy");
  const fs::path newest = copy + "/checkpoints/step-00000048";
  const auto edited_error = [&](const std::function<void(nlohmann::json&)>& edit) {
    const fs::path scratch = copy + "/checkpoints/step-00000048.scratch";
    fs::remove_all(scratch);
    fs::copy(newest, scratch);
    edit_state(scratch, edit);
    // Under its own folder name again, so that only the edit is wrong.
    fs::remove_all(copy + "/checkpoints/edited");
    fs::create_directories(copy + "/checkpoints/edited");
    fs::rename(scratch, copy + "/checkpoints/edited/step-00000048");
    return verify_error(copy + "/checkpoints/edited/step-00000048");
  };
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  CHECK_THAT(edited_error([&](auto& s) { s["step"] = max; }),
             Contains("state 'step' is 9223372036854775807, above 'total_steps' (48)"));
  CHECK_THAT(edited_error([](auto& s) { s["epoch"] = std::int64_t{1} << 62; }),
             Contains("state 'step' is 48, but epoch 4611686018427387904 x 16"));
  CHECK_THAT(edited_error([](auto& s) { s["window"]["steps"] = -3; }),
             Contains("state 'window.steps' is -3, below 0"));
  CHECK_THAT(edited_error([&](auto& s) { s["window"]["rows"] = max; }),
             Contains("state 'window.rows' is 9223372036854775807, above 'window.samples'"));
  CHECK(edited_error([](auto&) {}).empty());
  // A checkpoint under another step's name.
  fs::copy(newest, copy + "/checkpoints/step-00000049");
  CHECK_THAT(verify_error(copy + "/checkpoints/step-00000049"),
             Contains("step-00000049/state.safetensors: state 'step' is 48, but the checkpoint's "
                      "folder is named for step 49"));

  // A resume: metrics_bytes inside a record would cut it in two. The
  // checkpoint is set aside and the one before it used, as for a checksum mismatch.
  edit_state(checkpoints + "/step-00000048", [](auto& s) { s["metrics_bytes"] = 5; });
  REQUIRE(resume(run, {"train.epochs=4"}, tmp / "r.log") == 0);
  const std::string log = read_text(tmp / "r.log");
  INFO(log);
  CHECK_THAT(log,
             Contains("checkpoint " + checkpoints + "/step-00000048 is unusable: " + checkpoints +
                      "/step-00000048/state.safetensors: state 'metrics_bytes' "
                      "is 5, inside a record of " +
                      run + "/metrics.jsonl"));
  CHECK(fs::exists(checkpoints + "/step-00000048.bad"));
  CHECK_THAT(log, Contains("resuming from " + checkpoints + "/step-00000042"));
  CHECK(steps_of(run) == 64);
  for (const auto& line : read_lines(run + "/metrics.jsonl"))
    CHECK_NOTHROW(nlohmann::json::parse(line));
}

