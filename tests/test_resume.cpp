// labels: cpu
// Exact resume: a run stopped (by train.max_steps inside an epoch, or by
// SIGTERM between steps, or cut back to an earlier checkpoint) and resumed
// with `--resume` writes metrics.jsonl byte for byte like a run that never
// stopped; the same config twice gives the same bytes; a truncated newest
// checkpoint is reported and the previous one used; an evaluation that fails
// keeps the training before it in a checkpoint that resumes exactly, and so
// does one that a signal stops.
#include <catch2/catch.hpp>

#include <ctime>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "cpu_bf16.h"
#include "test_image_fixtures.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;

TEST_CASE("the same config twice gives identical metrics; another seed does not") {
  TempDir tmp("resume-twice");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "a"), tmp / "a.log") == 0);
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "b"), tmp / "b.log") == 0);
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "c", {"seed=4"}), tmp / "c.log") == 0);
  const std::string a = read_text(tmp / "a/metrics.jsonl");
  CHECK(read_lines(tmp / "a/metrics.jsonl").size() == 13);  // 48 steps: 10 train records + 3 evals
  CHECK(a == read_text(tmp / "b/metrics.jsonl"));
  CHECK(a != read_text(tmp / "c/metrics.jsonl"));
  // Deterministic runs keep timing out of metrics.jsonl, in timing.jsonl.
  CHECK(a.find("samples_per_s") == std::string::npos);
  CHECK(read_text(tmp / "a/timing.jsonl").find("samples_per_s") != std::string::npos);
  // The run directory reproduces the run.
  REQUIRE(run_to_end({"run", tmp / "a/config.yaml", "--out", tmp / "d"}, tmp / "d.log") == 0);
  CHECK(a == read_text(tmp / "d/metrics.jsonl"));
}

TEST_CASE("a run repeated from its config.yaml says what keeps it from repeating the run") {
  TempDir tmp("rerun");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  std::string csv = "a,b,c,d,label\n";
  for (int i = 0; i < 64; ++i)
    csv += std::to_string(i % 7) + "," + std::to_string(i % 5) + "," + std::to_string(i % 3) + "," +
           std::to_string(i % 2) + "," + std::to_string(i % 4) + "\n";
  write_text(tmp / "train.csv", csv);
  const std::vector<std::string> on_csv = {
      "data.train={type: csv, path: " + tmp / "train.csv" + "}", "data.eval=null",
      "train.max_steps=4"};
  // Two sets of weights to start from, of two seeds.
  for (const char* seed : {"1", "2"}) {
    std::vector<std::string> overrides = on_csv;
    overrides.push_back(std::string("seed=") + seed);
    REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / (std::string("w") + seed), overrides),
                       tmp / "w.log") == 0);
  }
  fs::copy_file(tmp / "w1/checkpoints/last/model.safetensors", tmp / "start.safetensors");
  std::vector<std::string> overrides = on_csv;
  overrides.push_back("model.init_from=" + tmp / "start.safetensors");
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "a", overrides), tmp / "a.log") == 0);
  const std::string config = tmp / "a/config.yaml";
  // Nothing changed: repeated without a word.
  REQUIRE(run_to_end({"run", config, "--out", tmp / "same"}, tmp / "same.log") == 0);
  CHECK(read_text(tmp / "same.log").find("will not repeat") == std::string::npos);
  CHECK(read_text(tmp / "same/metrics.jsonl") == read_text(tmp / "a/metrics.jsonl"));
  // Another thread count (the run is deterministic), changed data and other
  // weights to start from: each said.
  write_text(tmp / "train.csv", csv + "1,1,1,1,1\n");
  fs::copy_file(tmp / "w2/checkpoints/last/model.safetensors", tmp / "start.safetensors",
                fs::copy_options::overwrite_existing);
  REQUIRE(run_to_end({"run", config, "backend.threads=2", "--out", tmp / "changed"},
                     tmp / "changed.log") == 0);
  const std::string log = read_text(tmp / "changed.log");
  INFO(log);
  CHECK(log.find("warning: data.train: its content digest is ") != std::string::npos);
  CHECK(log.find(", the run in " + tmp / "a" + " recorded ") != std::string::npos);
  CHECK(log.find("warning: backend.threads: this run computes on 2 threads where the run in " +
                 tmp / "a" + " computed on 1 thread") != std::string::npos);
  CHECK(log.find("warning: model.init_from: " + tmp / "start.safetensors" + " has SHA-256 ") !=
        std::string::npos);
  // Another config of the same content, outside a run directory: nothing to compare.
  write_text(tmp / "copy.yaml", read_text(config));
  REQUIRE(run_to_end({"run", tmp / "copy.yaml", "--out", tmp / "copy"}, tmp / "copy.log") == 0);
  CHECK(read_text(tmp / "copy.log").find("will not repeat") == std::string::npos);
  // A resume that changed the config: config.yaml repeats only its last part.
  REQUIRE(run_to_end({"run", "--resume", tmp / "a", "train.max_steps=6", "optimizer.lr=0.02"},
                     tmp / "resumed.log") == 0);
  REQUIRE(run_to_end({"run", config, "--out", tmp / "after_resume"}, tmp / "after_resume.log") ==
          0);
  CHECK(read_text(tmp / "after_resume.log")
            .find("warning: config.yaml: the run in " + tmp / "a" +
                  " trained with 2 configs, a resume (or an edit before one) changing it") !=
        std::string::npos);
}

