// labels: cpu
// A run directory survives the user's mistakes: a resume whose config builds
// another model (or another batch plan) is refused before anything in the
// directory changes; checkpoints that cannot be read for a reason other than
// damage are left alone; when every checkpoint is damaged the run stops
// instead of starting over in place (one a stop left renamed is found
// again); two processes never share a directory;
// a signal before training leaves a directory that resumes (from
// model.init_from again, when given); a cut
// metrics.jsonl is repaired to whole records; a finished run resumed keeps
// its directory as it was (also one that max_steps stopped inside an epoch,
// and an interrupted one resumed with fewer steps than it trained);
// a run stopped after its last checkpoint but before its summary records its
// end on resume, as it would have; a failure before training leaves
// summary.json, and one while the directory
// is made (before config.sha256) leaves one that takes a new run, while a
// directory holding a file of the user's is refused; a config path holding
// line breaks is written on the one comment line config.yaml begins with;
// the manifest's git commit says -dirty for a config file the commit lacks;
// paths named in another encoding than UTF-8 make records that still parse;
// a run that lost config.sha256 alone is told the command that writes it; a
// resumed session that trains says so in summary.json until it ends.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "runner/train/sha256.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;

namespace {

// Every file under `dir` (relative path -> content), the lock file aside.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == ".lock") continue;
    files[fs::relative(e.path(), dir).string()] = read_text(e.path().string());
  }
  return files;
}

// The same, but for train.log (which says what each resume found).
std::map<std::string, std::string> snapshot_but_log(const fs::path& dir) {
  auto files = snapshot(dir);
  files.erase("train.log");
  return files;
}

std::vector<std::string> resume_args(const std::string& dir,
                                     const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> args = {"run", "--resume", dir};
  args.insert(args.end(), overrides.begin(), overrides.end());
  return args;
}

// A finished tiny run (48 steps, checkpoints every 7, the last 3 kept) in tmp/name.
std::string finished_run(const TempDir& tmp, const std::string& name) {
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / name), tmp / (name + ".log")) == 0);
  return tmp / name;
}

}  // namespace

TEST_CASE("a resume whose config builds another model is refused and changes nothing") {
  TempDir tmp("resume-mismatch");
  const std::string run = finished_run(tmp, "run");
  const auto before = snapshot(run);
  for (const std::string& change :
       {std::string("model.layers[1].out_features=16"), std::string("optimizer.type=sgd")}) {
    INFO(change);
    CHECK(run_to_end(resume_args(run, {change, "train.epochs=4"}), tmp / "r.log") == 2);
    const std::string log = read_text(tmp / "r.log");
    INFO(log);
    CHECK(log.find("error: the run's checkpoint does not fit the model (and optimizer) this "
                   "config builds: " +
                   run + "/checkpoints/step-00000048/") != std::string::npos);
    CHECK(log.find("resume with the run's own config") != std::string::npos);
    // Nothing set aside, rewritten or restarted: the directory is as it was.
    CHECK(snapshot(run) == before);
  }
  // Adam's moments fit AdamW's shapes: the optimizer recorded in the state refuses it.
  CHECK(run_to_end(resume_args(run, {"optimizer.type=adamw", "train.epochs=4"}), tmp / "w.log") ==
        2);
  CHECK(read_text(tmp / "w.log")
            .find("holds the moments of optimizer adam; this config uses "
                  "adamw") != std::string::npos);
  CHECK(snapshot(run) == before);
  // A config that steps differently (another batch) is refused the same way.
  CHECK(run_to_end(resume_args(run, {"train.batch_size=16", "train.epochs=4"}), tmp / "b.log") ==
        2);
  CHECK(read_text(tmp / "b.log").find("resume with the run's own config.yaml") !=
        std::string::npos);
  CHECK(snapshot(run) == before);
  // Also one with the same steps per epoch (512 samples in 16 batches of 31
  // or of 32): the loader's position counts batches, so its samples would shift.
  CHECK(run_to_end(resume_args(run, {"train.batch_size=31", "train.epochs=4"}), tmp / "b31.log") ==
        2);
  CHECK(read_text(tmp / "b31.log").find("was written with seed 3, batch 32, 16 steps per epoch") !=
        std::string::npos);
  CHECK(snapshot(run) == before);
  // And the run's own config still resumes it.
  CHECK(run_to_end(resume_args(run, {"train.epochs=4"}), tmp / "ok.log") == 0);
  CHECK(summary_of(run)["steps"] == 64);
}

TEST_CASE("when every checkpoint is damaged the resume stops instead of starting over") {
  TempDir tmp("resume-all-damaged");
  const std::string run = finished_run(tmp, "run");
  const std::string metrics = read_text(run + "/metrics.jsonl");
  std::vector<fs::path> checkpoints;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    if (e.is_directory() && !e.is_symlink()) checkpoints.push_back(e.path());
  REQUIRE(checkpoints.size() == 3);
  for (const auto& c : checkpoints) fs::resize_file(c / "model.safetensors", 100);

  for (int attempt = 0; attempt < 2; ++attempt) {
    INFO("attempt " << attempt);
    CHECK(run_to_end(resume_args(run, {"train.epochs=4"}), tmp / "r.log") == 1);
    const std::string log = read_text(tmp / "r.log");
    INFO(log);
    CHECK(log.find("no checkpoint in " + run + "/checkpoints loads") != std::string::npos);
    CHECK(read_text(run + "/metrics.jsonl") == metrics);  // not started over
  }
  // Set aside once each, never replaced by a later one of the same name.
  for (const auto& c : checkpoints) {
    CHECK(fs::exists(c.string() + ".bad/model.safetensors"));
    CHECK(fs::file_size(c.string() + ".bad/model.safetensors") == 100);
  }
}

