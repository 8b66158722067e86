// labels: cpu
// `trainer eval RUN_DIR`: a checkpoint evaluated again gives the metrics the
// run recorded for it (last, best by the run's checkpoint metric, a named
// one), on other data through overrides, also after the run's
// model.init_from file or its training data is gone, with the normalize
// statistics the run computed, in one process for a run of several ranks;
// an image folder standing in for training data that is gone is labelled by
// the class names the run recorded, whatever classes it lacks; a run that
// averaged its weights evaluates the averages; evaluation data changed since
// the checkpoint is said to be, and so is a checkpoint of another run whose
// model differs, and an evaluation of another held-out split than the run's;
// a checkpoint the
// run prunes while it is read is followed to the newer one; bad input is a
// clear error with the usual exit codes (2: usage or config, 1: a damaged
// checkpoint).
#include <algorithm>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/train/run_records.h"
#include "test_image_fixtures.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;

namespace {

std::string replaced_layer(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

nlohmann::json eval_json(const std::string& args) {
  const auto r = run_trainer("eval " + args + " --json");
  INFO(r.out);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("trainer eval gives a checkpoint's recorded metrics again") {
  TempDir tmp("eval-command");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // 3 epochs of 16 steps, a checkpoint and an evaluation after each. The
  // eval loss falls, so ranking by the largest eval.loss (mode max) makes an
  // early checkpoint the best, which `best` must find rather than the last.
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "run", "checkpoint.every_steps=0",
                      "checkpoint.every_epochs=1", "checkpoint.keep_last=0",
                      "checkpoint.metric=eval.loss", "checkpoint.mode=max"},
                     tmp / "run.log") == 0);
  const auto records = eval_records(tmp / "run");
  REQUIRE(records.size() == 3);

  // Default: the newest checkpoint, whose weights the final evaluation used.
  const auto last = eval_json(tmp / "run");
  CHECK(last["step"] == 48);
  CHECK(last["loss"].get<double>() == records.at(48)["loss"].get<double>());
  CHECK(last["accuracy"].get<double>() == records.at(48)["accuracy"].get<double>());
  CHECK(last["samples"] == 128);
  CHECK_FALSE(last.contains("top5"));  // 4 classes

  // A named one, and the best by the run's checkpoint.metric (eval.loss, max).
  const auto first = eval_json(tmp / "run --checkpoint step-00000016");
  CHECK(first["step"] == 16);
  CHECK(first["loss"].get<double>() == records.at(16)["loss"].get<double>());
  std::int64_t best_step = 0;
  for (const auto& [step, record] : records)
    if (best_step == 0 ||
        record["loss"].get<double>() > records.at(best_step)["loss"].get<double>())
      best_step = step;
  REQUIRE(best_step != 48);
  const auto best = eval_json(tmp / "run --checkpoint best");
  CHECK(best["step"] == best_step);
  CHECK(best["loss"].get<double>() == records.at(best_step)["loss"].get<double>());
  CHECK_THAT(run_trainer("eval " + (tmp / "run") + " --checkpoint best", true).out,
             !Catch::Contains("was not kept"));
  // The best evaluation's checkpoint not kept (only the newest is): `best`
  // is the best of those kept, and a note says which was better.
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "newest", "checkpoint.every_steps=0",
                      "checkpoint.every_epochs=1", "checkpoint.keep_last=1",
                      "checkpoint.metric=eval.loss", "checkpoint.mode=max"},
                     tmp / "newest.log") == 0);
  const auto newest = run_trainer("eval " + (tmp / "newest") + " --checkpoint best", true);
  CHECK(newest.code == 0);
  CHECK_THAT(newest.out,
             Catch::Contains("note: the run's best evaluation by eval.loss was at step " +
                             std::to_string(best_step) + " (") &&
                 Catch::Contains("whose weights no kept checkpoint holds (checkpoint.keep_best: "
                                 "0); this is the best of those kept, step 48"));
  // A checkpoint folder's path works too.
  CHECK(eval_json((tmp / "run") + " --checkpoint " +
                  (tmp / "run/checkpoints/step-00000032"))["step"] == 32);

  // Other data through an override: another synthetic eval set.
  const auto other = eval_json(tmp / "run data.eval.size=40 data.eval.seed=9");
  CHECK(other["samples"] == 40);
  CHECK(other["loss"].get<double>() != last["loss"].get<double>());

  // The text form names the checkpoint and the metrics.
  const auto text = run_trainer("eval " + (tmp / "run"));
  CHECK(text.code == 0);
  CHECK_THAT(text.out, Catch::Contains("checkpoint " + (tmp / "run/checkpoints/step-00000048")) &&
                           Catch::Contains("on 128 samples"));

  // A run started from model.init_from evaluates after that file is gone:
  // the checkpoint's weights replace everything.
  const std::string init = tmp / "init.safetensors";
  fs::copy_file(tmp / "run/checkpoints/step-00000016/model.safetensors", init);
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "tuned", "train.epochs=1",
                      "model.init_from=" + init},
                     tmp / "tuned.log") == 0);
  fs::remove(init);
  const auto tuned = eval_json(tmp / "tuned");
  CHECK(tuned["loss"].get<double>() == eval_records(tmp / "tuned").at(16)["loss"].get<double>());
  // Another run's checkpoint: of the same model (model.init_from aside), as
  // it is; of another (tanh for relu), said so, with the values that differ.
  const std::string tuned_checkpoint = tmp / "tuned/checkpoints/step-00000016";
  CHECK_THAT(run_trainer("eval " + (tmp / "run") + " --checkpoint " + tuned_checkpoint, true).out,
             !Catch::Contains("warning"));
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "tanh", "train.epochs=1",
                      "model.layers[2].type=tanh"},
                     tmp / "tanh.log") == 0);
  const auto crossed = run_trainer(
      "eval " + (tmp / "run") + " --checkpoint " + (tmp / "tanh/checkpoints/step-00000016"), true);
  CHECK(crossed.code == 0);
  CHECK_THAT(crossed.out, Catch::Contains("is another run's, whose model differs from the one") &&
                              Catch::Contains("(model.layers[2].type: tanh -> relu)"));
  // With the model made that run's by override: the same model, no warning.
  CHECK_THAT(run_trainer("eval " + (tmp / "run") + " model.layers[2].type=tanh --checkpoint " +
                             (tmp / "tanh/checkpoints/step-00000016"),
                         true)
                 .out,
             !Catch::Contains("warning"));
  // model.init_from given to eval would be silently unused: refused.
  const auto from = run_trainer("eval " + (tmp / "tuned") + " model.init_from=" + init, true);
  CHECK(from.code == 2);
  CHECK_THAT(from.out, Catch::Contains("trainer eval reads the weights of one of the run's "
                                       "checkpoints, not model.init_from"));
  // A setting of training alone: the same evaluation, with a warning.
  const auto trained =
      run_trainer("eval " + (tmp / "run") + " optimizer.lr=5 train.epochs=7", true);
  CHECK(trained.code == 0);
  CHECK_THAT(trained.out,
             Catch::Contains("warning: optimizer.lr=5: trainer eval does not train, so this "
                             "changes nothing") &&
                 Catch::Contains("warning: train.epochs=7: trainer eval does not train") &&
                 Catch::Contains("on 128 samples"));
  CHECK_THAT(run_trainer("eval " + (tmp / "run") + " data.eval.size=40", true).out,
             !Catch::Contains("does not train"));
}