TEST_CASE("train.eval_every evaluates once per step, also at the end of an epoch") {
  TempDir tmp("eval-every");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // 16 steps per epoch, 48 steps: evaluations after 8, 16, 24, 32, 40 and 48.
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "a", {"train.eval_every=8"}),
                     tmp / "a.log") == 0);
  std::vector<std::int64_t> eval_steps;
  for (const auto& record : metrics_records(tmp / "a", "eval"))
    eval_steps.push_back(record["step"].get<std::int64_t>());
  CHECK(eval_steps == std::vector<std::int64_t>{8, 16, 24, 32, 40, 48});
}

TEST_CASE("micro-batches of a short last batch train like the batch (drop_last: false)") {
  // 500 samples, batch 32: each epoch ends with a step of 20 samples, as one
  // batch or as micro-batches of 16 and 4. Each micro-batch's loss counts by
  // its rows, so the two runs agree at every step (dropout included).
  TempDir tmp("short-micro-batches");
  write_text(tmp / "tiny.yaml", tiny_experiment(500));
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "whole", {"data.drop_last=false"}),
                     tmp / "whole.log") == 0);
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "micro",
                              {"data.drop_last=false", "train.micro_batch_size=16"}),
                     tmp / "micro.log") == 0);
  const auto whole = metrics_records(tmp / "whole"), micro = metrics_records(tmp / "micro");
  REQUIRE(whole.size() == micro.size());
  REQUIRE(whole.size() == 13);  // 48 steps (16 per epoch): 10 train records + 3 evals
  for (std::size_t i = 0; i < whole.size(); ++i) {
    INFO("record " << i << ": " << whole[i].dump() << " vs " << micro[i].dump());
    CHECK(whole[i]["step"] == micro[i]["step"]);
    const double a = whole[i]["loss"].get<double>(), b = micro[i]["loss"].get<double>();
    CHECK(std::abs(a - b) <= 1e-5 * std::abs(a));
  }
}

namespace {

// A run cut by train.max_steps inside an epoch, then resumed with more steps,
// against the uninterrupted run, under `extra` overrides. The resume names the
// run directory's config, or (`config_from_run_dir`) gives only the override.
void check_max_steps_resume(const std::string& name, const std::vector<std::string>& extra,
                            bool config_from_run_dir = false) {
  TempDir tmp(name);
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // A constant schedule: the learning rate must not depend on max_steps.
  std::vector<std::string> overrides = {"schedule.type=constant"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "full", overrides), tmp / "f.log") == 0);
  // 16 steps per epoch: step 22 is inside epoch 1, in the middle of a logging window.
  overrides.push_back("train.max_steps=22");
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "part", overrides), tmp / "p.log") == 0);
  CHECK(fs::exists(tmp / "part/checkpoints/step-00000022/model.safetensors"));
  CHECK(fs::read_symlink(tmp / "part/checkpoints/last") == "step-00000022");
  CHECK(read_text(tmp / "full/metrics.jsonl") != read_text(tmp / "part/metrics.jsonl"));

  const std::vector<std::string> resume =
      config_from_run_dir
          ? std::vector<std::string>{"run", "--resume", tmp / "part", "train.max_steps=0"}
          : std::vector<std::string>{"run", tmp / "part/config.yaml", "--resume", tmp / "part",
                                     "train.max_steps=0"};
  REQUIRE(run_to_end(resume, tmp / "r.log") == 0);
  INFO(read_text(tmp / "r.log"));
  CHECK(read_text(tmp / "full/metrics.jsonl") == read_text(tmp / "part/metrics.jsonl"));
  const auto summary = summary_of(tmp / "part");
  CHECK(summary["status"] == "complete");
  CHECK(summary["steps"] == 48);
  CHECK(summary["resumed_from"].get<std::string>().find("step-00000022") != std::string::npos);
  // keep_last: 3 of the step checkpoints remain, `last` is the final one.
  CHECK(fs::read_symlink(tmp / "part/checkpoints/last") == "step-00000048");
  int kept = 0;
  for (const auto& e : fs::directory_iterator(tmp / "part/checkpoints"))
    if (e.path().filename().string().rfind("step-", 0) == 0) ++kept;
  CHECK(kept == 3);
}

