// labels: cpu
// Checkpoints and run directories that a resume (or eval, or a warm start)
// cannot use are errors naming the file and what is wrong, found before
// anything in the directory changes: a run that diverged before a log point
// writes checkpoints that read back (their NaN window loss included), and
// their NaN weights are named rather than blamed on the next step; a state
// edited past what a run can reach is a damaged checkpoint, set aside for the
// previous one, while one this user may not read, or one written while it is
// read, stops the resume, set aside for nothing, and a checkpoints folder it
// may not write stops it before its first step; a checkpoints folder that is not a directory, or
// is gone from a run that wrote checkpoints, stops the resume instead of starting over; a damaged
// manifest.json stops it before config.yaml is rewritten.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <cctype>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/train/sha256.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

// Every file under `dir` (relative path -> content), but the lock file and
// train.log (which every resume appends to).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == ".lock" || name == "train.log") continue;
    files[fs::relative(e.path(), dir).string()] = read_text(e.path().string());
  }
  return files;
}

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

// Whether `dir`/checkpoints holds a checkpoint set aside as damaged.
bool holds_set_aside(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    if (e.path().filename().string().find(".bad") != std::string::npos) return true;
  return false;
}

// Permissions do not stop root: as root, the files under `tmp` are handed
// to user nobody and the returned prefix runs a command as that user ("" for
// any other user).
std::string as_user_the_modes_stop(const TempDir& tmp) {
  if (geteuid() != 0) return "";
  for (const auto& e : fs::recursive_directory_iterator(tmp.path()))
    REQUIRE(lchown(e.path().c_str(), 65534, 65534) == 0);
  REQUIRE(chown(tmp.path().c_str(), 65534, 65534) == 0);
  return "setpriv --reuid=65534 --regid=65534 --clear-groups ";
}

// A tiny run in `run`, output in tmp/p.log, checkpointing every 2 steps,
// each checkpoint 1 s late; returned once the first one waits: the moment to
// change the run directory under it.
std::unique_ptr<TrainerProcess> start_slow_checkpoints(const TempDir& tmp, const std::string& run) {
  write_text(tmp / "tiny.yaml", tiny_experiment());
  setenv("TRAINER_INJECT_CHECKPOINT_DELAY", "1", 1);
  auto p = std::make_unique<TrainerProcess>(
      run_args(tmp / "tiny.yaml", run, {"checkpoint.every_steps=2"}), tmp / "p.log");
  unsetenv("TRAINER_INJECT_CHECKPOINT_DELAY");
  REQUIRE(
      wait_for_text(tmp / "p.log", "TRAINER_INJECT_CHECKPOINT_DELAY", std::chrono::seconds(60)));
  return p;
}

}  // namespace