TEST_CASE("trainer eval batches as the run did: the micro-batch auto chose; no training checks") {
  TempDir tmp("eval-batches");
  write_text(tmp / "bn.yaml", replaced_layer(tiny_experiment(), "{type: relu}",
                                             "{type: batchnorm}\n    - {type: relu}"));
  // A limit that makes micro_batch_size: auto split the batch of 256, and an
  // evaluation of 2 micro-batches: the run's record holds 2 x its micro-batch.
  REQUIRE(run_to_end({"run", tmp / "bn.yaml", "--out", tmp / "run", "train.max_steps=2",
                      "train.batch_size=256", "train.micro_batch_size=auto",
                      "train.memory_limit_mib=4", "train.eval_batches=2",
                      "data.train.shape=[1, 64, 64]", "data.eval.shape=[1, 64, 64]"},
                     tmp / "run.log") == 0);
  const std::string log = read_text(tmp / "run.log");
  INFO(log);
  REQUIRE(log.find("micro_batch_size: auto: micro-batch ") != std::string::npos);
  REQUIRE(log.find("micro_batch_size: auto: micro-batch 256 ") == std::string::npos);
  const auto record = eval_records(tmp / "run").at(2);
  const auto again = eval_json(tmp / "run");
  CHECK(again["samples"] == record["samples"]);
  CHECK(again["loss"].get<double>() == record["loss"].get<double>());
  // Part of the set, as the run's train.eval_batches takes: said so.
  REQUIRE(again["samples"].get<int>() < 128);
  const auto part = run_trainer("eval " + (tmp / "run"), true);
  CHECK_THAT(part.out, Catch::Contains("note: " + std::to_string(again["samples"].get<int>()) +
                                       " of the 128 evaluation samples, as train.eval_batches 2 "
                                       "takes (the run's config, unless overridden); "
                                       "train.eval_batches=0 evaluates them all"));
  // Another batch than the run's: its choice does not apply, and a note says so.
  const auto other = run_trainer("eval " + (tmp / "run") + " train.batch_size=128 --json", true);
  CHECK(other.code == 0);
  CHECK_THAT(other.out, Catch::Contains("note: micro_batch_size: auto: train.batch_size is not the "
                                        "run's, so its choice does not apply"));
  // A record edited or damaged so that its parts do not make the batch: a
  // note naming manifest.json, and the config's own micro-batch (it was
  // taken for the config's error at config.yaml).
  const std::string manifest_path = tmp / "run/manifest.json";
  const std::string manifest_text = read_text(manifest_path);
  nlohmann::json damaged = nlohmann::json::parse(manifest_text);
  damaged["batch"]["micro"] = 7;
  write_text(manifest_path, damaged.dump());
  const auto noted = run_trainer("eval " + (tmp / "run") + " --json", true);
  CHECK(noted.code == 0);
  CHECK_THAT(noted.out,
             Catch::Contains("note: micro_batch_size: auto: " + manifest_path +
                             " records a batch of micro-batch 7 x accumulation " +
                             std::to_string(damaged["batch"]["accumulation"].get<int>()) +
                             " x 1 rank(s), which is not its global batch 256 (the file was "
                             "edited or damaged)"));
  write_text(manifest_path, manifest_text);
  // One sample at a time through a batchnorm: evaluation uses its running
  // statistics, so the training-only refusal does not apply.
  const auto one = eval_json(tmp /
                             "run train.batch_size=1 train.micro_batch_size=1 "
                             "train.eval_batches=0");
  CHECK(one["samples"] == 128);
}