// tmp/images.yaml: a linear model on 24 training images of three classes
// told apart by brightness (tmp/train) and 12 evaluation images (tmp/eval),
// with `train_and_more` (the train section, and any other) added.
void write_images_experiment(const TempDir& tmp, const std::string& train_and_more) {
  const auto write_class = trainer::data::testing::write_image_class;
  for (const auto& [name, value] : {std::pair{"a", 20}, {"b", 120}, {"c", 220}}) {
    write_class(tmp / "train", name, value, 8);
    write_class(tmp / "eval", name, value + 3, 4);
  }
  write_text(tmp / "images.yaml",
             "name: images\n"
             "seed: 1\n"
             "deterministic: true\n"
             "data:\n"
             "  train: {type: image_folder, root: " +
                 (tmp / "train") +
                 ", size: [3, 3]}\n"
                 "  eval: {type: image_folder, root: " +
                 (tmp / "eval") +
                 ", size: [3, 3]}\n"
                 "  transforms: [{type: scale}]\n"
                 "  workers: 1\n"
                 "model:\n"
                 "  layers: [{type: flatten}, {type: linear, out_features: 3}]\n"
                 "optimizer: {type: sgd, lr: 0.5, momentum: 0.9}\n" +
                 train_and_more + "backend: {threads: 1}\n");
}

}  // namespace

TEST_CASE(
    "train.max_steps inside an epoch, then --resume with more steps, matches an uninterrupted "
    "run") {
  check_max_steps_resume("resume-max-steps", {});
}

TEST_CASE(
    "a run stopped on an eval_every step, or at an epoch's end between log points, resumed "
    "further matches an uninterrupted run") {
  TempDir tmp("resume-last-evaluation");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // 16 steps per epoch, a record every 5 steps.
  const std::vector<std::pair<std::string, std::string>> cuts = {
      {"train.max_steps=14", "train.max_steps=0"},  // step 14: evaluated (eval_every 7)
      {"train.epochs=1", "train.epochs=3"}};        // step 16: the epoch's end, off a log point
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "full",
                              {"schedule.type=constant", "train.eval_every=7"}),
                     tmp / "f.log") == 0);
  for (const auto& [cut, resume] : cuts) {
    INFO(cut);
    const std::string part = tmp / ("part-" + cut.substr(6, 3));
    REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", part,
                                {"schedule.type=constant", "train.eval_every=7", cut}),
                       tmp / "p.log") == 0);
    REQUIRE(run_to_end({"run", "--resume", part, resume}, tmp / "r.log") == 0);
    INFO(read_text(tmp / "r.log"));
    CHECK(read_text(tmp / "full/metrics.jsonl") == read_text(part + "/metrics.jsonl"));
  }
}

TEST_CASE(
    "a deterministic resume on another thread count is warned of, with the count that "
    "continues bit-identically; manifest.json keeps each session's, and summary.json tells the "
    "session's steps from the run's") {
  TempDir tmp("resume-threads");
  write_text(tmp / "tiny.yaml", tiny_experiment());  // deterministic, backend.threads: 1
  const std::string dir = tmp / "run";
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", dir, {"train.max_steps=6"}), tmp / "a.log") == 0);
  REQUIRE(run_to_end({"run", "--resume", dir, "train.max_steps=12", "backend.threads=2"},
                     tmp / "b.log") == 0);
  CHECK_THAT(read_text(tmp / "b.log"),
             Catch::Contains("warning: backend.threads: this resume computes on 2 threads where "
                             "the run's last session computed on 1 thread") &&
                 Catch::Contains("resume with backend.threads=1"));
  // The same count as the last session: nothing to say.
  REQUIRE(run_to_end({"run", "--resume", dir, "train.max_steps=18"}, tmp / "c.log") == 0);
  CHECK_THAT(read_text(tmp / "c.log"), !Catch::Contains("backend.threads: this resume"));
  const auto manifest = nlohmann::json::parse(read_text(dir + "/manifest.json"));
  CHECK(manifest["devices"]["threads"] == 1);
  REQUIRE(manifest["resumes"].size() == 2);
  CHECK(manifest["resumes"][0]["threads"] == 2);
  CHECK(manifest["resumes"][1]["threads"] == 2);
  const auto summary = summary_of(dir);
  CHECK(summary["steps"] == 18);
  CHECK(summary["session_steps"] == 6);  // the time and rate are of these
  CHECK(summary["resumed_at_step"] == 12);
}

TEST_CASE(
    "a resume whose micro-batch changes the accumulation is refused with the one that keeps it") {
  TempDir tmp("resume-accumulation");
  write_text(tmp / "tiny.yaml", tiny_experiment());  // batch 32
  const std::string dir = tmp / "run";
  REQUIRE(run_to_end(
              run_args(tmp / "tiny.yaml", dir, {"train.max_steps=4", "train.micro_batch_size=8"}),
              tmp / "a.log") == 0);
  CHECK(run_to_end({"run", "--resume", dir, "train.max_steps=8", "train.micro_batch_size=16"},
                   tmp / "b.log") == 2);
  CHECK_THAT(read_text(tmp / "b.log"),
             Catch::Contains("the accumulation follows train.micro_batch_size over the 1 rank "
                             "(batch / (micro-batch x ranks)): train.micro_batch_size=8 keeps "
                             "the run's 4"));
}