TEST_CASE("a checkpoint the system refuses to read is not set aside as damaged") {
  TempDir tmp("resume-unreadable");
  const std::string run = finished_run(tmp, "run");
  const std::string newest = run + "/checkpoints/step-00000048";
  // Root reads anything: run the resume as an unprivileged user then.
  std::string as_user;
  if (geteuid() == 0) {
    REQUIRE(std::system(("chown -R 65534:65534 " + tmp.path().string()).c_str()) == 0);
    as_user = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  }
  fs::permissions(newest + "/model.safetensors", fs::perms::none);
  const int code = std::system((as_user + TRAINER_BINARY + " run --resume " + run +
                                " train.epochs=4 > " + tmp / "r.log" + " 2>&1")
                                   .c_str());
  const std::string log = read_text(tmp / "r.log");
  INFO(log);
  CHECK(WEXITSTATUS(code) == 1);
  CHECK(log.find(newest + "/model.safetensors: cannot open for reading: Permission denied") !=
        std::string::npos);
  CHECK(fs::exists(newest));  // still there, under its own name
  CHECK_FALSE(fs::exists(newest + ".bad"));
  CHECK(log.find("resuming from") == std::string::npos);
}

TEST_CASE("a second process in a run directory is refused while the first runs") {
  TempDir tmp("run-dir-lock");
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  TrainerProcess first(
      run_args(tmp / "tiny.yaml", tmp / "run", {"data.workers=0", "train.epochs=500"}),
      tmp / "first.log");
  REQUIRE(wait_for_lines(tmp / "run/metrics.jsonl", 1, std::chrono::seconds(60)));
  for (const auto& args :
       {resume_args(tmp / "run"), run_args(tmp / "tiny.yaml", tmp / "run", {"seed=4"})}) {
    CHECK(run_to_end(args, tmp / "second.log") == 2);
    const std::string log = read_text(tmp / "second.log");
    INFO(log);
    // `--out` too: not "not empty ... use --resume", which would be refused.
    CHECK(log.find("run directory " + tmp / "run" + " is in use by another trainer process (pid " +
                   std::to_string(first.pid()) + ")") != std::string::npos);
    CHECK(log.find("--resume") == std::string::npos);
  }
  first.signal(SIGTERM);
  CHECK(first.wait() == 143);
  // Free again once the first has ended.
  CHECK(run_to_end(resume_args(tmp / "run", {"train.max_steps=1"}), tmp / "third.log") == 0);
}

TEST_CASE("a run started with its standard streams closed keeps its console out of its files") {
  TempDir tmp("run-dir-closed-streams");
  write_text(tmp / "tiny.yaml", tiny_experiment(256));
  for (const std::string closed : {">&-", ">&- 2>&-", "<&- >&- 2>&-"}) {
    INFO(closed);
    const std::string dir = tmp / ("run" + std::to_string(closed.size()));
    const auto r = run_command("/bin/sh -c '" + trainer_binary() + " run " + tmp / "tiny.yaml" +
                               " --out " + dir + " " + closed + "'");
    REQUIRE(r.code == 0);
    // The lock holds its holder's pid alone, and every record line is JSON.
    const std::string lock = read_text(dir + "/.lock");
    CHECK(lock.find_first_not_of("0123456789\n") == std::string::npos);
    const auto lines = read_lines(dir + "/metrics.jsonl");
    REQUIRE_FALSE(lines.empty());
    for (const auto& line : lines) CHECK_NOTHROW(nlohmann::json::parse(line));
    // train.log once: the console's lines do not land there a second time.
    CHECK(std::count(lines.begin(), lines.end(), std::string()) == 0);
    const std::string log = read_text(dir + "/train.log");
    CHECK(log.find("done:") == log.rfind("done:"));
  }
}

TEST_CASE("a run directory under a file is a usage error that says so") {
  TempDir tmp("run-dir-under-file");
  write_text(tmp / "tiny.yaml", tiny_experiment(256));
  write_text(tmp / "afile", "mine\n");
  CHECK(run_to_end(run_args(tmp / "tiny.yaml", tmp / "afile/sub/run"), tmp / "run.log") == 2);
  const std::string log = read_text(tmp / "run.log");
  INFO(log);
  CHECK(log.find("cannot create run directory '" + tmp / "afile/sub/run" + "': Not a directory") !=
        std::string::npos);
  CHECK(log.find("a file stands where a folder belongs") != std::string::npos);
  CHECK(read_text(tmp / "afile") == "mine\n");
}

TEST_CASE("a signal as the run directory is being made leaves one that resumes") {
  TempDir tmp("signal-early");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  {
    TrainerProcess run(run_args(tmp / "tiny.yaml", tmp / "run"), tmp / "run.log");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < end && !fs::exists(tmp / "run"))
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    run.signal(SIGTERM);
    CHECK(run.wait() == 143);
  }
  INFO(read_text(tmp / "run.log"));
  REQUIRE(fs::exists(tmp / "run/config.sha256"));
  // Stopped before its first step (or after some): summary.json says so.
  const nlohmann::json stopped = summary_of(tmp / "run");
  CHECK(stopped["status"] == "interrupted");
  CHECK(stopped["signal"] == SIGTERM);
  CHECK(run_to_end(resume_args(tmp / "run"), tmp / "resume.log") == 0);
  CHECK(summary_of(tmp / "run")["steps"] == 48);

  // A directory holding only what a stopped creation leaves takes a new run.
  fs::create_directories(tmp / "left");
  write_text(tmp / "left/.lock", "");
  write_text(tmp / "left/config.yaml.tmp", "partial");
  CHECK(run_to_end(run_args(tmp / "tiny.yaml", tmp / "left", {"train.max_steps=2"}),
                   tmp / "left.log") == 0);
  // Stopped after its manifest, before config.sha256: no run to resume
  // without its manifest, and a new run takes the directory.
  fs::create_directories(tmp / "manifest_only");
  write_text(tmp / "manifest_only/.lock", "");
  write_text(tmp / "manifest_only/manifest.json", "{\"command\": \"trainer run\"}\n");
  CHECK(run_to_end(run_args(tmp / "tiny.yaml", tmp / "manifest_only", {"train.max_steps=2"}),
                   tmp / "manifest_only.log") == 0);
  CHECK(nlohmann::json::parse(read_text(tmp / "manifest_only/manifest.json"))
            .contains("trainer_commit"));
  // A manifest.json of the user's, without a run's lock, is never taken over.
  fs::create_directories(tmp / "users");
  write_text(tmp / "users/manifest.json", "{}\n");
  CHECK(run_to_end(run_args(tmp / "tiny.yaml", tmp / "users", {"train.max_steps=2"}),
                   tmp / "users.log") == 2);
  CHECK(read_text(tmp / "users/manifest.json") == "{}\n");
}