TEST_CASE("trainer eval: bad input is a clear error") {
  TempDir tmp("eval-errors");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=1"},
                     tmp / "run.log") == 0);

  // Not a run directory.
  auto r = run_trainer("eval " + tmp.path().string(), true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("not a run directory (no config.yaml)"));
  // A checkpoint that is not there: what there is.
  r = run_trainer("eval " + (tmp / "run") + " --checkpoint step-00000099", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("no checkpoint 'step-00000099'") &&
                        Catch::Contains("holds step-00000016, step-00000014"));
  // A weights file's path that is not there: said so, not taken for a name.
  r = run_trainer("eval " + (tmp / "run") + " --checkpoint exported/none.safetensors", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("no such file or folder 'exported/none.safetensors' (nor a "
                                    "checkpoint of that name: ") &&
                        Catch::Contains("holds step-00000016, step-00000014"));
  // A file inside a checkpoint: the folder it belongs to.
  r = run_trainer("eval " + (tmp / "run") + " --checkpoint step-00000016/model.safetensors", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("is a file inside the checkpoint folder ") &&
                        Catch::Contains("give the folder: " + (tmp / "run") +
                                        "/checkpoints/step-00000016"));
  // Weights from elsewhere: their file is evaluated as it is, with the
  // checkpoint's figures; their folder, or another file, is no checkpoint.
  fs::create_directories(tmp / "elsewhere");
  fs::copy_file(tmp / "run/checkpoints/step-00000016/model.safetensors",
                tmp / "elsewhere/model.safetensors");
  const auto alone =
      eval_json((tmp / "run") + " --checkpoint " + (tmp / "elsewhere/model.safetensors"));
  CHECK(alone["step"].is_null());
  CHECK(alone["loss"] == eval_json((tmp / "run") + " --checkpoint step-00000016")["loss"]);
  write_text(tmp / "elsewhere/notes.txt", "weights");
  for (const std::string& given : {tmp / "elsewhere", tmp / "elsewhere/notes.txt"}) {
    r = run_trainer("eval " + (tmp / "run") + " --checkpoint " + given, true);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("'" + given + "' is a ") &&
                          Catch::Contains("but no checkpoint: one is a folder of "
                                          "model.safetensors, state.safetensors and SHA256SUMS") &&
                          Catch::Contains("--checkpoint FILE.safetensors"));
  }
  // Weights of another model: what does not fit, and what to give.
  auto other = trainer::checkpoint::read_safetensors(tmp / "elsewhere/model.safetensors");
  for (auto& t : other.tensors) t.name = "module." + t.name;
  write_text(tmp / "elsewhere/other.safetensors", trainer::checkpoint::encode_safetensors(other));
  r = run_trainer(
      "eval " + (tmp / "run") + " --checkpoint " + (tmp / "elsewhere/other.safetensors"), true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("does not fit the model") &&
                        Catch::Contains("every name in the file starts with 'module.'"));
  // A release folder's SHA256SUMS beside weights alone makes no checkpoint of them.
  write_text(tmp / "elsewhere/SHA256SUMS", "0  model.safetensors\n");
  CHECK(eval_json((tmp / "run") + " --checkpoint " +
                  (tmp / "elsewhere/model.safetensors"))["loss"] == alone["loss"]);
  // A typo in an override: the key and a suggestion.
  r = run_trainer("eval " + (tmp / "run") + " data.evl.size=3", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("did you mean 'eval'?"));
  // A data file that cannot be opened: at the override that names it.
  r = run_trainer("eval " + (tmp / "run") + " 'data.eval={type: csv, path: /nonexistent/e.csv}'",
                  true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("<command line>:1:29: error: data.eval.path: cannot open the "
                                    "csv source: data file '/nonexistent/e.csv'"));
  // No eval data in the run's config.
  {
    std::string text = tiny_experiment();
    const auto at = text.find("  eval:");
    REQUIRE(at != std::string::npos);
    text.erase(at, text.find('\n', at) - at + 1);
    write_text(tmp / "no_eval.yaml", text);
  }
  REQUIRE(run_to_end({"run", tmp / "no_eval.yaml", "--out", tmp / "no_eval_run", "train.epochs=1"},
                     tmp / "no_eval.log") == 0);
  r = run_trainer("eval " + (tmp / "no_eval_run"), true);
  CHECK(r.code == 2);
  // The way to evaluate it is other data: a split of its training set would
  // hold out samples it trained on.
  CHECK_THAT(r.out, Catch::Contains("has no eval data") &&
                        Catch::Contains("data.split would hold out samples this run trained on") &&
                        !Catch::Contains("data.split=0.1"));
  // Another model's checkpoint, without overrides: this run's checkpoints, or that run.
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "wide", "train.epochs=1",
                      "model.layers[1].out_features=24"},
                     tmp / "wide.log") == 0);
  r = run_trainer("eval " + (tmp / "run") + " --checkpoint " + (tmp / "wide/checkpoints/last"),
                  true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("does not fit the model") &&
                        Catch::Contains("give one of this run's checkpoints (" + (tmp / "run") +
                                        "/checkpoints), or evaluate another run's checkpoint "
                                        "with that run's directory") &&
                        !Catch::Contains("drop the model.* overrides"));
  // The run's config.yaml edited by hand to another model: the edit is named.
  {
    std::string edited = read_text(tmp / "wide/config.yaml");
    const auto at = edited.find("out_features: 24");
    REQUIRE(at != std::string::npos);
    write_text(tmp / "wide/config.yaml", edited.replace(at, 16, "out_features: 20"));
  }
  r = run_trainer("eval " + (tmp / "wide"), true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("does not fit the model") &&
                        Catch::Contains((tmp / "wide/config.yaml") +
                                        " was edited by hand since the run wrote it") &&
                        !Catch::Contains("give one of this run's checkpoints"));
  // A sweep's directory: one of its trials.
  fs::create_directories(tmp / "sweep/trials/trial-000");
  write_text(tmp / "sweep/sweep.yaml", "grid: {}\n");
  write_text(tmp / "sweep/config.yaml", tiny_experiment());
  r = run_trainer("eval " + (tmp / "sweep"), true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("is a sweep's directory: evaluate one of its trials, e.g. "
                                    "trainer eval " +
                                    (tmp / "sweep/trials/trial-000")));
  r = run_trainer("run --resume " + (tmp / "sweep"), true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("it is a sweep's directory: its runs are its trials (trainer "
                                    "run --resume " +
                                    (tmp / "sweep/trials/trial-000") + ")"));
  // A run's checkpoint, or its checkpoints folder, given for the run.
  for (const std::string inside :
       {"/checkpoints/last", "/checkpoints/step-00000016/", "/checkpoints"}) {
    INFO(inside);
    const std::string name = inside == "/checkpoints" ? "last" : inside.substr(13, 16);
    r = run_trainer("eval " + (tmp / "run") + inside, true);
    CHECK(r.code == 2);
    CHECK_THAT(r.out,
               Catch::Contains("not a run directory: it is in the run " + (tmp / "run") +
                               ": trainer eval " + (tmp / "run") + " --checkpoint " +
                               (name.back() == '/' ? name.substr(0, name.size() - 1) : name)));
    r = run_trainer("run --resume " + (tmp / "run") + inside, true);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("it is in the run " + (tmp / "run") +
                                      ": trainer run --resume " + (tmp / "run")));
  }
  // A config.yaml that is a link to itself: the path and what to do.
  fs::create_directories(tmp / "loop");
  fs::create_symlink("config.yaml", tmp / "loop/config.yaml");
  r = run_trainer("eval " + (tmp / "loop"), true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("error: cannot use '" + (tmp / "loop/config.yaml") +
                                    "': Too many levels of symbolic links\n    a symbolic link "
                                    "on that path leads back to itself"));
  // A damaged checkpoint: the file and why, exit 1.
  {
    std::fstream f(tmp / "run/checkpoints/step-00000016/model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x55');
  }
  r = run_trainer("eval " + (tmp / "run"), true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("step-00000016/model.safetensors: checksum mismatch"));
}