namespace {

// A CSV of `rows` samples of two features and a class, the label of row
// `flipped_row` flipped; and a run of two steps on it, a checkpoint each step.
std::string csv_rows(int rows, int flipped_row = -1) {
  std::string text = "a,b,y\n";
  for (int i = 0; i < rows; ++i)
    text += std::to_string(i % 7) + "," + std::to_string(i % 5) + "," +
            std::to_string((i % 2) ^ (i == flipped_row)) + "\n";
  return text;
}

const char* const kCsvExperiment =
    "name: csv\n"
    "data: {train: {type: csv, path: data.csv}}\n"
    "model:\n"
    "  layers: [{type: linear, out_features: 2}]\n"
    "  loss: {type: cross_entropy}\n"
    "optimizer: {type: sgd, lr: 0.01}\n"
    "train: {epochs: 2, batch_size: 16, max_steps: 2}\n"
    "checkpoint: {every_steps: 1}\n"
    "backend: {threads: 1}\n";

}  // namespace

TEST_CASE("a resume whose training data changed size says the data changed, not the config") {
  TempDir tmp("resume-data-changed");
  const auto write_csv = [&](int rows) { write_text(tmp / "data.csv", csv_rows(rows)); };
  write_csv(64);
  write_text(tmp / "csv.yaml", kCsvExperiment);
  const std::string dir = tmp / "run";
  REQUIRE(run_to_end(run_args(tmp / "csv.yaml", dir), tmp / "a.log") == 0);
  // An override that changes the steps per epoch but not the samples keeps
  // the config's message.
  CHECK(run_to_end({"run", "--resume", dir, "train.max_steps=6", "train.batch_size=8"},
                   tmp / "c.log") == 2);
  CHECK_THAT(read_text(tmp / "c.log"), Catch::Contains("resume with the run's own config.yaml") &&
                                           !Catch::Contains("changed since the run started"));
  write_csv(128);  // the file replaced under the run
  CHECK(run_to_end({"run", "--resume", dir, "train.max_steps=6"}, tmp / "b.log") == 2);
  CHECK_THAT(read_text(tmp / "b.log"),
             Catch::Contains("step-00000002 was written when the training set held 64 "
                             "samples (4 steps per epoch); it now holds 128 (8): the training "
                             "data changed since the run started") &&
                 Catch::Contains("model.init_from=" + dir + "/checkpoints/step-00000002"));
}

TEST_CASE(
    "a resume whose training data changed content but not size warns with the content digests") {
  TempDir tmp("resume-data-edited");
  const auto write_csv = [&](int flipped_row) {
    write_text(tmp / "data.csv", csv_rows(64, flipped_row));
  };
  // The manifest's record of the run's start, or of its latest resume.
  const auto recorded_digest = [&](const std::string& dir, bool latest_resume) {
    const auto manifest = nlohmann::json::parse(read_text(fs::path(dir) / "manifest.json"));
    const auto& record = latest_resume ? manifest["resumes"].back() : manifest;
    CHECK(record["data"]["train"]["samples"] == 64);
    return record["data"]["train"]["content_digest"].get<std::string>();
  };
  write_csv(-1);
  write_text(tmp / "csv.yaml", kCsvExperiment);
  const std::string dir = tmp / "run";
  REQUIRE(run_to_end(run_args(tmp / "csv.yaml", dir), tmp / "a.log") == 0);
  const std::string first = recorded_digest(dir, false);
  CHECK(first.size() == 16);
  // The same data: no word of a change.
  REQUIRE(run_to_end({"run", "--resume", dir, "train.max_steps=3"}, tmp / "b.log") == 0);
  CHECK_THAT(read_text(tmp / "b.log"), !Catch::Contains("content digest"));
  CHECK(recorded_digest(dir, true) == first);
  write_csv(5);  // one label edited under the run
  REQUIRE(run_to_end({"run", "--resume", dir, "train.max_steps=4"}, tmp / "c.log") == 0);
  const std::string edited = recorded_digest(dir, true);
  CHECK(edited != first);
  CHECK(recorded_digest(dir, false) == first);  // the start's record stays
  CHECK_THAT(read_text(tmp / "c.log"),
             Catch::Contains("step-00000003 was written when the training data's content digest "
                             "was " +
                             first + "; it is now " + edited +
                             " (the same 64 samples): the data changed since that checkpoint was "
                             "written"));
}