TEST_CASE("a run that diverged before a log point writes no checkpoint; NaN weights are named") {
  TempDir tmp("diverged-checkpoints");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // The weights turn non-finite within a few steps, before any log point
  // (every 100 steps): the checkpoint at step 7 finds them so and stops the
  // run without writing it.
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "diverged",
                              {"optimizer.type=sgd", "optimizer.lr=1e20", "train.log_every=100",
                               "train.epochs=2"}),
                     tmp / "diverged.log") == 1);
  CHECK_THAT(read_text(tmp / "diverged.log"),
             Contains("error: non-finite weights (inf or NaN) after the updates up to step 7: the "
                      "run diverged"));
  CHECK_FALSE(fs::exists(tmp / "diverged/checkpoints/step-00000007"));
  CHECK(summary_of(tmp / "diverged")["status"] == "failed");

  // NaN weights a checkpoint holds all the same (written by an earlier
  // version, or edited with its checksums made again), with a NaN window loss.
  const std::string run = finished_run(tmp, "run");
  const std::string newest = run + "/checkpoints/step-00000048";
  REQUIRE(fs::is_directory(newest));
  {
    using namespace trainer::checkpoint;
    const std::string path = newest + "/model.safetensors";
    Safetensors file = read_safetensors(path);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(file.tensors.front().bytes.data(), &nan, sizeof nan);
    write_text(path, encode_safetensors(file));
    edit_state(newest, [](nlohmann::json& state) { state["window"]["loss"] = "NaN"; });
  }
  // The state as written, its NaN window loss included, reads back.
  const trainer::checkpoint::TrainState state = trainer::checkpoint::verify_checkpoint(newest);
  CHECK(state.step == 48);
  CHECK_FALSE(std::isfinite(state.window_loss));

  // A resume names the weights, sets nothing aside and changes nothing.
  const auto before = snapshot(run);
  CHECK(resume(run, {"train.epochs=4"}, tmp / "r.log") == 1);
  std::string log = read_text(tmp / "r.log");
  INFO(log);
  CHECK_THAT(log, Contains("checkpoint " + newest + " cannot be resumed: " + newest +
                           "/model.safetensors: tensor '") &&
                      Contains("is not finite") && Contains("the run wrote these values"));
  CHECK_THAT(log, !Contains("malformed state") && !Contains("json.exception") &&
                      !Contains("lower optimizer.lr (or set"));
  CHECK_FALSE(holds_set_aside(run));
  CHECK(snapshot(run) == before);

  // trainer eval: the same, exit 1.
  auto r = run_trainer("eval " + run, true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Contains(newest + "/model.safetensors: tensor '") && Contains("is not finite"));

  // A warm start from those weights: validate and run refuse them at model.init_from.
  const std::string weights = newest + "/model.safetensors";
  r = run_trainer("validate " + (tmp / "tiny.yaml") + " model.init_from=" + weights, true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("error: model.init_from: " + weights + ": tensor '") &&
                        Contains("is NaN") && Contains("an earlier checkpoint's"));
  r = run_trainer(
      "run " + (tmp / "tiny.yaml") + " model.init_from=" + weights + " --out " + (tmp / "warm"),
      true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("error: model.init_from: " + weights + ": tensor '"));
  CHECK_FALSE(fs::exists(tmp / "warm"));
}

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

  // A resume: metrics_bytes inside a record would cut it in two. Its
  // checksums match, so the records are taken to have changed: the resume
  // stops, and nothing is set aside (the next test).
  edit_state(checkpoints + "/step-00000048", [](auto& s) { s["metrics_bytes"] = 5; });
  const auto before = snapshot(checkpoints);
  REQUIRE(resume(run, {"train.epochs=4"}, tmp / "r.log") == 1);
  const std::string log = read_text(tmp / "r.log");
  INFO(log);
  CHECK_THAT(log, Contains("cannot resume from checkpoint " + checkpoints +
                           "/step-00000048: " + checkpoints +
                           "/step-00000048/state.safetensors: state 'metrics_bytes' is 5, inside "
                           "a record of " +
                           run + "/metrics.jsonl"));
  CHECK(snapshot(checkpoints) == before);
}

TEST_CASE("records changed after the checkpoints stop the resume; no checkpoint is set aside") {
  TempDir tmp("records-changed");
  const std::string run = finished_run(tmp, "run");
  // An older checkpoint that recorded no records (as a run's first can):
  // it fits any records, and must not be resumed from in place of the newest.
  edit_state(run + "/checkpoints/step-00000035", [](auto& s) {
    s["metrics_bytes"] = 0;
    s["timing_bytes"] = 0;
  });
  // Line ends converted (a copy through another system): every recorded
  // length now falls inside a record, and no checkpoint is to blame.
  std::string crlf;
  for (const auto& line : read_lines(run + "/metrics.jsonl")) crlf += line + "\r\n";
  write_text(run + "/metrics.jsonl", crlf);
  const auto checkpoints_before = snapshot(run + "/checkpoints");
  CHECK(resume(run, {"train.epochs=4"}, tmp / "r.log") == 1);
  const std::string log = read_text(tmp / "r.log");
  INFO(log);
  CHECK_THAT(log,
             Contains("cannot resume from checkpoint " + run + "/checkpoints/step-00000048: ") &&
                 Contains("the run's records were changed since the checkpoint was taken"));
  CHECK_THAT(log, !Contains("unusable"));
  CHECK(snapshot(run + "/checkpoints") == checkpoints_before);
  CHECK(read_text(run + "/metrics.jsonl") == crlf);
  // Without the file, the resume goes on from the newest.
  fs::remove(run + "/metrics.jsonl");
  CHECK(resume(run, {"train.epochs=4"}, tmp / "r2.log") == 0);
  CHECK_THAT(read_text(tmp / "r2.log"),
             Contains("resuming from " + run + "/checkpoints/step-00000048"));
}