TEST_CASE("trainer eval: a loss that is not finite is an error, as in training") {
  TempDir tmp("eval-overflow");
  std::string text = tiny_experiment();
  for (const std::string layer : {"    - {type: relu}\n", "    - {type: dropout, p: 0.2}\n"}) {
    const auto at = text.find(layer);
    REQUIRE(at != std::string::npos);
    text.erase(at, layer.size());
  }
  write_text(tmp / "tiny.yaml", text);
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=1"},
                     tmp / "run.log") == 0);
  // Inputs scaled past float's range: the logits overflow.
  const auto r = run_trainer("eval " + (tmp / "run") +
                                 " 'data.eval_transforms=[{type: scale, factor: 1.0e-30}, "
                                 "{type: scale, factor: 1.0e-30}]' --json",
                             true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("error: the evaluation loss of checkpoint ") &&
                        Catch::Contains("step-00000016 is NaN (over 128 samples)") &&
                        Catch::Contains("check the evaluation data"));
  CHECK(r.out.find("\"loss\"") == std::string::npos);
}

TEST_CASE("a checkpoint pruned while it is read: last and best follow the run, a name does not") {
  TempDir tmp("eval-pruned");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=1"},
                     tmp / "run.log") == 0);
  const trainer::checkpoint::CheckpointStore store(tmp / "run");
  const fs::path checkpoints = tmp / "run/checkpoints";
  REQUIRE(fs::is_directory(checkpoints / "step-00000016"));

  // The run writes a newer checkpoint and prunes the one being read: the
  // read fails as a real one would, and the newest is read instead.
  std::vector<std::string> reads;
  const auto pruned_into = [&](const std::string& newer) {
    return [&reads, &checkpoints, newer](const std::string& path) {
      reads.push_back(fs::path(path).filename().string());
      if (reads.size() > 1) return;
      fs::rename(path, checkpoints / newer);
      trainer::checkpoint::verify_checkpoint(path);  // throws: the folder is gone
    };
  };
  const std::string read = store.read("last", "eval.loss", false, pruned_into("step-00000017"));
  CHECK(fs::path(read).filename() == "step-00000017");
  CHECK(reads == std::vector<std::string>{"step-00000016", "step-00000017"});

  // Pruning removes the folder's files before the folder: a read that fails
  // between the two, with a newer checkpoint written, follows it too.
  reads.clear();
  const auto emptied_for = [&](const std::string& newer) {
    return [&reads, &checkpoints, newer](const std::string& path) {
      reads.push_back(fs::path(path).filename().string());
      if (reads.size() > 1) return;
      fs::copy(path, checkpoints / newer);
      fs::remove(fs::path(path) / "model.safetensors");
      trainer::checkpoint::verify_checkpoint(path);  // throws: its files are gone
    };
  };
  const std::string followed = store.read("last", "eval.loss", false, emptied_for("step-00000018"));
  CHECK(fs::path(followed).filename() == "step-00000018");
  CHECK(reads == std::vector<std::string>{"step-00000017", "step-00000018"});
  fs::remove_all(checkpoints / "step-00000017");

  // A checkpoint named outright is that one or an error; so is a failure
  // that leaves the folder in place.
  reads.clear();
  CHECK_THROWS_AS(store.read("step-00000018", "eval.loss", false, pruned_into("step-00000019")),
                  trainer::checkpoint::CheckpointError);
  CHECK(reads == std::vector<std::string>{"step-00000018"});
  const auto fails = [&](const std::string& path) {
    reads.push_back(fs::path(path).filename().string());
    throw trainer::checkpoint::CheckpointError(path + ": damaged");
  };
  reads.clear();
  CHECK_THROWS_WITH(store.read("last", "eval.loss", false, fails),
                    Catch::Contains("step-00000019: damaged"));
  CHECK(reads.size() == 1);
}