TEST_CASE("a resume whose evaluation data changed warns that the evaluations measure other data") {
  TempDir tmp("resume-eval-edited");
  write_text(tmp / "data.csv", csv_rows(64));
  write_text(tmp / "eval.csv", csv_rows(32));
  // kCsvExperiment with evaluation data, evaluated and ranked every step.
  std::string experiment = kCsvExperiment;
  experiment.replace(experiment.find("}}\n"), 3, "}, eval: {type: csv, path: eval.csv}}\n");
  experiment.replace(experiment.find("max_steps: 2}"), 13, "max_steps: 2, eval_every: 1}");
  experiment.replace(experiment.find("every_steps: 1}"), 15, "every_steps: 1, keep_best: 1}");
  write_text(tmp / "csv.yaml", experiment);
  const std::string dir = tmp / "run";
  REQUIRE(run_to_end(run_args(tmp / "csv.yaml", dir), tmp / "a.log") == 0);
  REQUIRE(run_to_end({"run", "--resume", dir, "train.max_steps=3"}, tmp / "b.log") == 0);
  CHECK_THAT(read_text(tmp / "b.log"), !Catch::Contains("evaluation data"));
  write_text(tmp / "eval.csv", csv_rows(32, 3));  // one evaluation label edited
  REQUIRE(run_to_end({"run", "--resume", dir, "train.max_steps=4"}, tmp / "c.log") == 0);
  CHECK_THAT(read_text(tmp / "c.log"),
             Catch::Contains("step-00000003 was written when the evaluation data's content "
                             "digest was ") &&
                 Catch::Contains("(32 samples): the evaluation data changed since then") &&
                 Catch::Contains("(checkpoint.keep_best compares them with the best so far, "
                                 "measured on the old data)"));
  // The training data is as it was: no word of it.
  CHECK_THAT(read_text(tmp / "c.log"), !Catch::Contains("training data's content digest"));
}

TEST_CASE(
    "a bf16 run resumes exactly too (its bf16 weight copies are rebuilt from the checkpoint), "
    "with only the override on the command line") {
  if (cpu_computes_bf16())
    check_max_steps_resume("resume-max-steps-bf16", {"precision=bf16"}, true);
  else  // the override-only resume, in float32
    check_max_steps_resume("resume-max-steps-override", {}, true);
}

TEST_CASE(
    "an fp16 run resumes exactly too, its loss scale and skipped steps read back from the "
    "backend at the checkpoint") {
  // Real overflows: the scale starts far too high, backs off tenfold and grows
  // every 4 clean steps, so steps are skipped before and after the cut.
  check_max_steps_resume(
      "resume-max-steps-fp16",
      {"precision.mode=fp16", "precision.loss_scale.init_scale=1e9",
       "precision.loss_scale.backoff_factor=0.1", "precision.loss_scale.growth_interval=4"});
}

TEST_CASE(
    "a one-cycle fp16 run that cycles Adam's beta1 and averages its weights resumes exactly from "
    "an earlier checkpoint") {
  // The schedule depends on the total steps, so the run is not cut by
  // max_steps: a copy of the finished run loses its checkpoints after step 21
  // (inside epoch 1, between log points, after skipped steps) and resumes.
  TempDir tmp("resume-onecycle-fp16");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::vector<std::string> overrides = {"schedule={type: onecycle, cycle_momentum: true}",
                                              "precision.mode=fp16",
                                              "precision.loss_scale.init_scale=1e9",
                                              "precision.loss_scale.backoff_factor=0.1",
                                              "precision.loss_scale.growth_interval=4",
                                              "checkpoint.keep_last=0",
                                              "train.ema_decay=0.9"};
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "full", overrides), tmp / "f.log") == 0);
  fs::copy(tmp / "full", tmp / "cut",
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  for (const auto& e : fs::directory_iterator(tmp / "full/checkpoints")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name > "step-00000021")
      fs::remove_all(tmp / ("cut/checkpoints/" + name));
  }
  fs::remove(tmp / "cut/checkpoints/last");
  fs::create_directory_symlink("step-00000021", tmp / "cut/checkpoints/last");
  REQUIRE(run_to_end({"run", "--resume", tmp / "cut"}, tmp / "r.log") == 0);
  INFO(read_text(tmp / "r.log"));
  CHECK(read_text(tmp / "r.log").find("resuming from") != std::string::npos);
  CHECK(read_text(tmp / "full/metrics.jsonl") == read_text(tmp / "cut/metrics.jsonl"));
  const auto records = metrics_records(tmp / "full", "train");
  REQUIRE(records.size() > 2);
  CHECK(records.front()["skipped_steps"].get<int>() > 0);  // the window skipped updates
  CHECK(records[1]["momentum"].get<double>() < records[0]["momentum"].get<double>());
  // The evaluations are of the averaged weights, which the checkpoint holds
  // (in its state, and on their own for other tools).
  CHECK(fs::exists(tmp / "cut/checkpoints/step-00000021/model_ema.safetensors"));
  CHECK(read_text(tmp / "cut/checkpoints/step-00000021/SHA256SUMS").find("model_ema.safetensors") !=
        std::string::npos);
}