TEST_CASE(
    "a checkpoints folder gone or emptied from a run that wrote checkpoints stops the resume") {
  TempDir tmp("checkpoints-gone");
  const std::string finished = finished_run(tmp, "run");

  // Not a directory: refused, exit 1, nothing changed.
  {
    const std::string run = copy_run(finished, tmp / "file");
    fs::remove_all(run + "/checkpoints");
    write_text(run + "/checkpoints", "x");
    const auto before = snapshot(run);
    CHECK(resume(run, {"train.epochs=4"}, tmp / "file.log") == 1);
    const std::string log = read_text(tmp / "file.log");
    INFO(log);
    CHECK_THAT(log, Contains("error: " + run + "/checkpoints is not a directory") &&
                        Contains("--out NEW_DIR"));
    CHECK_THAT(log, !Contains("filesystem error"));
    CHECK(snapshot(run) == before);
  }
  // Deleted: summary.json (or train.log) says checkpoints were written.
  {
    const std::string run = copy_run(finished, tmp / "gone");
    fs::remove_all(run + "/checkpoints");
    const auto before = snapshot(run);
    CHECK(resume(run, {}, tmp / "gone.log") == 1);
    std::string log = read_text(tmp / "gone.log");
    INFO(log);
    CHECK_THAT(log, Contains("error: " + run +
                             "/checkpoints is missing, but the run wrote "
                             "checkpoints (" +
                             run + "/summary.json names checkpoint " + finished +
                             "/checkpoints/step-00000048)"));
    CHECK(snapshot(run) == before);
    // A run killed after its checkpoints leaves no summary.json; its train.log tells.
    fs::remove(run + "/summary.json");
    CHECK(resume(run, {}, tmp / "gone2.log") == 1);
    log = read_text(tmp / "gone2.log");
    CHECK_THAT(log, Contains(run + "/train.log reports one (checkpoint " + finished +
                             "/checkpoints/step-0000"));
    CHECK(read_lines(run + "/metrics.jsonl").size() == 13);
  }
  // Emptied: the same, for the folder there with nothing in it.
  {
    const std::string run = copy_run(finished, tmp / "emptied");
    fs::remove_all(run + "/checkpoints");
    fs::create_directories(run + "/checkpoints");
    const auto before = snapshot(run);
    CHECK(resume(run, {}, tmp / "emptied.log") == 1);
    const std::string log = read_text(tmp / "emptied.log");
    INFO(log);
    CHECK_THAT(log, Contains("error: " + run +
                             "/checkpoints holds no checkpoint, but the run wrote checkpoints (" +
                             run + "/summary.json names checkpoint"));
    CHECK(snapshot(run) == before);
  }
}

TEST_CASE("a FIFO or a link loop in place of a run's file is refused, never opened") {
  TempDir tmp("fifo");
  const std::string finished = finished_run(tmp, "run");
  // A record file: the resume stops before it changes anything.
  {
    const std::string run = copy_run(finished, tmp / "log");
    fs::remove(run + "/train.log");
    REQUIRE(mkfifo((run + "/train.log").c_str(), 0644) == 0);
    CHECK(resume(run, {"train.epochs=4"}, tmp / "log.log") == 1);
    CHECK_THAT(
        read_text(tmp / "log.log"),
        Contains(run +
                 "/train.log is a FIFO (named pipe), not a file: the run's records cannot be read "
                 "or written there"));
  }
  // A checkpoint's file: that checkpoint is unusable, the one before it resumes.
  {
    const std::string run = copy_run(finished, tmp / "ckpt");
    const std::string model = run + "/checkpoints/step-00000048/model.safetensors";
    fs::remove(model);
    REQUIRE(mkfifo(model.c_str(), 0644) == 0);
    CHECK(resume(run, {"train.epochs=4"}, tmp / "ckpt.log") == 0);
    const std::string log = read_text(tmp / "ckpt.log");
    INFO(log);
    CHECK_THAT(log, Contains(model + ": is a FIFO (named pipe), not a file"));
    CHECK_THAT(log, Contains("resuming from " + run + "/checkpoints/step-00000042"));
  }
  // A checkpoint folder that is a link to itself: passed over, and replaced
  // when the run writes that step again (its check followed the link and
  // failed with the system's "too many levels of symbolic links").
  {
    const std::string run = copy_run(finished, tmp / "loop");
    const std::string step = run + "/checkpoints/step-00000048";
    fs::remove_all(step);
    fs::create_symlink("step-00000048", step);
    CHECK(resume(run, {"train.epochs=4"}, tmp / "loop.log") == 0);
    INFO(read_text(tmp / "loop.log"));
    CHECK_FALSE(fs::is_symlink(fs::symlink_status(step)));  // replaced (then pruned)
  }
}