namespace {

// Replaces the first `from` in `text` by `to` (REQUIREs that it is there).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("trainer eval normalises with the run's statistics, in one process") {
  TempDir tmp("eval-statistics");
  write_text(tmp / "norm.yaml", replaced(tiny_experiment(), "  workers: 2\n",
                                         "  workers: 2\n  transforms: [{type: normalize}]\n"));
  REQUIRE(run_to_end({"run", tmp / "norm.yaml", "--out", tmp / "run", "train.epochs=1"},
                     tmp / "run.log") == 0);
  const double recorded = eval_records(tmp / "run").at(16)["loss"].get<double>();
  const auto manifest = nlohmann::json::parse(read_text(tmp / "run/manifest.json"));
  REQUIRE(manifest["normalize_statistics"].size() == 1);
  CHECK(manifest["normalize_statistics"][0]["mean"].size() == 1);

  // The training set is another one now: the run's statistics still apply,
  // so the checkpoint gives its recorded loss, not one normalised anew.
  CHECK(eval_json(tmp / "run data.train.seed=11")["loss"].get<double>() == recorded);

  // A run of 2 ranks with a fixed micro-batch (as its config.yaml says)
  // evaluates in one process with that micro-batch (whose sums round apart
  // from the run's batches of 32).
  write_text(tmp / "run/config.yaml", replaced(replaced(read_text(tmp / "run/config.yaml"),
                                                        "world_size: 1", "world_size: 2"),
                                               "micro_batch_size: 0", "micro_batch_size: 16"));
  CHECK(eval_json(tmp / "run")["loss"].get<double>() == Approx(recorded).epsilon(1e-6));
  // Part of the set: train.eval_batches as given, on each of the run's ranks.
  CHECK_THAT(run_trainer("eval " + (tmp / "run") + " train.eval_batches=2", true).out,
             Catch::Contains("note: 64 of the 128 evaluation samples, as train.eval_batches 2 "
                             "takes on each of the run's 2 ranks (the run's config"));

  // Transforms overridden before the normalize: the run's statistics are of
  // other samples, so they are computed again; after it, the run's still
  // apply (the micro-batch of 16 above rounds the sums apart).
  const auto eval_with = [&](const std::string& transforms) {
    return run_trainer(
        "eval " + (tmp / "run") + " data.train.seed=11 'data.transforms=" + transforms + "' --json",
        true);
  };
  const auto scaled = eval_with("[{type: scale, factor: 2}, {type: normalize}]");
  CHECK(scaled.code == 0);
  CHECK_THAT(scaled.out,
             Catch::Contains("note: data.transforms: normalize 0 follows other transforms than "
                             "in the run") &&
                 !Catch::Contains("normalize: the statistics the run computed"));
  const auto after = eval_with("[{type: normalize}, {type: scale, factor: 1}]");
  CHECK(after.code == 0);
  CHECK_THAT(after.out, Catch::Contains("normalize: the statistics the run computed") &&
                            !Catch::Contains("follows other transforms"));
  CHECK(eval_json(tmp / "run data.train.seed=11 'data.transforms=[{type: normalize}, {type: "
                        "scale, factor: 1}]'")["loss"]
            .get<double>() == Approx(recorded).epsilon(1e-6));

  // A model override the checkpoint does not fit: a usage error.
  const auto r = run_trainer("eval " + (tmp / "run") + " model.layers[1].out_features=16", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("does not fit the model") && Catch::Contains("fc1.weight") &&
                        Catch::Contains("evaluate with the run's own model: drop the model.* "
                                        "overrides"));