TEST_CASE("a resume that finds no checkpoint starts again from model.init_from") {
  TempDir tmp("init-from-early");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "base", {"train.max_steps=3"}),
                     tmp / "base.log") == 0);
  const std::string weights = tmp / "base/checkpoints/last/model.safetensors";
  const std::vector<std::string> from = {"model.init_from=" + weights, "train.max_steps=5"};
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "whole", from), tmp / "whole.log") == 0);
  {
    TrainerProcess run(run_args(tmp / "tiny.yaml", tmp / "run", from), tmp / "run.log");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < end && !fs::exists(tmp / "run"))
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    run.signal(SIGTERM);
    CHECK(run.wait() == 143);
  }
  REQUIRE(run_to_end(resume_args(tmp / "run"), tmp / "resume.log") == 0);
  const std::string log = read_text(tmp / "resume.log");
  INFO(log);
  REQUIRE(log.find("no usable checkpoint") != std::string::npos);
  // The weights of the run that was never stopped: init_from again, not seeded ones.
  CHECK(read_text(tmp / "run/checkpoints/last/model.safetensors") ==
        read_text(tmp / "whole/checkpoints/last/model.safetensors"));
}

TEST_CASE("a checkpoint left renamed by a stop while it was replaced is found again") {
  TempDir tmp("replaced");
  const std::string run = finished_run(tmp, "run");
  // Stopped between the two renames of a checkpoint written twice: the step's
  // folder moved aside as .old, the new one not yet in its place.
  fs::rename(run + "/checkpoints/step-00000048", run + "/checkpoints/step-00000048.old");
  fs::create_directory(run + "/checkpoints/step-00000048.tmp");
  const CommandResult eval = run_trainer("eval " + run, true);
  INFO(eval.out);
  CHECK(eval.code == 0);
  CHECK(eval.out.find("step-00000048.old") != std::string::npos);
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=50"}), tmp / "resume.log") == 0);
  const std::string log = read_text(tmp / "resume.log");
  INFO(log);
  CHECK(log.find("resuming from " + run + "/checkpoints/step-00000048.old: step 48") !=
        std::string::npos);
  // Its name back, the unfinished one gone.
  CHECK(fs::is_directory(run + "/checkpoints/step-00000048"));
  CHECK_FALSE(fs::exists(run + "/checkpoints/step-00000048.old"));
  CHECK_FALSE(fs::exists(run + "/checkpoints/step-00000048.tmp"));
  CHECK(fs::read_symlink(run + "/checkpoints/last") == "step-00000050");

  // Beside a step-48 that is no checkpoint folder (a link), the .old is
  // still step 48's checkpoint: resumed from, then replaced by the step's
  // checkpoint the resume writes again (its evaluation at the epoch's end).
  const std::string linked = finished_run(tmp, "linked");
  fs::rename(linked + "/checkpoints/step-00000048", linked + "/checkpoints/step-00000048.old");
  fs::create_directory_symlink("/nonexistent", linked + "/checkpoints/step-00000048");
  REQUIRE(run_to_end(resume_args(linked, {"train.max_steps=50"}), tmp / "linked.log") == 0);
  const std::string linked_log = read_text(tmp / "linked.log");
  INFO(linked_log);
  CHECK(linked_log.find("resuming from " + linked + "/checkpoints/step-00000048.old") !=
        std::string::npos);
  CHECK(linked_log.find("warning") == std::string::npos);
  CHECK(fs::is_directory(fs::symlink_status(linked + "/checkpoints/step-00000048")));
  CHECK_FALSE(fs::exists(fs::symlink_status(linked + "/checkpoints/step-00000048.old")));
}

TEST_CASE("a resume onto a cut metrics.jsonl keeps it whole records") {
  TempDir tmp("resume-cut-metrics");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "run", {"train.max_steps=30"}),
                     tmp / "a.log") == 0);
  const std::string metrics = tmp / "run/metrics.jsonl";
  const std::string full = read_text(metrics);
  // Cut in the middle of its third line.
  const std::size_t cut = full.find('\n', full.find('\n') + 1) + 10;
  fs::resize_file(metrics, cut);
  REQUIRE(run_to_end(resume_args(tmp / "run", {"train.max_steps=40"}), tmp / "r.log") == 0);
  const std::string log = read_text(tmp / "r.log");
  INFO(log);
  CHECK(log.find(metrics + " holds " + std::to_string(cut) + " bytes, fewer than the") !=
        std::string::npos);
  // Every line parses, the two whole ones kept, then the records after the checkpoint.
  const auto lines = read_lines(metrics);
  for (const auto& line : lines) CHECK_NOTHROW(nlohmann::json::parse(line));
  REQUIRE(lines.size() > 2);
  CHECK(read_text(metrics).rfind(full.substr(0, full.find('\n', full.find('\n') + 1) + 1), 0) == 0);
}