TEST_CASE("a checkpoint this user may not read stops the resume; nothing is set aside") {
  TempDir tmp("unreadable");
  const std::string run = finished_run(tmp, "run");
  const std::string as_user = as_user_the_modes_stop(tmp);
  const std::string newest = run + "/checkpoints/step-00000048";
  REQUIRE(chmod(newest.c_str(), 0) == 0);
  const auto before = snapshot(run);
  const auto trainer = [&](const std::string& args) {
    return run_command(as_user + trainer_binary() + " " + args);
  };
  const CommandResult resumed = trainer("run --resume " + run + " train.epochs=4");
  INFO(resumed.out);
  CHECK(resumed.code == 1);
  CHECK_THAT(resumed.out,
             Contains("error: cannot resume from checkpoint " + newest + ": " + newest +
                      "/SHA256SUMS: cannot be looked at: Permission denied") &&
                 Contains("that is not damage: nothing was set aside"));
  CHECK_FALSE(holds_set_aside(run));
  CHECK(snapshot(run) == before);
  // eval names what it cannot look at, not "no checkpoint" (nor another
  // checkpoint as the best): exit 1, as for any file the system refuses.
  const auto evaluated = [&](const std::string& which) {
    const CommandResult r = trainer("eval " + run + " --checkpoint " + which);
    INFO(r.out);
    CHECK(r.code == 1);
    return r.out;
  };
  CHECK_THAT(evaluated("step-00000048"),
             Contains(newest + ": cannot look inside: Permission denied"));
  CHECK_THAT(evaluated("best"), Contains(newest + "/state.safetensors: cannot be looked at"));
  REQUIRE(chmod(newest.c_str(), 0755) == 0);  // so that the folder can be removed
  // A checkpoints folder that cannot be listed holds checkpoints all the same.
  const std::string folder = run + "/checkpoints";
  REQUIRE(chmod(folder.c_str(), 0) == 0);
  CHECK_THAT(evaluated("last"), Contains(folder + ": cannot list the checkpoints"));
  REQUIRE(chmod(folder.c_str(), 0755) == 0);
  // Retention never deletes a checkpoint whose metric it cannot read (it may
  // be the best), and says so once.
  const std::string oldest = folder + "/step-00000035";
  REQUIRE(chmod((oldest + "/state.safetensors").c_str(), 0) == 0);
  const CommandResult kept = trainer(
      "run --resume " + run + " train.epochs=5 checkpoint.keep_best=1 checkpoint.keep_last=1");
  INFO(kept.out);
  CHECK(kept.code == 0);
  CHECK(fs::exists(oldest));
  const std::string warning = "checkpoint " + oldest + " is kept: checkpoint.keep_best cannot read";
  const auto first = kept.out.find(warning);
  CHECK(first != std::string::npos);
  CHECK(kept.out.find(warning, first + 1) == std::string::npos);
  REQUIRE(chmod((oldest + "/state.safetensors").c_str(), 0644) == 0);
  // A model.init_from file this user may not read says why, not "no such file".
  REQUIRE(chmod((oldest + "/model.safetensors").c_str(), 0) == 0);
  const CommandResult warm = trainer("validate " + tmp / "tiny.yaml" +
                                     " model.init_from=" + oldest + "/model.safetensors");
  INFO(warm.out);
  CHECK(warm.code == 2);
  CHECK_THAT(warm.out,
             Contains("cannot read '" + oldest + "/model.safetensors': Permission denied"));
  REQUIRE(chmod((oldest + "/model.safetensors").c_str(), 0644) == 0);
}