  // Recorded statistics that cannot be used (a std of 0; NaN, which makes
  // the file no JSON): a note says so, and they are computed from the data.
  const std::string manifest_path = tmp / "run/manifest.json";
  auto damaged = manifest;
  damaged["normalize_statistics"][0]["std"] = {0.0};
  write_text(manifest_path, damaged.dump());
  auto noted = run_trainer("eval " + (tmp / "run") + " data.train.seed=11", true);
  CHECK(noted.code == 0);
  CHECK_THAT(noted.out, Catch::Contains("note: " + manifest_path +
                                        ": normalize_statistics[0] has std 0.0 (not a number "
                                        "from 1e-30 to 1e30): the recorded normalize statistics "
                                        "cannot be used; they are computed from the training "
                                        "data again"));
  // A std that float32 holds as 0.
  damaged["normalize_statistics"][0]["std"] = {1e-320};
  write_text(manifest_path, damaged.dump());
  noted = run_trainer("eval " + (tmp / "run") + " data.train.seed=11", true);
  CHECK(noted.code == 0);
  CHECK_THAT(noted.out, Catch::Contains("(not a number from 1e-30 to 1e30)"));
  // Statistics of another channel count: not the config's error.
  damaged["normalize_statistics"][0]["mean"] = {0.1, 0.2};
  damaged["normalize_statistics"][0]["std"] = {0.1, 0.2};
  write_text(manifest_path, damaged.dump());
  noted = run_trainer("eval " + (tmp / "run") + " data.train.seed=11", true);
  CHECK(noted.code == 0);
  CHECK_THAT(noted.out, Catch::Contains("note: " + manifest_path +
                                        ": the recorded normalize statistics do not fit the "
                                        "samples (transform 'normalize': mean and std need 1 "
                                        "value") &&
                            !Catch::Contains("normalize: the statistics the run computed"));
  // A transform that does not fit for another reason: the config's error, no
  // note that the statistics do not fit (only that the normalize follows
  // other transforms than the run's).
  noted = run_trainer("eval " + (tmp / "run") +
                          " 'data.transforms=[{type: random_crop, size: 64}, {type: normalize}]'",
                      true);
  CHECK(noted.code == 2);
  CHECK_THAT(noted.out, Catch::Contains("transform 'random_crop': size [64, 64] is larger") &&
                            !Catch::Contains("do not fit the samples"));
  std::string text = manifest.dump();
  const std::string mean = manifest["normalize_statistics"][0]["mean"].dump();
  text.replace(text.find(mean), mean.size(), "[NaN]");
  write_text(manifest_path, text);
  noted = run_trainer("eval " + (tmp / "run") + " data.train.seed=11", true);
  CHECK(noted.code == 0);
  CHECK_THAT(noted.out, Catch::Contains("note: " + manifest_path + ": it is not valid JSON"));
  CHECK(eval_json(tmp / "run data.train.seed=11")["loss"].get<double>() != recorded);
}

TEST_CASE("trainer eval where the training data is gone: the eval source stands in for it") {
  TempDir tmp("eval-no-train-data");
  // CSV files: 4 features and a class label in 0..3.
  const auto write_csv = [&](const std::string& path, int rows, int seed) {
    std::string text = "a,b,c,d,label\n";
    for (int r = 0; r < rows; ++r) {
      const int label = (r * 7 + seed) % 4;
      for (int f = 0; f < 4; ++f)
        text += std::to_string(((r + 1) * (f + seed)) % 9 * 0.25 + (f == label ? 1.5 : 0)) + ",";
      text += std::to_string(label) + "\n";
    }
    write_text(path, text);
  };
  write_csv(tmp / "train.csv", 64, 1);
  write_csv(tmp / "test.csv", 24, 2);
  std::string config = tiny_experiment();
  config =
      replaced(config, "  train: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 512}",
               "  train: {type: csv, path: " + (tmp / "train.csv") + ", label: label, classes: 4}");
  config =
      replaced(config, "  eval: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 128}",
               "  eval: {type: csv, path: " + (tmp / "test.csv") + ", label: label, classes: 4}");
  write_text(tmp / "csv.yaml", config);
  REQUIRE(run_to_end({"run", tmp / "csv.yaml", "--out", tmp / "run", "train.epochs=2",
                      "train.batch_size=16"},
                     tmp / "run.log") == 0);
  const auto records = eval_records(tmp / "run");
  REQUIRE(records.count(8) == 1);

  std::filesystem::remove(tmp / "train.csv");
  auto r = run_trainer("eval " + (tmp / "run") + " --json", true);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("eval: the training data cannot be opened here "
                                    "(data.train.path: cannot open the csv source") &&
                        Catch::Contains("data.eval gives the model's input shape instead, and "
                                        "the classes come from its `classes:`"));
  const auto json = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  CHECK(json["samples"] == 24);
  CHECK(json["loss"].get<double>() == records.at(8)["loss"].get<double>());
  CHECK(json["accuracy"].get<double>() == records.at(8)["accuracy"].get<double>());

  // Both gone: each named at its own key, a config error.
  std::filesystem::remove(tmp / "test.csv");
  r = run_trainer("eval " + (tmp / "run"), true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("error: data.train.path: cannot open the csv source") &&
                        Catch::Contains("error: data.eval.path: cannot open the csv source") &&
                        Catch::Contains("2 errors"));
  // Each at its own line of the run's config.yaml.
  const std::string recorded = read_text(tmp / "run/config.yaml");
  const auto at_line_of = [&](const std::string& file, const std::string& key) {
    const auto line =
        1 + std::count(recorded.begin(), recorded.begin() + recorded.find(file), '\n');
    return (tmp / "run/config.yaml") + ":" + std::to_string(line) + ":11: error: " + key + ":";
  };
  CHECK_THAT(r.out, Catch::Contains(at_line_of("train.csv", "data.train.path")) &&
                        Catch::Contains(at_line_of("test.csv", "data.eval.path")));
}