TEST_CASE("a finished run resumed has nothing to train and keeps its summary") {
  TempDir tmp("resume-finished");
  const std::string run = finished_run(tmp, "run");
  fs::copy(run, tmp / "copy", fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  const std::string summary = read_text(run + "/summary.json");
  REQUIRE(run_to_end(resume_args(run), tmp / "r.log") == 0);
  CHECK(read_text(tmp / "r.log")
            .find("nothing to train: the checkpoint is at step 48 and this "
                  "config trains 48 steps") != std::string::npos);
  CHECK(read_text(run + "/summary.json") == summary);
  // Also with a smaller limit: its config.yaml still repeats the run it did.
  const std::string config = read_text(run + "/config.yaml");
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=4"}), tmp / "s.log") == 0);
  CHECK(read_text(run + "/config.yaml") == config);
  CHECK(read_text(run + "/summary.json") == summary);
  // Nothing else changed either (train.log says what the resumes found).
  CHECK(snapshot_but_log(run) == snapshot_but_log(tmp / "copy"));
}

TEST_CASE("an interrupted run resumed with fewer steps than it trained keeps its directory") {
  TempDir tmp("resume-past-limit");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::string run = tmp / "run";
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", run, {"train.max_steps=30"}), tmp / "a.log") == 0);
  // As a signal leaves it: interrupted at its checkpoint of step 30.
  nlohmann::json summary = summary_of(run);
  summary["status"] = "interrupted";
  summary["signal"] = 15;
  write_text(run + "/summary.json", summary.dump(2) + "\n");
  fs::copy(run, tmp / "copy", fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=20"}), tmp / "r.log") == 0);
  INFO(read_text(tmp / "r.log"));
  CHECK(read_text(tmp / "r.log").find("nothing to train: the checkpoint is at step 30") !=
        std::string::npos);
  // config.yaml still says 30 steps and summary.json still says interrupted:
  // nothing in the directory changed but train.log.
  CHECK(snapshot_but_log(run) == snapshot_but_log(tmp / "copy"));
}

TEST_CASE("a run stopped after its last checkpoint, before recording its end, records it") {
  // The end inside an epoch or at its end, on a log boundary or off one.
  const std::vector<std::string> overrides = GENERATE(
      std::vector<std::string>{}, std::vector<std::string>{"train.max_steps=27"},
      std::vector<std::string>{"train.max_steps=30"}, std::vector<std::string>{"train.log_every=4"},
      // Early stopping's patience used up by the final evaluation,
      // which could not stop the run.
      std::vector<std::string>{"train.early_stopping.patience=2",
                               "train.early_stopping.min_delta=100"});
  INFO((overrides.empty() ? "(none)" : overrides.front()));
  TempDir tmp("end-unrecorded");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::string whole = tmp / "whole";
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", whole, overrides), tmp / "whole.log") == 0);
  // Stopped right after the last checkpoint's rename: no summary yet, `last`
  // still at the one before, the retention not yet applied.
  const std::string run = tmp / "run";
  fs::copy(whole, run, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::remove(run + "/summary.json");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    if (e.path().filename() != "last") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  REQUIRE(names.size() >= 2);
  fs::remove(run + "/checkpoints/last");
  fs::create_directory_symlink(names[names.size() - 2], run + "/checkpoints/last");
  const std::string pruned = run + "/checkpoints/step-00000001";
  fs::copy(run + "/checkpoints/" + names.front(), pruned, fs::copy_options::recursive);

  REQUIRE(run_to_end(resume_args(run), tmp / "resume.log") == 0);
  const std::string log = read_text(tmp / "resume.log");
  INFO(log);
  CHECK(log.find("before recording its end: recording it") != std::string::npos);
  // What the run that was not stopped recorded.
  CHECK(read_text(run + "/metrics.jsonl") == read_text(whole + "/metrics.jsonl"));
  const auto summary = summary_of(run), expected = summary_of(whole);
  for (const char* key : {"status", "steps", "epochs", "final_eval", "best_eval", "last_train"}) {
    INFO(key);
    CHECK(summary[key] == expected[key]);
  }
  CHECK(summary["last_checkpoint"] == run + "/checkpoints/" + names.back());
  CHECK(fs::read_symlink(run + "/checkpoints/last") == names.back());
  CHECK_FALSE(fs::exists(pruned));
  for (const char* file : {"/model.safetensors", "/state.safetensors"}) {
    INFO(file);
    CHECK(read_text(run + "/checkpoints/last" + file) ==
          read_text(whole + "/checkpoints/last" + file));
  }
}

TEST_CASE("a resume with another config says which values changed, or that none did") {
  TempDir tmp("resume-config-note");
  const std::string run = finished_run(tmp, "run");
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=50"}), tmp / "more.log") == 0);
  CHECK(read_text(tmp / "more.log")
            .find("the config differs from the run's: train.max_steps: 0 -> 50") !=
        std::string::npos);
  // The directory of an older trainer, which filled in fewer defaults (here
  // a layer's bias): the same values.
  const std::string config = read_text(run + "/config.yaml");
  const auto at = config.find("      bias: true\n");
  REQUIRE(at != std::string::npos);
  const std::string older = std::string(config).erase(at, std::string("      bias: true\n").size());
  write_text(run + "/config.yaml", older);
  write_text(run + "/config.sha256",
             trainer::train::sha256_hex(older.substr(older.find('\n') + 1)) + "\n");
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=52"}), tmp / "old.log") == 0);
  const std::string log = read_text(tmp / "old.log");
  INFO(log);
  CHECK(log.find("train.max_steps: 50 -> 52") != std::string::npos);
  CHECK(log.find("bias") == std::string::npos);  // a filled-in default is no change
  REQUIRE(run_to_end(resume_args(run), tmp / "same.log") == 0);
  CHECK(read_text(tmp / "same.log").find("config.yaml rewritten") == std::string::npos);
}

TEST_CASE("a resume stopped between config.yaml and config.sha256 is finished without a note") {
  TempDir tmp("resume-config-half");
  const std::string run = finished_run(tmp, "run");
  // What the resume would write, from a copy: its config.yaml, and the
  // manifest that keeps that config.
  const std::string copy = tmp / "copy";
  fs::copy(run, copy, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  REQUIRE(run_to_end(resume_args(copy, {"train.max_steps=50"}), tmp / "copy.log") == 0);
  const std::string new_hash = read_text(copy + "/config.sha256");
  REQUIRE(new_hash != read_text(run + "/config.sha256"));
  // As a stop between the two files leaves the run: those two written, its
  // config.sha256 not yet.
  for (const char* file : {"/config.yaml", "/manifest.json"})
    write_text(run + file, read_text(copy + file));
  const auto copies = [&] {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(run))
      n += entry.path().filename().string().rfind("config.", 0) == 0;
    return n;
  };
  const int before = copies();
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=50"}), tmp / "again.log") == 0);
  const std::string log = read_text(tmp / "again.log");
  INFO(log);
  CHECK(log.find("config.yaml rewritten") == std::string::npos);
  CHECK(read_text(run + "/config.sha256") == new_hash);
  CHECK(copies() == before);  // no copy of the new config labelled as the run's
}

TEST_CASE("a config.yaml edited by hand before a resume: the run's own config is kept") {
  TempDir tmp("resume-config-edited");
  const std::string run = finished_run(tmp, "run");
  const std::string original = read_text(run + "/config.yaml");
  const std::string hash = read_text(run + "/config.sha256").substr(0, 12);
  const auto edited_lr = [](std::string text) {
    const auto at = text.find("  lr: 0.01\n");
    REQUIRE(at != std::string::npos);
    return text.replace(at, 11, "  lr: 0.005\n");
  };
  write_text(run + "/config.yaml", edited_lr(original));
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=50"}), tmp / "edited.log") == 0);
  const std::string log = read_text(tmp / "edited.log");
  INFO(log);
  CHECK(log.find("config.yaml had been edited since the run wrote it") != std::string::npos);
  CHECK(log.find("optimizer.lr: 0.01 -> 0.005") != std::string::npos);
  CHECK(log.find("train.max_steps: 0 -> 50") != std::string::npos);
  // The copy kept is the config the run trained with, not the edited file.
  CHECK(read_text(run + "/config." + hash + ".yaml") == original);
  CHECK(read_text(run + "/config.yaml").find("  lr: 0.005\n") != std::string::npos);

  // A resume stopped between config.yaml and config.sha256 (the old hash
  // left): the manifest knows the new config, so it is no edit.
  const std::string sha_before = read_text(run + "/config.sha256");
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=52"}), tmp / "torn.log") == 0);
  write_text(run + "/config.sha256", sha_before);
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=54"}), tmp / "after.log") == 0);
  CHECK(read_text(tmp / "after.log").find("had been edited") == std::string::npos);
  CHECK(read_text(tmp / "after.log").find("train.max_steps: 52 -> 54") != std::string::npos);

  // A run whose manifest keeps no copies (an older trainer's): said, and no
  // edited file is kept under the old config's name.
  const std::string older = finished_run(tmp, "older");
  auto manifest = nlohmann::json::parse(read_text(older + "/manifest.json"));
  manifest.erase("configs");
  write_text(older + "/manifest.json", manifest.dump(2));
  const std::string older_hash = read_text(older + "/config.sha256").substr(0, 12);
  write_text(older + "/config.yaml", edited_lr(read_text(older + "/config.yaml")));
  REQUIRE(run_to_end(resume_args(older, {"train.max_steps=50"}), tmp / "older.log") == 0);
  CHECK(read_text(tmp / "older.log").find("the config the run trained with is not on record") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(older + "/config." + older_hash + ".yaml"));
}

TEST_CASE("--out with --resume is refused, unless it names the run directory itself") {
  TempDir tmp("resume-out");
  const std::string run = finished_run(tmp, "run");
  const auto before = snapshot(run);
  const std::vector<std::string> elsewhere = {"run",   "--resume",    run,
                                              "--out", tmp / "other", "train.max_steps=60"};
  CHECK(run_to_end(elsewhere, tmp / "e.log") == 2);
  CHECK(read_text(tmp / "e.log").find("a resumed run goes on in its own directory") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "other"));
  CHECK(snapshot(run) == before);
  CHECK(run_to_end({"run", "--resume", run, "--out", run}, tmp / "s.log") == 0);
}

TEST_CASE("a resume whose config.yaml is gone, or whose lock file is a folder, says what to do") {
  TempDir tmp("resume-no-config");
  const std::string run = finished_run(tmp, "run");
  fs::rename(run + "/config.yaml", tmp / "kept.yaml");
  CHECK(run_to_end({"run", "--resume", run, "train.max_steps=60"}, tmp / "c.log") == 2);
  CHECK(read_text(tmp / "c.log")
            .find("error: --resume " + run + ": the run's " + run +
                  "/config.yaml is gone\n    put it back") != std::string::npos);
  CHECK(read_text(tmp / "c.log").find("trainer run CONFIG --resume " + run) != std::string::npos);
  fs::rename(tmp / "kept.yaml", run + "/config.yaml");
  fs::remove(run + "/.lock");
  fs::create_directory(run + "/.lock");
  CHECK(run_to_end({"run", "--resume", run, "train.max_steps=60"}, tmp / "l.log") != 0);
  CHECK(read_text(tmp / "l.log")
            .find(": Is a directory; it is the run's lock file, not a "
                  "folder: move that folder away") != std::string::npos);
}

TEST_CASE("a max_steps run that stopped inside an epoch, resumed, keeps its last records") {
  // The checkpoint holds the state before the forced last record and
  // evaluation (a longer run resumed from it writes its own); with nothing
  // to train they are not cut.
  TempDir tmp("resume-max-steps-nothing");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::string run = tmp / "run";
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", run, {"train.max_steps=22"}), tmp / "p.log") == 0);
  const auto before = snapshot_but_log(run);
  REQUIRE(run_to_end(resume_args(run), tmp / "r.log") == 0);
  CHECK(read_text(tmp / "r.log").find("nothing to train") != std::string::npos);
  CHECK(snapshot_but_log(run) == before);
  const auto records = metrics_records(run);
  REQUIRE(!records.empty());
  CHECK(records.back()["split"] == "eval");
  CHECK(records.back()["step"] == 22);
}

TEST_CASE("a run that fails before training leaves summary.json saying why") {
  TempDir tmp("fail-before-training");
  // 40M x 64 weights (10 GiB, and as much again for gradients and moments)
  // under a 4 GB address space: refused when the program allocates, after
  // the run directory was made (the limit of 1 TB it is planned for passes
  // the check against the memory available, which would refuse it sooner).
  std::string huge = tiny_experiment();
  huge.replace(huge.find("out_features: 32"), 16, "out_features: 40000000");
  write_text(tmp / "huge.yaml", huge);
  const int code = std::system(("bash -c 'ulimit -v 4000000; exec " + std::string(TRAINER_BINARY) +
                                " run " + tmp / "huge.yaml" + " --out " + tmp / "run" +
                                " train.memory_limit_mib=1000000' > " + tmp / "run.log" + " 2>&1")
                                   .c_str());
  INFO(read_text(tmp / "run.log"));
  CHECK(WEXITSTATUS(code) == 1);
  REQUIRE(fs::exists(tmp / "run/summary.json"));
  const auto summary = summary_of(tmp / "run");
  CHECK(summary["status"] == "failed");
  CHECK(summary["error"].get<std::string>().find("out of host memory") == 0);
}

TEST_CASE("a directory whose creation stopped before config.sha256 takes a new run") {
  TempDir tmp("unfinished-creation");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // What a failure writing config.sha256 (a full disk) leaves: the lock
  // file and config.yaml, as the run wrote them.
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "made", {"train.max_steps=2"}),
                     tmp / "made.log") == 0);
  for (const auto& e : fs::directory_iterator(tmp / "made"))
    if (e.path().filename() != ".lock" && e.path().filename() != "config.yaml")
      fs::remove_all(e.path());
  const auto copy_of_made = [&](const std::string& name) {
    fs::copy(tmp / "made", tmp / name, fs::copy_options::recursive);
    return tmp / name;
  };

  // Not a run to resume, and the error says how to go on.
  const std::string left = copy_of_made("left");
  CHECK(run_to_end({"run", "--resume", left}, tmp / "resume.log") == 2);
  CHECK(read_text(tmp / "resume.log").find("stopped before it wrote config.sha256") !=
        std::string::npos);
  // It takes a new run.
  CHECK(run_to_end(run_args(tmp / "tiny.yaml", left, {"train.max_steps=2"}), tmp / "left.log") ==
        0);
  INFO(read_text(tmp / "left.log"));
  CHECK(fs::exists(left + "/config.sha256"));
  CHECK(steps_of(left) == 2);

  // Anything of the user's and the directory is refused, left as it was: a
  // file beside them, a config.yaml that no run wrote, a run's config.yaml
  // without the lock file of the run that wrote it.
  const std::string beside = copy_of_made("beside");
  write_text(beside + "/notes.txt", "mine");
  const std::string own = copy_of_made("own");
  write_text(own + "/config.yaml", tiny_experiment());
  const std::string unlocked = copy_of_made("unlocked");
  fs::remove(unlocked + "/.lock");
  for (const std::string& dir : {beside, own, unlocked}) {
    INFO(dir);
    const auto before = snapshot(dir);
    CHECK(run_to_end(run_args(tmp / "tiny.yaml", dir, {"train.max_steps=2"}), tmp / "used.log") ==
          2);
    CHECK(read_text(tmp / "used.log").find("the directory is not empty") != std::string::npos);
    CHECK(snapshot(dir) == before);
    // --resume there says it is no run, and sends a new run elsewhere.
    CHECK(run_to_end({"run", "--resume", dir}, tmp / "resume.log") == 2);
    CHECK_THAT(read_text(tmp / "resume.log"),
               Catch::Contains("not a run directory (no config.sha256)") &&
                   Catch::Contains("a new run needs a directory of its own: trainer run CONFIG "
                                   "--out NEW_DIR") &&
                   !Catch::Contains("--out " + dir));
  }
  // An empty directory is no run either, and takes a new one.
  fs::create_directories(tmp / "empty");
  CHECK(run_to_end({"run", "--resume", tmp / "empty"}, tmp / "resume.log") == 2);
  CHECK_THAT(read_text(tmp / "resume.log"),
             Catch::Contains("to start a run there: trainer run CONFIG --out " + (tmp / "empty")));
}