TEST_CASE("a checkpoints folder this user may not write stops the resume before its first step") {
  TempDir tmp("unwritable");
  const std::string run = finished_run(tmp, "run");
  const std::string as_user = as_user_the_modes_stop(tmp);
  const std::string folder = run + "/checkpoints";
  REQUIRE(chmod(folder.c_str(), 0555) == 0);
  const auto before = snapshot(run);
  const CommandResult r =
      run_command(as_user + trainer_binary() + " run --resume " + run + " train.epochs=4");
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Contains("error: checkpoints cannot be written in " + folder +
                             ": Permission denied (the run would train and then fail saving its "
                             "first checkpoint)"));
  CHECK(r.out.find("epoch 3 step") == std::string::npos);  // no step trained
  CHECK(snapshot(run) == before);
  REQUIRE(chmod(folder.c_str(), 0755) == 0);  // so that the folder can be removed
}

TEST_CASE("a run's file or directory this user may not write stops the resume; nothing changes") {
  TempDir tmp("unwritable-records");
  const std::string run = finished_run(tmp, "run");
  const std::string as_user = as_user_the_modes_stop(tmp);
  const auto resumed = [&] {
    return run_command(as_user + trainer_binary() + " run --resume " + run + " train.epochs=4");
  };
  const auto before = snapshot(run);
  // A record file: it used to be found after config.yaml was rewritten and
  // the other records cut back.
  REQUIRE(chmod((run + "/metrics.jsonl").c_str(), 0444) == 0);
  CommandResult r = resumed();
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Contains("the run directory " + run +
                             " holds what this process may not write, and a resume writes it: "
                             "metrics.jsonl (Permission denied); nothing was changed; give this "
                             "user write access (chmod -R u+w " +
                             run + "), or go on in a copy on a writable disk: cp -rL " + run));
  CHECK(snapshot(run) == before);
  REQUIRE(chmod((run + "/metrics.jsonl").c_str(), 0644) == 0);
  // The directory itself (config.<hash>.yaml would be added there).
  REQUIRE(chmod(run.c_str(), 0555) == 0);
  r = resumed();
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Contains("and a resume writes it: the directory itself (Permission denied)"));
  CHECK(snapshot(run) == before);
  REQUIRE(chmod(run.c_str(), 0755) == 0);
}

TEST_CASE("a resume whose newest checkpoint was deleted says what it trains again") {
  TempDir tmp("deleted-newest");
  const std::string run = finished_run(tmp, "run");
  fs::remove_all(run + "/checkpoints/step-00000048");
  REQUIRE(resume(run, {"train.epochs=4"}, tmp / "resume.log") == 0);
  CHECK_THAT(read_text(tmp / "resume.log"),
             Contains("the run's last checkpoint, step-00000048 (summary.json), is gone from " +
                      run + "/checkpoints: it resumes from step 42, the newest there"));
  // Resumed again with every checkpoint in place: nothing said.
  REQUIRE(resume(run, {"train.epochs=5"}, tmp / "again.log") == 0);
  CHECK(read_text(tmp / "again.log").find("is gone from") == std::string::npos);
}

TEST_CASE("a checkpoint file rewritten between its checksum and its copy stops the resume") {
  TempDir tmp("changed-while-read");
  const std::string run = finished_run(tmp, "run");
  const std::string model = run + "/checkpoints/step-00000048/model.safetensors";
  setenv("TRAINER_INJECT_LOAD_DELAY", "4", 1);
  TrainerProcess resumed({"run", "--resume", run, "train.epochs=4"}, tmp / "r.log");
  unsetenv("TRAINER_INJECT_LOAD_DELAY");
  REQUIRE(wait_for_text(tmp / "r.log", "TRAINER_INJECT_LOAD_DELAY", std::chrono::seconds(60)));
  // Its checksum was verified; now another process writes the file in place.
  std::string bytes = read_text(model);
  bytes[bytes.size() - 1] ^= 0x40;
  std::ofstream(model, std::ios::binary | std::ios::in | std::ios::out) << bytes;
  CHECK(resumed.wait() == 1);
  const std::string log = read_text(tmp / "r.log");
  INFO(log);
  CHECK_THAT(log, Contains("error: cannot resume from checkpoint " + run +
                           "/checkpoints/step-00000048: " + model +
                           ": the file changed while it was read") &&
                      Contains("nothing was set aside"));
  CHECK_FALSE(holds_set_aside(run));
}