TEST_CASE("trainer eval where the training data is gone: the stand-in keeps the run's classes") {
  TempDir tmp("eval-stand-in-classes");
  // Labels read off the files (no `classes:`): 0..3 in training, 0..2 in the
  // evaluation set, which lacks the largest class.
  const auto write_csv = [&](const std::string& path, int rows, int classes) {
    std::string text = "a,b,label\n";
    for (int r = 0; r < rows; ++r)
      text += std::to_string(r % 5 * 0.5) + "," + std::to_string(r % classes) + "," +
              std::to_string(r % classes) + "\n";
    write_text(path, text);
  };
  write_csv(tmp / "train.csv", 64, 4);
  write_csv(tmp / "test.csv", 24, 3);
  std::string config = tiny_experiment();
  config = replaced(config, "  train: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 512}",
                    "  train: {type: csv, path: " + (tmp / "train.csv") + ", label: label}");
  config = replaced(config, "  eval: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 128}",
                    "  eval: {type: csv, path: " + (tmp / "test.csv") + ", label: label}");
  write_text(tmp / "csv.yaml", config);
  REQUIRE(run_to_end({"run", tmp / "csv.yaml", "--out", tmp / "run", "train.max_steps=4",
                      "train.batch_size=16"},
                     tmp / "run.log") == 0);
  const auto with_training_data = run_trainer("eval " + (tmp / "run") + " --json", true);
  REQUIRE(with_training_data.code == 0);

  std::filesystem::remove(tmp / "train.csv");
  auto r = run_trainer("eval " + (tmp / "run") + " --json", true);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("data.eval gives the model's input shape instead, and the "
                                    "classes come from the run's manifest (4)"));
  const auto json = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const auto expected =
      nlohmann::json::parse(with_training_data.out.substr(with_training_data.out.find('{')));
  CHECK(json["loss"].get<double>() == expected["loss"].get<double>());

  // A run whose manifest does not say (an older trainer's): the error is the
  // stand-in's, named by the key that mends it.
  const std::string manifest_path = tmp / "run/manifest.json";
  auto manifest = nlohmann::json::parse(read_text(manifest_path));
  manifest["data"]["train"].erase("classes");
  write_text(manifest_path, manifest.dump(2));
  r = run_trainer("eval " + (tmp / "run"), true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("as data.eval has no `classes:`") &&
                        Catch::Contains("or data.eval.classes: 4") &&
                        !Catch::Contains("data.train.classes"));
  r = run_trainer("eval " + (tmp / "run") + " data.eval.classes=4 --json", true);
  CHECK(r.code == 0);
}

TEST_CASE("trainer eval where an image folder is gone: the run's class names label the stand-in") {
  TempDir tmp("eval-class-names");
  // Three classes of 3x3 RGB images told apart by their brightness; the
  // evaluation folder lacks class b, so its own numbering would call c 1.
  const auto write_class = trainer::data::testing::write_image_class;
  for (const auto& [name, value] : {std::pair{"a", 20}, {"b", 120}, {"c", 220}})
    write_class(tmp / "train", name, value, 24);
  write_class(tmp / "eval", "a", 23, 8);
  write_class(tmp / "eval", "c", 217, 8);
  write_text(tmp / "images.yaml",
             "name: images\n"
             "seed: 1\n"
             "data:\n"
             "  train: {type: image_folder, root: " +
                 (tmp / "train") +
                 ", size: [3, 3]}\n"
                 "  eval: {type: image_folder, root: " +
                 (tmp / "eval") +
                 ", size: [3, 3]}\n"
                 "  workers: 1\n"
                 "model:\n"
                 "  layers: [{type: flatten}, {type: linear, out_features: 3}]\n"
                 "optimizer: {type: sgd, lr: 0.5}\n"
                 "train: {epochs: 4, batch_size: 8, log_every: 9}\n"
                 "backend: {threads: 1}\n");
  REQUIRE(run_to_end({"run", tmp / "images.yaml", "--out", tmp / "run"}, tmp / "run.log") == 0);
  const auto manifest = nlohmann::json::parse(read_text(tmp / "run/manifest.json"));
  CHECK(manifest["class_names"] == nlohmann::json({"a", "b", "c"}));
  const auto records = eval_records(tmp / "run");
  REQUIRE_FALSE(records.empty());
  const nlohmann::json& final_eval = records.rbegin()->second;

  fs::remove_all(tmp / "train");
  const auto again = eval_json(tmp / "run");
  CHECK(again["samples"] == 16);
  CHECK(again["accuracy"].get<double>() == final_eval["accuracy"].get<double>());
  CHECK(again["loss"].get<double>() == Approx(final_eval["loss"].get<double>()).epsilon(1e-6));

  // A damaged record, a name twice, is not taken for the run's classes.
  auto damaged = manifest;
  damaged["class_names"] = nlohmann::json({"a", "a", "c"});
  write_text(tmp / "run/manifest.json", damaged.dump(2) + "\n");
  CHECK(trainer::train::recorded_class_names(tmp / "run").empty());
}