TEST_CASE("a config path and a run directory named in another encoding make a run that resumes") {
  TempDir tmp("latin-1");
  const std::string config = tmp / "caf\xE9.yaml";  // Latin-1, not UTF-8
  write_text(config, tiny_experiment());
  const std::string dir = tmp / "r\xE9sultat";
  REQUIRE(run_to_end(run_args(config, dir, {"train.max_steps=2"}), tmp / "run.log") == 0);
  // The records are JSON (the bytes that are not UTF-8 replaced), and
  // config.yaml names the path with them escaped, so that it loads again.
  for (const char* file : {"/manifest.json", "/summary.json"}) {
    INFO(file);
    CHECK_NOTHROW(nlohmann::json::parse(read_text(dir + file)));
  }
  CHECK(read_text(dir + "/config.yaml")
            .rfind("# resolved from " + tmp.path().string() + "/caf\\xE9.yaml\n", 0) == 0);
  CHECK(run_to_end(resume_args(dir, {"train.max_steps=4"}), tmp / "resume.log") == 0);
  CHECK(nlohmann::json::parse(read_text(dir + "/summary.json")).at("steps") == 4);
}

TEST_CASE("a config path holding line breaks stays on the first line of config.yaml") {
  TempDir tmp("path-breaks");
  const std::string config = tmp / "a\nb\rc\td.yaml";
  write_text(config, tiny_experiment());
  REQUIRE(run_to_end({"print-config", config, "train.max_steps=2"}, tmp / "printed.yaml") == 0);
  REQUIRE(run_to_end(run_args(config, tmp / "run", {"train.max_steps=2"}), tmp / "run.log") == 0);
  const std::string comment =
      "# resolved from \"" + tmp.path().string() + "/a\\nb\\rc\\td.yaml\"\n";
  for (const std::string& file : {tmp / "printed.yaml", tmp / "run/config.yaml"}) {
    INFO(file);
    const std::string text = read_text(file);
    CHECK(text.rfind(comment, 0) == 0);
    // The file loads back, and the hash is still that of the lines below the comment.
    CHECK(run_to_end({"validate", file}, tmp / "validate.log") == 0);
    CHECK(read_text(tmp / "validate.log") == "ok\n");
    CHECK(text.substr(comment.size()) == read_text(tmp / "printed.yaml").substr(comment.size()));
  }
  CHECK(read_text(tmp / "run/config.sha256") ==
        trainer::train::sha256_hex(read_text(tmp / "printed.yaml").substr(comment.size())) + "\n");
}