TEST_CASE("a damaged manifest.json stops the resume before anything changes") {
  TempDir tmp("manifest-damaged");
  const std::string finished = finished_run(tmp, "run");
  const std::string manifest = read_text(finished + "/manifest.json");
  const auto with_resumes = [&](const nlohmann::json& value) {
    auto j = nlohmann::json::parse(manifest);
    j["resumes"] = value;
    return j.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1]", "manifest.json: it holds array, not a JSON object"},
      {with_resumes("x"), "manifest.json: its \"resumes\" is string, not a list"},
      {manifest.substr(0, 100),
       "manifest.json: it is not valid JSON: it ends early, after 100 "
       "bytes (truncated)"},
      {"{\"a\": x}", "manifest.json: it is not valid JSON (at byte 7 of 8)"},
      {"{\"a\": 1e400}",
       "manifest.json: it holds what no JSON reader here can: number overflow parsing '1e400'"},
      {"", "manifest.json: it is empty"},
      {"dir", "manifest.json: it is a directory, not a file"}};
  int n = 0;
  for (const auto& [content, error] : cases) {
    INFO(error);
    const std::string run = copy_run(finished, tmp / ("r" + std::to_string(n++)));
    if (content == "dir") {
      fs::remove(run + "/manifest.json");
      fs::create_directory(run + "/manifest.json");
    } else {
      write_text(run + "/manifest.json", content);
    }
    const auto before = snapshot(run);
    CHECK(resume(run, {"train.epochs=4"}, tmp / "r.log") == 1);
    const std::string log = read_text(tmp / "r.log");
    INFO(log);
    CHECK_THAT(log, Contains("error: " + run + "/" + error) && Contains("Put a good copy back"));
    CHECK_THAT(log, !Contains("json.exception") && !Contains("basic_filebuf"));
    CHECK(snapshot(run) == before);  // config.yaml not rewritten, no config.<hash>.yaml
  }
}

TEST_CASE("an unfinished checkpoint a killed run left is deleted by the next checkpoint") {
  TempDir tmp("checkpoint-unfinished");
  const std::string run = finished_run(tmp, "run");
  // What a process killed while writing step 40 (or replacing step 42) leaves.
  fs::create_directories(run + "/checkpoints/step-00000040.tmp");
  write_text(run + "/checkpoints/step-00000040.tmp/model.safetensors", "partial");
  fs::create_directories(run + "/checkpoints/step-00000042.old");
  // Stopped before step 41 took its place: the old one is that step's
  // checkpoint, and gets its name back (here older than the three the
  // retention keeps, so it goes with the retention).
  fs::create_directories(run + "/checkpoints/step-00000041.old");
  REQUIRE(resume(run, {"train.epochs=4"}, tmp / "r.log") == 0);
  CHECK_FALSE(fs::exists(run + "/checkpoints/step-00000040.tmp"));
  CHECK_FALSE(fs::exists(run + "/checkpoints/step-00000042.old"));
  CHECK_FALSE(fs::exists(run + "/checkpoints/step-00000041.old"));
  CHECK(read_text(tmp / "r.log").find("could not") == std::string::npos);
}

TEST_CASE("a run whose directory is removed while it trains stops at its next checkpoint") {
  TempDir tmp("checkpoint-dir-removed");
  const std::string run = tmp / "run";
  const auto p = start_slow_checkpoints(tmp, run);
  fs::remove_all(run);
  CHECK(p->wait() == 1);
  const std::string log = read_text(tmp / "p.log");
  INFO(log);
  CHECK(log.find("the run directory " + run +
                 " lost its config.sha256: it was removed or replaced while the run trained") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(run + "/checkpoints"));  // not made again for a run with no records
}

TEST_CASE("a train.log that cannot be written stops the run at its next log point") {
  TempDir tmp("train-log-unwritable");
  const std::string run = tmp / "run";
  const auto p = start_slow_checkpoints(tmp, run);
  // Immutable: every write fails (as on a full disk), where the file system allows the flag.
  if (std::system(("chattr +i " + run + "/train.log 2>/dev/null").c_str()) != 0) {
    WARN("chattr +i is not available here: nothing checked");
    return;
  }
  const int code = p->wait();
  std::system(("chattr -i " + run + "/train.log").c_str());
  const std::string log = read_text(tmp / "p.log");
  INFO(log);
  CHECK(code == 1);
  CHECK(log.find("error: cannot write " + run + "/train.log (") != std::string::npos);
  CHECK(summary_of(run)["status"] == "failed");
}