TEST_CASE("trainer eval of a run that averaged its weights evaluates the averages") {
  TempDir tmp("eval-ema");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=1",
                      "train.ema_decay=0.9"},
                     tmp / "run.log") == 0);
  const double recorded = eval_records(tmp / "run").at(16)["loss"].get<double>();
  CHECK(eval_json(tmp / "run")["loss"].get<double>() == recorded);
  // The weights themselves (the override turns the averaging off) evaluate otherwise.
  CHECK(eval_json(tmp / "run train.ema_decay=0")["loss"].get<double>() != recorded);
  // A run that kept no averages cannot be evaluated with them: a usage error that says so.
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "plain", "train.epochs=1"},
                     tmp / "plain.log") == 0);
  const auto r = run_trainer("eval " + (tmp / "plain") + " train.ema_decay=0.9", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("ema.fc1.weight: missing from the file") &&
                        Catch::Contains("drop train.ema_decay: the run kept no averaged weights"));
}

TEST_CASE("trainer eval says when the run's evaluation data changed since the checkpoint") {
  TempDir tmp("eval-changed-data");
  const auto write_csv = [&](const std::string& name, int flipped) {
    std::string text = "a,b,label\n";
    for (int row = 0; row < 32; ++row)
      text += std::to_string(row % 7) + "," + std::to_string(row % 5) + "," +
              std::to_string((row % 2) ^ (row == flipped ? 1 : 0)) + "\n";
    write_text(tmp / name, text);
  };
  write_csv("train.csv", -1);
  write_csv("eval.csv", -1);
  write_text(tmp / "csv.yaml",
             "data:\n  train: {type: csv, path: train.csv}\n  eval: {type: csv, path: eval.csv}\n"
             "model: {layers: [{type: linear, out_features: 2}]}\n"
             "train: {epochs: 1, batch_size: 8}\nbackend: {threads: 1}\n");
  REQUIRE(run_to_end({"run", tmp / "csv.yaml", "--out", tmp / "run"}, tmp / "run.log") == 0);
  const std::string said = "the data changed since the run evaluated it";
  const auto same = run_trainer("eval " + (tmp / "run"), true);
  CHECK(same.code == 0);
  CHECK_THAT(same.out, !Catch::Contains(said));
  write_csv("eval.csv", 3);  // one label flipped
  const auto changed = run_trainer("eval " + (tmp / "run"), true);
  INFO(changed.out);
  CHECK(changed.code == 0);
  CHECK_THAT(changed.out, Catch::Contains("warning: the evaluation data's content digest is ") &&
                              Catch::Contains(said));
  // An override that is not about the data keeps the warning.
  const auto workers = run_trainer("eval " + (tmp / "run") + " data.workers=0", true);
  CHECK_THAT(workers.out, Catch::Contains(said));
  // Other data asked for by override is what the user meant: no warning.
  write_csv("other.csv", 5);
  const auto other =
      run_trainer("eval " + (tmp / "run") + " data.eval.path=" + (tmp / "other.csv"), true);
  CHECK(other.code == 0);
  CHECK_THAT(other.out, !Catch::Contains(said));
}

TEST_CASE("trainer eval of a held-out split with another seed or split warns of trained samples") {
  TempDir tmp("eval-split");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "--out", tmp / "run", "data.eval=null",
                      "data.split=0.25", "train.epochs=1"},
                     tmp / "run.log") == 0);
  const auto own = run_trainer("eval " + (tmp / "run"), true);
  CHECK(own.code == 0);
  CHECK_THAT(own.out, !Catch::Contains("warning"));
  // A smaller split of the same seed is a part of the run's own held-out part.
  CHECK_THAT(run_trainer("eval " + (tmp / "run") + " data.split=0.125", true).out,
             !Catch::Contains("warning"));
  for (const char* other : {"seed=5", "data.split=0.5"}) {
    INFO(other);
    const auto drawn = run_trainer("eval " + (tmp / "run") + " " + other, true);
    CHECK(drawn.code == 0);
    CHECK_THAT(drawn.out, Catch::Contains("this draws another part, which holds samples the run "
                                          "trained on"));
  }
  // Evaluation data of its own: scored instead of the held-out part, which
  // would be refused beside it.
  const std::string own_data = "eval " + (tmp / "run") +
                               " 'data.eval={type: synthetic, shape: [1, 8, 8], classes: 4, "
                               "size: 96}'";
  const auto given = run_trainer(own_data, true);
  CHECK(given.code == 0);
  CHECK_THAT(given.out, Catch::Contains("eval: data.eval is given, so the part of the training "
                                        "data that the run's data.split (0.25) held out is not "
                                        "evaluated (data.split=0)") &&
                            Catch::Contains(" on 96 samples"));
  // With a split of its own written, the two are refused together, as in a run.
  const auto both = run_trainer(own_data + " data.split=0.5", true);
  CHECK(both.code == 2);
  CHECK_THAT(both.out, Catch::Contains("error: data.split: it holds part of data.train out for "
                                       "evaluation only when there is no data.eval"));
}