TEST_CASE(
    "SIGTERM finishes the step, checkpoints, exits 143; the resumed run matches one that never "
    "stopped") {
  TempDir tmp("resume-sigterm");
  // 128 steps per epoch, 20 epochs: long enough that the signal always lands
  // in the middle, however fast the machine.
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  const std::vector<std::string> overrides = {"checkpoint.every_steps=0", "data.workers=0",
                                              "train.epochs=20"};
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "full", overrides), tmp / "f.log") == 0);

  TrainerProcess child(run_args(tmp / "tiny.yaml", tmp / "cut", overrides), tmp / "c.log");
  REQUIRE(wait_for_lines(tmp / "cut/metrics.jsonl", 3, std::chrono::seconds(20)));
  child.signal(SIGTERM);
  const int code = child.wait();
  INFO(read_text(tmp / "c.log"));
  REQUIRE(code == 143);
  const auto stopped = summary_of(tmp / "cut");
  CHECK(stopped["status"] == "interrupted");
  CHECK(stopped["signal"] == SIGTERM);
  const std::int64_t stopped_at = stopped["steps"];
  CHECK(stopped_at < 2560);
  CHECK(fs::exists(tmp / "cut/checkpoints/last/state.safetensors"));

  REQUIRE(run_to_end({"run", "--resume", tmp / "cut"}, tmp / "r.log") == 0);
  CHECK(read_text(tmp / "full/metrics.jsonl") == read_text(tmp / "cut/metrics.jsonl"));
  CHECK(summary_of(tmp / "cut")["steps"] == 2560);
}

TEST_CASE("a stop signal's checkpoint goes once newer ones are saved: keep_last keeps the same") {
  TempDir tmp("resume-stop-retention");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // Checkpoints at the ends of the 3 epochs of 16 steps, the newest 2 kept.
  const std::vector<std::string> overrides = {
      "checkpoint.every_steps=0", "checkpoint.every_epochs=1", "checkpoint.keep_last=2"};
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "full", overrides), tmp / "f.log") == 0);
  // Stopped in the last epoch (after its record of step 35), then resumed.
  setenv("TRAINER_INJECT_STEP_DELAY", "0.05", 1);
  TrainerProcess child(run_args(tmp / "tiny.yaml", tmp / "cut", overrides), tmp / "c.log");
  unsetenv("TRAINER_INJECT_STEP_DELAY");
  REQUIRE(wait_for_text(tmp / "cut/metrics.jsonl", "\"step\":35", std::chrono::seconds(60)));
  child.signal(SIGTERM);
  REQUIRE(child.wait() == 143);
  const std::int64_t stopped_at = summary_of(tmp / "cut")["steps"];
  INFO("stopped at step " << stopped_at);
  REQUIRE(stopped_at < 48);
  REQUIRE(run_to_end({"run", "--resume", tmp / "cut"}, tmp / "r.log") == 0);
  const auto kept = [](const std::string& run) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
      names.insert(e.path().filename().string());
    return names;
  };
  CHECK(kept(tmp / "cut") == std::set<std::string>{"last", "step-00000032", "step-00000048"});
  CHECK(kept(tmp / "cut") == kept(tmp / "full"));
}

TEST_CASE("a truncated checkpoint is reported with its path and the previous one is used") {
  TempDir tmp("resume-torn");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "full", {"schedule.type=constant"}),
                     tmp / "f.log") == 0);
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "part",
                              {"schedule.type=constant", "train.max_steps=22"}),
                     tmp / "p.log") == 0);
  const std::string newest = tmp / "part/checkpoints/step-00000022/model.safetensors";
  fs::resize_file(newest, fs::file_size(newest) / 2);
  // A folder named like a step no run reaches is no checkpoint (it was an error: "stoll").
  fs::create_directories(tmp / "part/checkpoints/step-99999999999999999999");

  REQUIRE(
      run_to_end({"run", tmp / "part/config.yaml", "--resume", tmp / "part", "train.max_steps=0"},
                 tmp / "r.log") == 0);
  const std::string log = read_text(tmp / "r.log");
  INFO(log);
  CHECK(log.find(newest) != std::string::npos);
  CHECK(log.find("truncated or corrupted") != std::string::npos);
  CHECK(log.find("resuming from " + (tmp / "part/checkpoints/step-00000021")) != std::string::npos);
  CHECK(log.find("done: 48 steps (27 in this session, ") != std::string::npos);
  CHECK(fs::exists(tmp / "part/checkpoints/step-00000022.bad"));
  // Resumed from step 21: still exactly the uninterrupted metrics.
  CHECK(read_text(tmp / "full/metrics.jsonl") == read_text(tmp / "part/metrics.jsonl"));
}