TEST_CASE("the manifest's commit is -dirty when the config file is not in it") {
  TempDir tmp("run-dir-git");
  const std::string git = "git -C " + (tmp / "repo") + " -c user.name=t -c user.email=t@t ";
  fs::create_directories(tmp / "repo");
  write_text(tmp / "repo/tiny.yaml", tiny_experiment());
  REQUIRE(std::system(
              (git + "init -q && " + git + "add tiny.yaml && " + git + "commit -qm c >/dev/null")
                  .c_str()) == 0);
  const auto commit_of = [&](const std::string& config, const std::string& out) {
    REQUIRE(run_to_end({"run", tmp / ("repo/" + config), "train.max_steps=1", "--out", tmp / out},
                       tmp / (out + ".log")) == 0);
    return nlohmann::json::parse(read_text(tmp / (out + "/manifest.json")))["git_commit"]
        .get<std::string>();
  };
  const std::string clean = commit_of("tiny.yaml", "clean");
  CHECK(clean.size() == 40);
  // A new experiment's file, not yet added: the commit does not hold it.
  write_text(tmp / "repo/new.yaml", tiny_experiment());
  CHECK(commit_of("new.yaml", "new") == clean + "-dirty");
  CHECK(commit_of("tiny.yaml", "tracked") == clean);  // other untracked files do not count
  // A tracked file changed.
  write_text(tmp / "repo/tiny.yaml", tiny_experiment() + "# edited\n");
  CHECK(commit_of("tiny.yaml", "edited") == clean + "-dirty");
}