TEST_CASE("model.init_from a checkpoint's file whose SHA256SUMS disagrees is refused as damaged") {
  TempDir tmp("init-from-damaged");
  const std::string run = finished_run(tmp, "run");
  const std::string weights = run + "/checkpoints/step-00000048/model.safetensors";
  // One byte of a weight changed: still a valid file of finite values.
  std::string bytes = read_text(weights);
  bytes[bytes.size() - 2] ^= 0x01;
  write_text(weights, bytes);
  auto r = run_trainer("validate " + (tmp / "tiny.yaml") + " model.init_from=" + weights, true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("error: model.init_from: " + weights + ": checksum mismatch (") &&
                        Contains("by the SHA256SUMS beside it): the file (or that line of it) is "
                                 "truncated or corrupted"));
  r = run_trainer(
      "run " + (tmp / "tiny.yaml") + " model.init_from=" + weights + " --out " + (tmp / "warm"),
      true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("checksum mismatch"));
  CHECK_FALSE(fs::exists(tmp / "warm"));
  // The same bytes copied away from their SHA256SUMS: nothing to check against.
  const std::string copied = tmp / "copied.safetensors";
  write_text(copied, bytes);
  CHECK(run_trainer("validate " + (tmp / "tiny.yaml") + " model.init_from=" + copied, true).code ==
        0);
  // A checkpoint the run's retention pruned (it keeps steps 35, 42 and 48).
  const std::string pruned = run + "/checkpoints/step-00000007/model.safetensors";
  r = run_trainer("validate " + (tmp / "tiny.yaml") + " model.init_from=" + pruned, true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("cannot read '" + pruned + "': no such file") &&
                        Contains("a checkpoint of another run, which its checkpoint.keep_last / "
                                 "keep_best may have pruned since"));
}

TEST_CASE(
    "a checksum mismatch shows the digits that differ; a checksum no hash is names SHA256SUMS; "
    "sha256sum's binary form is read") {
  TempDir tmp("sums-damaged");
  const std::string run = finished_run(tmp, "run");
  const std::string copy = copy_run(run, tmp / "copy");
  const fs::path step = copy + "/checkpoints/step-00000048";
  const std::string sums = read_text(step / "SHA256SUMS");
  const std::size_t line = sums.find("  model.safetensors");
  REQUIRE(line == 64);  // the model's line comes first
  // One digit changed past the 16 the message shows by default.
  std::string edited = sums;
  edited[40] = edited[40] == '0' ? '1' : '0';
  write_text(step / "SHA256SUMS", edited);
  const std::string listed = edited.substr(0, 48), actual = sums.substr(0, 48);
  CHECK_THAT(verify_error(step.string()),
             Contains("checksum mismatch (") && Contains("SHA-256 " + actual + "..., expected " +
                                                         listed + "... by the SHA256SUMS"));
  // A line that is no hash: the SHA256SUMS file is what is damaged.
  edited = sums;
  edited[3] = 'x';
  write_text(step / "SHA256SUMS", edited);
  CHECK_THAT(verify_error(step.string()),
             Contains(step.string() + "/SHA256SUMS: the checksum of model.safetensors is not 64 "
                                      "hex digits: the SHA256SUMS file is damaged"));
  // Upper case, as some tools write it, is the same checksum.
  edited = sums;
  for (std::size_t i = 0; i < 64; ++i)
    edited[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(edited[i])));
  write_text(step / "SHA256SUMS", edited);
  CHECK(verify_error(step.string()).empty());
  // Written by `sha256sum -b` ("HEX *NAME"): the same checksums.
  edited = sums;
  for (std::size_t at = 0; (at = edited.find("  ", at)) != std::string::npos; at += 2)
    edited.replace(at, 2, " *");
  REQUIRE(edited.find(" *model.safetensors") != std::string::npos);
  write_text(step / "SHA256SUMS", edited);
  CHECK(verify_error(step.string()).empty());
}