TEST_CASE("a new run never writes into a directory that holds something") {
  TempDir tmp("run-dir-taken");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  REQUIRE(run_to_end(run_args(tmp / "tiny.yaml", tmp / "a", {"train.max_steps=5"}),
                     tmp / "a.log") == 0);
  const std::string metrics = read_text(tmp / "a/metrics.jsonl");
  // The same --out again: refused at once, the first run untouched.
  CHECK(run_to_end(run_args(tmp / "tiny.yaml", tmp / "a", {"train.max_steps=3"}),
                   tmp / "again.log") == 2);
  CHECK(read_text(tmp / "again.log") ==
        "error: --out " + tmp / "a" +
            ": the directory is not empty (it holds a run); to continue that run: trainer run "
            "--resume " +
            tmp / "a" + "; give a new directory, or remove this one\n");
  CHECK(read_text(tmp / "a/metrics.jsonl") == metrics);
  CHECK(fs::read_symlink(tmp / "a/checkpoints/last") == "step-00000005");
  // Any other file in it refuses the run too.
  fs::create_directories(tmp / "other");
  write_text(tmp / "other/notes.txt", "mine");
  CHECK(run_to_end(run_args(tmp / "tiny.yaml", tmp / "other"), tmp / "other.log") == 2);
  CHECK(read_text(tmp / "other/notes.txt") == "mine");
  // So does a file.
  CHECK(run_to_end(run_args(tmp / "tiny.yaml", tmp / "other/notes.txt"), tmp / "file.log") == 2);
  CHECK(read_text(tmp / "file.log").find("exists and is not a directory") != std::string::npos);
  CHECK(read_text(tmp / "other/notes.txt") == "mine");

  // Without --out, runs started within the same second get <time>-2, -3, ...:
  // take the names of the next seconds, so this run must find one taken.
  const std::string runs = tmp / "runs";
  for (int s = 0; s < 6; ++s) {
    char stamp[32];
    const std::time_t t = std::time(nullptr) + s;
    std::tm tm{};
    localtime_r(&t, &tm);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    fs::create_directories(fs::path(runs) / "tiny" / stamp);
    write_text((fs::path(runs) / "tiny" / stamp / "taken").string(), "");
  }
  REQUIRE(run_to_end({"run", tmp / "tiny.yaml", "train.max_steps=2", "output.dir=" + runs},
                     tmp / "default.log") == 0);
  int fresh = 0;
  for (const auto& e : fs::directory_iterator(fs::path(runs) / "tiny")) {
    if (fs::exists(e.path() / "taken")) {
      CHECK_FALSE(fs::exists(e.path() / "metrics.jsonl"));
    } else {
      ++fresh;
      CHECK(e.path().filename().string().ends_with("-2"));
      CHECK(fs::exists(e.path() / "metrics.jsonl"));
    }
  }
  CHECK(fresh == 1);
}

TEST_CASE("a run that stops on an error leaves summary.json with status failed and the error") {
  TempDir tmp("run-failed");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // A learning rate this large makes the loss overflow within a few steps.
  CHECK(run_to_end(
            run_args(tmp / "tiny.yaml", tmp / "run", {"optimizer.type=sgd", "optimizer.lr=1e30"}),
            tmp / "run.log") == 1);
  INFO(read_text(tmp / "run.log"));
  const auto summary = summary_of(tmp / "run");
  CHECK(summary["status"] == "failed");
  const std::string error = summary["error"];
  CHECK((error.rfind("the training loss is NaN at step ", 0) == 0 ||
         error.rfind("the training loss is infinite at step ", 0) == 0));
  CHECK(summary["steps"].get<int>() > 0);
  CHECK(read_text(tmp / "run.log").find("error: " + summary["error"].get<std::string>()) !=
        std::string::npos);
  // train.log ends with it too, stamped as its other lines are.
  const auto log = read_lines(tmp / "run/train.log");
  REQUIRE_FALSE(log.empty());
  CHECK(log.back().rfind("[20", 0) == 0);
  CHECK(log.back().size() > error.size() + 9);
  CHECK(log.back().substr(log.back().size() - error.size() - 9) == "] error: " + error);
  // An evaluation before the next log point stops it alike, keeping no
  // checkpoint: its check of the weights first; under fp16 loss scaling
  // (which checks gradients, not weights) the evaluation's NaN loss.
  for (const auto& [precision, said] :
       {std::pair<std::string, std::string>{
            "fp32",
            "non-finite weights (inf or NaN) after the updates up to step 16: the run "
            "diverged"},
        std::pair<std::string, std::string>{
            "fp16", "the evaluation loss is NaN at step 16 (over 128 samples)"}}) {
    const std::string out = tmp / ("eval_nan_" + precision);
    CHECK(run_to_end(run_args(tmp / "tiny.yaml", out,
                              {"optimizer.type=sgd", "optimizer.lr=1e30", "train.log_every=1000",
                               "checkpoint.every_steps=0", "precision.mode=" + precision}),
                     tmp / "eval.log") == 1);
    INFO(read_text(tmp / "eval.log"));
    const std::string eval_error = summary_of(out)["error"];
    CHECK(eval_error.rfind(said, 0) == 0);
    // fp16's own cause named: its range, which the loss scale does not cover.
    if (precision == "fp16")
      CHECK(eval_error.find("passed 65504, fp16's largest value") != std::string::npos);
    CHECK_FALSE(fs::exists(out + "/checkpoints/step-00000016"));
  }
}