TEST_CASE("summary.json names checkpoints by absolute paths, whatever --out was relative to") {
  TempDir tmp("run-dir-relative-out");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::string in_tmp = "cd " + std::string(tmp / "") + " && " + trainer_binary();
  REQUIRE(run_command(in_tmp + " run tiny.yaml --out rel train.max_steps=8", true).code == 0);
  const std::string run = fs::canonical(tmp / "rel").string();
  CHECK(summary_of(run)["last_checkpoint"] == run + "/checkpoints/step-00000008");
  // A resume from another folder, by another relative path.
  REQUIRE(run_command("cd " + std::string(tmp / "rel/checkpoints") + " && " + trainer_binary() +
                          " run --resume .. train.max_steps=14",
                      true)
              .code == 0);
  const auto resumed = summary_of(run);
  CHECK(resumed["resumed_from"] == run + "/checkpoints/step-00000008");
  CHECK(resumed["last_checkpoint"] == run + "/checkpoints/step-00000014");
}

TEST_CASE(
    "a checkpoint moved elsewhere and linked back is resumed from; pruning removes the link") {
  TempDir tmp("run-dir-linked-checkpoint");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::string run = tmp / "run";
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", run, {"train.max_steps=14"}), tmp / "a.log") == 0);
  const std::string moved = tmp / "other-disk/step-00000014";
  fs::create_directories(tmp / "other-disk");
  fs::rename(run + "/checkpoints/step-00000014", moved);
  fs::create_directory_symlink(moved, run + "/checkpoints/step-00000014");
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=21"}), tmp / "b.log") == 0);
  const std::string log = read_text(tmp / "b.log");
  INFO(log);
  CHECK(log.find("resuming from " + run + "/checkpoints/step-00000014: step 14") !=
        std::string::npos);
  // keep_last: 3, so two more checkpoints prune it: the link goes, what it
  // led to stays.
  REQUIRE(run_to_end(resume_args(run, {"train.max_steps=35"}), tmp / "c.log") == 0);
  CHECK_FALSE(fs::exists(fs::symlink_status(run + "/checkpoints/step-00000014")));
  CHECK(fs::exists(moved + "/model.safetensors"));
  // Linked to a disk that is not there now: refused, not resumed from the one before.
  fs::create_directory_symlink(tmp / "unmounted/step-00000042", run + "/checkpoints/step-00000042");
  const auto gone = run_command(trainer_binary() + " run --resume " + run, true);
  CHECK(gone.code != 0);
  CHECK(gone.out.find(run + "/checkpoints/step-00000042 is a link to " +
                      tmp / "unmounted/step-00000042" +
                      ", which is missing (a disk not mounted?)") != std::string::npos);
  CHECK(fs::is_symlink(run + "/checkpoints/step-00000042"));
}

TEST_CASE("a run copied with links followed gets its `last` link back at the next checkpoint") {
  TempDir tmp("run-dir-copied-last");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::string original = tmp / "original", copy = tmp / "copy";
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", original, {"train.max_steps=14"}),
                     tmp / "a.log") == 0);
  // As cp -rL copies: `last` becomes a folder holding step 14's files.
  REQUIRE(run_command("cp -rL " + original + " " + copy).code == 0);
  REQUIRE_FALSE(fs::is_symlink(copy + "/checkpoints/last"));
  REQUIRE(run_to_end(resume_args(copy, {"train.max_steps=21"}), tmp / "b.log") == 0);
  const std::string log = read_text(tmp / "b.log");
  INFO(log);
  CHECK(log.find("was a copy of a checkpoint, not a link") != std::string::npos);
  REQUIRE(fs::is_symlink(copy + "/checkpoints/last"));
  CHECK(fs::read_symlink(copy + "/checkpoints/last") == "step-00000021");
  CHECK_FALSE(fs::exists(fs::symlink_status(copy + "/checkpoints/last.tmp")));
}