TEST_CASE("an evaluation that fails keeps the training before it; the resume evaluates again") {
  TempDir tmp("resume-eval-failed");
  // 24 training images of three classes told apart by brightness (3 steps an
  // epoch of 8); 12 evaluation images, one of them unreadable at first.
  write_images_experiment(tmp,
                          "train: {epochs: 3, batch_size: 8, log_every: 2}\n"
                          "checkpoint: {every_epochs: 2}\n");
  const std::string bad = tmp / "eval/b/2.png";
  const std::string good = read_text(bad);
  write_text(bad, "not an image");
  // At the end of epoch 0 (step 3, inside a log window), and after step 2
  // inside it with train.eval_every: 2.
  for (const auto& [overrides, failed_at] : {std::pair{std::vector<std::string>{}, 3},
                                             {std::vector<std::string>{"train.eval_every=2"}, 2}}) {
    INFO("overrides " << overrides.size() << ", failing at step " << failed_at);
    fs::remove_all(tmp / "failed");
    fs::remove_all(tmp / "full");
    write_text(bad, "not an image");
    CHECK(run_to_end(run_args(tmp / "images.yaml", tmp / "failed", overrides), tmp / "f.log") == 1);
    const std::string log = read_text(tmp / "f.log");
    INFO(log);
    const std::string kept = tmp / ("failed/checkpoints/step-0000000" + std::to_string(failed_at));
    CHECK(log.find("the evaluation at step " + std::to_string(failed_at) + " failed: ") !=
          std::string::npos);
    CHECK(log.find("is kept in checkpoint " + kept) != std::string::npos);
    // The unreadable image is named once, in the one error that says what was kept.
    CHECK(log.find(bad) != std::string::npos);
    CHECK(log.find(bad, log.find(bad) + 1) == std::string::npos);
    CHECK(log.find("(evaluation batch ") != std::string::npos);  // no epoch of its own
    CHECK(log.find(", batch ") == std::string::npos);
    REQUIRE(fs::exists(kept));
    CHECK(summary_of(tmp / "failed")["status"] == "failed");

    write_text(bad, good);
    REQUIRE(run_to_end(run_args(tmp / "images.yaml", tmp / "full", overrides), tmp / "u.log") == 0);
    std::vector<std::string> resume = {"run", tmp / "failed/config.yaml", "--resume",
                                       tmp / "failed"};
    REQUIRE(run_to_end(resume, tmp / "r.log") == 0);
    INFO(read_text(tmp / "r.log"));
    CHECK(read_text(tmp / "r.log").find("resuming from " + kept) != std::string::npos);
    CHECK(read_text(tmp / "failed/metrics.jsonl") == read_text(tmp / "full/metrics.jsonl"));
    CHECK(eval_records(tmp / "failed").count(failed_at) == 1);
  }
}

TEST_CASE("a signal during an evaluation stops it; the resume evaluates and goes on exactly") {
  TempDir tmp("resume-eval-stopped");
  // 3 steps an epoch of 8; the evaluation in two batches.
  write_images_experiment(tmp, "train: {epochs: 3, batch_size: 8}\n");
  // At the end of epoch 0 (step 3), and at step 2 with train.eval_every: 2.
  for (const auto& [overrides, stopped_at] :
       {std::pair{std::vector<std::string>{}, 3},
        {std::vector<std::string>{"train.eval_every=2"}, 2}}) {
    INFO("stopped at step " << stopped_at);
    fs::remove_all(tmp / "stopped");
    fs::remove_all(tmp / "full");
    fs::remove(tmp / "s.log");  // waited on below: none from the case before
    {
      // Each evaluation batch takes 2 s longer: the signal lands inside it.
      setenv("TRAINER_INJECT_EVAL_DELAY", "2", 1);
      std::vector<std::string> args = {"run", tmp / "images.yaml", "--out", tmp / "stopped"};
      args.insert(args.end(), overrides.begin(), overrides.end());
      TrainerProcess run(args, tmp / "s.log");
      unsetenv("TRAINER_INJECT_EVAL_DELAY");
      REQUIRE(wait_for_text(tmp / "s.log", "TRAINER_INJECT_EVAL_DELAY", std::chrono::seconds(60)));
      run.signal(SIGINT);
      CHECK(run.wait() == 130);
    }
    const std::string log = read_text(tmp / "s.log");
    INFO(log);
    const std::string kept =
        tmp / ("stopped/checkpoints/step-0000000" + std::to_string(stopped_at));
    CHECK(log.find("signal 2 during the evaluation at step " + std::to_string(stopped_at) +
                   ": the evaluation is left for the resume to make") != std::string::npos);
    REQUIRE(fs::exists(kept));
    const nlohmann::json summary = summary_of(tmp / "stopped");
    CHECK(summary["status"] == "interrupted");
    CHECK(summary["last_checkpoint"] == kept);
    CHECK(eval_records(tmp / "stopped").empty());

    REQUIRE(run_to_end(run_args(tmp / "images.yaml", tmp / "full", overrides), tmp / "u.log") == 0);
    REQUIRE(run_to_end({"run", "--resume", tmp / "stopped"}, tmp / "r.log") == 0);
    INFO(read_text(tmp / "r.log"));
    CHECK(read_text(tmp / "r.log").find("resuming from " + kept) != std::string::npos);
    CHECK(read_text(tmp / "stopped/metrics.jsonl") == read_text(tmp / "full/metrics.jsonl"));
    CHECK(eval_records(tmp / "stopped").count(stopped_at) == 1);
  }
}