TEST_CASE("a run directory that cannot be made says why and what to choose, exit 2") {
  TempDir tmp("run-dir-cannot-make");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  fs::create_symlink(tmp / "missing", tmp / "dangling");
  auto r = run_command(
      trainer_binary() + " run " + tmp / "tiny.yaml" + " --out " + tmp / "dangling", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("it is a link to " + tmp / "missing" +
                   ", which is missing: create that folder, remove the link") != std::string::npos);
  r = run_command(trainer_binary() + " run " + tmp / "tiny.yaml" + " output.dir=/proc/trainer-none",
                  true);
  CHECK(r.code == 2);
  CHECK(r.out.find("a folder cannot be made there: choose another directory") != std::string::npos);
}

TEST_CASE("retention deletes only checkpoints; no run starts inside a run's checkpoints") {
  TempDir tmp("foreign-in-checkpoints");
  const std::string run = finished_run(tmp, "run");  // keeps steps 35, 42 and 48
  // A folder named as a checkpoint, holding the user's file, older than all.
  const fs::path stray = run + "/checkpoints/step-00000001";
  fs::create_directories(stray);
  write_text(stray / "notes.txt", "mine");
  REQUIRE(run_to_end(resume_args(run, {"train.epochs=4"}), tmp / "r.log") == 0);
  CHECK(read_text(stray / "notes.txt") == "mine");
  const std::string log = read_text(tmp / "r.log");
  INFO(log);
  CHECK(log.find(stray.string() + " is kept: it holds 'notes.txt', which no checkpoint writes") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(run + "/checkpoints/step-00000035"));  // checkpoints still go

  // A new run's --out inside them is refused before anything is made.
  const std::string inside = run + "/checkpoints/step-00000002";
  CHECK(run_to_end(run_args(tmp / "tiny.yaml", inside), tmp / "in.log") == 2);
  CHECK(read_text(tmp / "in.log").find("it is inside the checkpoints of the run " + run) !=
        std::string::npos);
  CHECK_FALSE(fs::exists(inside));
  // Nor a sweep's.
  CHECK(run_to_end({"sweep", tmp / "tiny.yaml", "--grid", "seed=1,2", "--out", inside},
                   tmp / "sw.log") == 2);
  CHECK(read_text(tmp / "sw.log").find("it is inside the checkpoints of the run " + run) !=
        std::string::npos);
  CHECK_FALSE(fs::exists(inside));
}

TEST_CASE("a run that lost config.sha256 alone is told how to write it again, and then resumes") {
  TempDir tmp("lost-config-sha256");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::string dir = tmp / "run dir's";  // the command quotes the paths for sh
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", dir, {"train.max_steps=8"}), tmp / "run.log") ==
          0);
  const std::string checksum = read_text(dir + "/config.sha256");
  fs::remove(dir + "/config.sha256");
  CHECK(run_to_end({"run", "--resume", dir, "train.max_steps=10"}, tmp / "resume.log") == 2);
  const std::string log = read_text(tmp / "resume.log");
  INFO(log);
  const std::string lead = "write its checksum again and resume: ";
  const auto at = log.find(lead);
  REQUIRE(at != std::string::npos);
  const std::string command = log.substr(at + lead.size(), log.find('\n', at) - at - lead.size());
  REQUIRE(std::system(command.c_str()) == 0);
  CHECK(read_text(dir + "/config.sha256") == checksum);
  CHECK(run_to_end({"run", "--resume", dir, "train.max_steps=10"}, tmp / "again.log") == 0);
}

TEST_CASE("a resumed session that trains says so in summary.json until it records its end") {
  TempDir tmp("summary-running");
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  const std::string dir = tmp / "run";
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", dir, {"train.max_steps=14"}), tmp / "run.log") ==
          0);
  REQUIRE(summary_of(dir)["status"] == "complete");
  const auto epochs = summary_of(dir)["epochs"].get<std::int64_t>();
  REQUIRE(epochs == 1);  // 14 steps of an epoch's 128
  const std::size_t lines = read_lines(dir + "/metrics.jsonl").size();
  {
    // Killed outright while it trains on: nothing of the earlier end is left.
    TrainerProcess resumed({"run", "--resume", dir, "train.max_steps=100000"}, tmp / "resume.log");
    REQUIRE(wait_for_lines(dir + "/metrics.jsonl", lines + 2, std::chrono::seconds(60)));
    resumed.signal(SIGKILL);
    resumed.wait();
  }
  const nlohmann::json summary = summary_of(dir);
  CHECK(summary["status"] == "running");
  CHECK(summary["steps"] == 14);
  CHECK(summary["resumed_at_step"] == 14);
  CHECK(summary["epochs"] == epochs);
  CHECK(summary["last_checkpoint"].get<std::string>().ends_with("step-00000014"));
  // The next resume goes on from the newest checkpoint and records its end.
  std::int64_t newest = 0;
  for (const auto& entry : fs::directory_iterator(dir + "/checkpoints"))
    if (const std::string name = entry.path().filename().string(); name.starts_with("step-"))
      newest = std::max<std::int64_t>(newest, std::stoll(name.substr(5)));
  REQUIRE(newest >= 14);
  CHECK(run_to_end({"run", "--resume", dir, "train.max_steps=" + std::to_string(newest + 3)},
                   tmp / "again.log") == 0);
  CHECK(summary_of(dir)["status"] == "complete");
  CHECK(summary_of(dir)["steps"] == newest + 3);
}
