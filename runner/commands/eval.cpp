// `trainer eval RUN_DIR [KEY=VALUE ...] [--checkpoint last|best|NAME|PATH] [--json]`:
// evaluates a checkpoint of a run on the run's eval data (or, through
// overrides, on other data) with the run's own config, in one process on the
// config's first device. Prints the metrics; writes nothing. Needs the
// training data only for the model's input shape and classes, which the
// config's eval source gives when the training data is gone.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/content_digest.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/checkpoint/weights.h"
#include "runner/commands.h"
#include "runner/commands/config_commands.h"
#include "runner/config/emit.h"
#include "runner/config/fields.h"
#include "runner/config/load.h"
#include "runner/config/overrides.h"
#include "runner/config/value_changes.h"
#include "runner/graph/program.h"
#include "runner/json_text.h"
#include "runner/train/devices.h"
#include "runner/train/run_dir.h"
#include "runner/train/run_records.h"
#include "runner/train/session.h"
#include "runner/train/trainer.h"
#include "runner/usage_error.h"

namespace trainer {
namespace {

// One process: the micro-batch of one of the run's ranks (with
// micro_batch_size: auto, the one the run chose, which its manifest records),
// on the first device the run used; train.eval_batches (per rank) covers the
// samples all the run's ranks evaluated.
void in_one_process(config::Config& config, const std::string& run_dir) {
  config::Diagnostics ignored;  // the run's own config: its batch plan was checked
  const train::BatchPlan run = train::plan_batches(config, ignored);
  std::int64_t micro = run.micro;
  if (config.train.micro_batch_auto) {
    std::string problem;
    const auto recorded = train::recorded_batch(run_dir, &problem);
    if (recorded && recorded->micro_batch_auto && recorded->global == run.global &&
        recorded->world == run.world)
      micro = recorded->micro;
    else
      std::fprintf(stderr,
                   "note: micro_batch_size: auto: %s; evaluating in micro-batches of %lld\n",
                   !problem.empty() ? problem.c_str()
                   : recorded && recorded->micro_batch_auto
                       ? "train.batch_size is not the run's, so its choice does not apply"
                       : "manifest.json does not record the run's choice",
                   static_cast<long long>(micro));
  }
  config.devices.world_size = 1;
  if (config.devices.gpus.size() > 1) config.devices.gpus = {config.devices.gpus.front()};
  if ((run.world > 1 || micro != run.micro) && micro > 0) {
    config.train.micro_batch_size = micro;
    config.train.micro_batch_auto = false;
    config.train.accumulation = 0;  // derived from the global batch
    config.train.eval_batches *= run.world;
  }
}

// The model section of `c`, as YAML under its key, without the weights it
// started from (which a checkpoint's replace).
std::string model_yaml(const config::Config& c) {
  config::Node root = config::Node::map({});
  if (const config::Node* model = c.resolved.find("model")) {
    config::Node copy = *model;
    if (copy.is_map()) copy.erase("init_from");
    root.set("model", std::move(copy));
  }
  return config::to_yaml(root);
}

// For a checkpoint in another run directory (--checkpoint OTHER/checkpoints/
// step-N) whose config builds another model than `config` does: the values
// that differ ("model.layers[2].type: gelu -> relu"), its run first; "" when
// the models are the same, or the checkpoint is this run's or no run's.
std::string other_run_model_changes(const std::string& checkpoint, const std::string& run_dir,
                                    const config::Config& config) {
  namespace fs = std::filesystem;
  // The path as given, not where its links lead: a checkpoint moved to
  // another disk and linked back is still its run's.
  std::error_code ec;
  const fs::path folder = fs::absolute(checkpoint, ec).lexically_normal().parent_path();
  if (ec || folder.filename() != "checkpoints") return {};
  const fs::path other_run = folder.parent_path();
  if (fs::equivalent(other_run, run_dir, ec) || !fs::is_regular_file(other_run / "config.yaml", ec))
    return {};
  try {
    return config::value_changes(
        model_yaml(config::load_config((other_run / "config.yaml").string(), {})),
        model_yaml(config));
  } catch (const std::exception&) {
    return {};  // a config that no longer loads: nothing to compare
  }
}

// For --checkpoint best: when the run's best evaluation by
// checkpoint.metric (an eval metric) is better than the checkpoint chosen,
// whose own was not kept, a note naming it; "" otherwise.
std::string best_not_kept_note(const std::string& run_dir, const config::Config& config,
                               const checkpoint::TrainState& chosen) {
  const std::string& metric = config.checkpoint.metric;
  if (!metric.starts_with("eval.") || !chosen.metric ||
      (!chosen.metric_name.empty() && chosen.metric_name != metric))
    return {};
  const std::string key = metric.substr(5);
  const bool maximize = config.checkpoint.mode == "max";
  std::optional<double> best;
  std::int64_t best_step = 0;
  std::ifstream in(std::filesystem::path(run_dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_object() || record.value("split", "") != "eval" || !record.contains(key) ||
        !record[key].is_number())
      continue;
    const double value = record[key].get<double>();
    if (!best || (maximize ? value > *best : value < *best)) {
      best = value;
      best_step = record.value("step", std::int64_t{0});
    }
  }
  if (!best || !(maximize ? *best > *chosen.metric : *best < *chosen.metric)) return {};
  return fmt::format(
      "note: the run's best evaluation by {} was at step {} ({:.6g}), whose weights no kept "
      "checkpoint holds (checkpoint.keep_best: {}); this is the best of those kept, step {} "
      "({:.6g}); "
      "checkpoint.keep_best: 1 keeps the best one\n",
      metric, best_step, *best, config.checkpoint.keep_best, chosen.step, *chosen.metric);
}

// `text` with each mention of config key `from` (as in "data.train.classes:
// 4", not inside a name such as "my.data.train.csv", nor inside '...', where
// messages quote files) made `to`.
std::string key_mentions_replaced(std::string text, const std::string& from,
                                  const std::string& to) {
  const auto part_of_name = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '/' ||
           c == '.';
  };
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    const std::size_t end = at + from.size();
    // Inside '...': an odd count of quotes before it, apostrophes ("layer's") aside.
    bool quoted = false;
    for (std::size_t i = 0; i < at; ++i)
      if (text[i] == '\'' && !(i > 0 && std::isalpha(static_cast<unsigned char>(text[i - 1])) &&
                               std::isalpha(static_cast<unsigned char>(text[i + 1]))))
        quoted = !quoted;
    const bool key = !quoted && (at == 0 || !part_of_name(text[at - 1])) &&
                     (end == text.size() || text[end] == '.' || !part_of_name(text[end]));
    if (key) {
      text.replace(at, from.size(), to);
      at += to.size();
    } else {
      at = end;
    }
  }
  return text;
}

// Whether `given` (--checkpoint) names weights alone: a .safetensors file
// outside a checkpoint folder (one with a state.safetensors and SHA256SUMS:
// its files are named by the folder). A release's SHA256SUMS alone is no
// checkpoint.
bool is_weights_file(const std::string& given) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file(given);
  if (file.extension() != ".safetensors" || !fs::is_regular_file(file, ec)) return false;
  const fs::path folder = fs::absolute(file, ec).parent_path();
  return !(fs::exists(folder / "SHA256SUMS", ec) && fs::exists(folder / "state.safetensors", ec));
}

// `overrides`, and data.split=0 when they give evaluation data (data.eval)
// to a run that held part of its training data out for evaluation (data.split)
// and set no split of their own: the data given is what is to be scored, and
// a split beside data.eval is refused. Says so on stderr.
std::vector<std::string> setting_split_aside(const config::Config& own,
                                             std::vector<std::string> overrides) {
  bool gives_eval = false;
  for (const std::string& o : overrides) {
    const std::string key = config::override_key(o);
    if (key == "data.split" || key == "data") return overrides;
    std::string value = o.substr(std::min(o.find('='), o.size() - 1) + 1);
    value.erase(0, std::min(value.find_first_not_of(" \t"), value.size()));
    const bool dropped =
        value.empty() || value == "null" || value == "~" || value == "Null" || value == "NULL";
    if (key.starts_with("data.eval.") || (key == "data.eval" && !dropped)) gives_eval = true;
  }
  if (!gives_eval || own.data.eval || own.data.split <= 0) return overrides;
  std::fprintf(stderr,
               "eval: data.eval is given, so the part of the training data that the run's "
               "data.split (%s) held out is not evaluated (data.split=0)\n",
               config::format_number(own.data.split).c_str());
  overrides.push_back("data.split=0");
  return overrides;
}

// The session of the run's config. When the training data cannot be opened
// here (a run directory copied to a machine that holds only the test set) and
// the config has an eval source of its own, the eval source stands in for it:
// the model's input shape and classes come from there, the normalize
// statistics and the class names (an image folder's, which may lack some of
// the training classes) from the manifest, and the checkpoint's tensors must
// still fit.
train::Session session_for_eval(config::Config& config, const std::string& run_dir) {
  // Classes by name are numbered as the run numbered them (its outputs'),
  // whatever names the training data holds now.
  const std::vector<std::string> recorded_names = train::recorded_class_names(run_dir);
  try {
    return train::prepare_eval_session(config, recorded_names);
  } catch (const config::ConfigError& e) {
    if (!config.data.eval) throw;
    const config::Config as_written = config;  // its marks: data.eval's where the file has them
    for (const auto& d : e.diagnostics().list())
      if (d.key_path.rfind("data.train", 0) != 0) throw;
    const config::Diagnostic& first = e.diagnostics().list().front();
    config.data.train = *config.data.eval;
    config.data.split = 0;
    // An evaluation set may lack the largest classes: its labels alone would
    // count fewer than the model was built for.
    std::string classes_from = "the source";
    if (!recorded_names.empty()) {
      classes_from =
          "the run's manifest (its " + std::to_string(recorded_names.size()) + " class names)";
    } else if (auto& attrs = config.data.train->attrs; attrs.has("classes")) {
      const std::int64_t recorded = train::recorded_class_count(run_dir);
      classes_from = attrs.get_int("classes") > 0 ? "its `classes:`"
                     : recorded > 0 ? "the run's manifest (" + std::to_string(recorded) + ")"
                                    : "its largest label";
      if (attrs.get_int("classes") == 0 && recorded > 0) attrs.set("classes", recorded);
    }
    std::fprintf(stderr,
                 "eval: the training data cannot be opened here (%s: %s); data.eval gives the "
                 "model's input shape instead, and the classes come from %s\n",
                 first.key_path.c_str(), first.message.c_str(), classes_from.c_str());
    try {
      return train::prepare_eval_session(config, recorded_names);
    } catch (const config::ConfigError& stand_in) {  // the eval data fails too: both, by name
      config::Diagnostics both;
      for (const auto& d : e.diagnostics().list()) both.add(d);
      for (config::Diagnostic d : stand_in.diagnostics().list()) {
        if (d.key_path.rfind("data.train", 0) == 0) {
          d.key_path.replace(0, 10, "data.eval");
          d.mark = train::mark_of(as_written, d.key_path);
        }
        // What the stand-in's errors say of data.train, they say of data.eval.
        for (std::string* text : {&d.message, &d.suggestion})
          *text = key_mentions_replaced(*text, "data.train", "data.eval");
        both.add(std::move(d));
      }
      both.throw_if_any();
      throw;
    }
  }
}

}  // namespace

int command_eval(const CommandArgs& args) {
  namespace fs = std::filesystem;
  const fs::path config_path = fs::path(args.run_dir) / "config.yaml";
  // A sweep's directory holds its trials' runs, not one of its own; a
  // checkpoint is in a run.
  if (const std::string advice = train::run_dir_advice(args.run_dir, true); !advice.empty()) {
    std::fprintf(stderr, "error: %s: not a run directory: %s\n", args.run_dir.c_str(),
                 advice.c_str());
    return 2;
  }
  if (!fs::exists(config_path)) {
    std::fprintf(stderr, "error: %s: not a run directory (no config.yaml)\n", args.run_dir.c_str());
    return 2;
  }
  for (const std::string& o : args.overrides)
    if (config::override_key(o) == "model.init_from") {
      std::fprintf(stderr,
                   "error: %s: trainer eval reads the weights of one of the run's checkpoints, "
                   "not model.init_from\n    choose the checkpoint with --checkpoint "
                   "last|best|NAME|PATH, or weights alone with --checkpoint FILE.safetensors\n",
                   o.c_str());
      return 2;
    }
  // Settings of training alone: an override of one changes nothing here.
  for (const std::string& o : args.overrides) {
    const std::string key = config::override_key(o);
    const auto under = [&](const char* section) {
      return key == section || key.rfind(std::string(section) + ".", 0) == 0;
    };
    if (under("optimizer") || under("schedule") || under("sweep") || under("train.epochs") ||
        under("train.max_steps") || under("train.log_every") || under("train.accumulation") ||
        under("train.clip_grad_norm") || under("train.eval_every") ||
        under("train.early_stopping") || under("checkpoint.every_epochs") ||
        under("checkpoint.every_steps") || under("checkpoint.keep_last") ||
        under("checkpoint.keep_best"))
      std::fprintf(stderr,
                   "warning: %s: trainer eval does not train, so this changes nothing (it takes "
                   "the data, devices, backend and precision, and train.eval_batches)\n",
                   o.c_str());
  }
  // The run's own config, as it wrote it: its transforms, which its recorded
  // statistics follow, and the evaluation data it names.
  const config::Config own = config::load_config(config_path.string(), {});
  const std::vector<std::string> overrides = setting_split_aside(own, args.overrides);
  config::Config config = config::load_config(config_path.string(), overrides);
  print_config_warnings(config);
  const std::int64_t eval_batches_per_rank = config.train.eval_batches;
  in_one_process(config, args.run_dir);
  const std::vector<config::TypedItem> written_transforms = config.data.transforms;
  const std::vector<config::TypedItem>& trained_with = own.data.transforms;
  // Whether the overrides ask for other evaluation data than the run's: another
  // eval source, or another held-out split of the training data.
  const auto evaluated_data = [](const config::Config& c) {
    const config::Node* data = c.resolved.find("data");
    if (const config::Node* eval = data ? data->find("eval") : nullptr)
      return "eval: " + config::to_yaml(*eval);
    std::string held_out = "seed " + std::to_string(c.seed);  // the split's draw
    for (const char* key : {"train", "split"})
      if (const config::Node* part = data ? data->find(key) : nullptr)
        held_out += std::string("\n") + key + ": " + config::to_yaml(*part);
    return held_out;
  };
  const bool other_data = evaluated_data(config) != evaluated_data(own);
  // The run held out part of its training data: another seed, or a larger
  // split, draws another part, much of which the run trained on (a smaller
  // split of the same seed is a part of the run's own).
  if (!own.data.eval && own.data.split > 0 && !config.data.eval &&
      (config.seed != own.seed || config.data.split > own.data.split))
    std::fprintf(stderr,
                 "warning: %s: the run evaluated on the part of its training data that data.split "
                 "held out with its seed (%lld) and split (%s); this draws another part, which "
                 "holds samples the run trained on, so the figures overstate how it does on "
                 "unseen data; drop the seed and data.split overrides to score its own held-out "
                 "part\n",
                 config.seed != own.seed ? "seed" : "data.split", static_cast<long long>(own.seed),
                 config::format_number(own.data.split).c_str());
  const train::RestoredStatistics restored =
      train::restore_normalize_statistics(args.run_dir, config, trained_with);
  for (const std::string& problem : restored.problems)
    std::fprintf(stderr,
                 "note: %s: the recorded normalize statistics cannot be used; they are computed "
                 "from the training data again (the run's own only if those files have not "
                 "changed since it trained)\n",
                 problem.c_str());
  // The checkpoint's weights replace all others: a model.init_from file the
  // run started from is not needed (and may be gone by now).
  if (config.model.node.is_map()) config.model.node.erase("init_from");
  train::Session session = [&] {
    try {
      train::Session restored_session = session_for_eval(config, args.run_dir);
      if (restored.filled > 0 && restored.problems.empty())
        std::fprintf(stderr, "normalize: the statistics the run computed (manifest.json)\n");
      else if (restored.filled > 0)
        std::fprintf(stderr,
                     "normalize: the statistics the run computed (manifest.json) for %zu "
                     "normalize(s), the others' computed again\n",
                     restored.filled);
      return restored_session;
    } catch (const config::ConfigError& e) {
      // Recorded statistics that do not fit the samples (a damaged
      // manifest.json) are not the config's fault: computed again instead.
      const auto& found = e.diagnostics().list();
      const auto transforms = std::find_if(found.begin(), found.end(), [](const auto& d) {
        return d.key_path.starts_with("data.transforms");  // the list, or one of its items
      });
      if (restored.filled == 0 || transforms == found.end()) throw;
      // Without them: when that passes, they were what did not fit.
      const config::ConfigError original = e;
      config.data.transforms = written_transforms;
      train::Session computed;
      try {
        computed = session_for_eval(config, args.run_dir);
      } catch (const config::ConfigError&) {
        throw original;  // the config's own transforms do not fit either
      }
      std::fprintf(stderr,
                   "note: %s: the recorded normalize statistics do not fit the samples (%s); "
                   "they are computed from the training data again\n",
                   (std::filesystem::path(args.run_dir) / "manifest.json").c_str(),
                   transforms->message.c_str());
      return computed;
    }
  }();
  // The checks that bear on what is evaluated (the training-only ones are
  // not made here).
  for (const auto& warning : session.warnings)
    std::fprintf(stderr, "%s\n", config::format(warning, "warning").c_str());
  if (!session.eval_data) {
    const std::string type = config.data.train ? config.data.train->type : "idx";
    const std::string example = type == "idx" ? "data.eval.images=... data.eval.labels=..."
                                              : "data.eval='{type: " + type + ", ...}'";
    std::fprintf(stderr,
                 "error: %s has no eval data: give it with an override, e.g. %s (the fields of "
                 "a %s source are in docs/config-reference.md); data.split would hold out "
                 "samples this run trained on\n",
                 config_path.c_str(), example.c_str(), type.c_str());
    return 2;
  }
  const checkpoint::CheckpointStore store(args.run_dir);
  // Weights alone: a .safetensors file outside any checkpoint (another tool's
  // export, or averaged weights copied out), evaluated as they are.
  const bool weights_alone = is_weights_file(args.checkpoint);
  std::string path = weights_alone ? args.checkpoint : "";
  if (!weights_alone) try {  // before compiling: a usage error comes first
      path = store.find(args.checkpoint, config.checkpoint.metric, config.checkpoint.mode == "max");
    } catch (const checkpoint::CheckpointUnreadable& e) {  // there, but the system refuses it
      throw checkpoint::CheckpointUnreadable("--checkpoint " + args.checkpoint + ": " + e.what());
    } catch (const checkpoint::CheckpointError& e) {  // what --checkpoint names is not there
      throw UsageError("--checkpoint " + args.checkpoint + ": " + e.what());
    }
  Backend& backend = train::select_backend(config);
  // Not train::compile: its initial weights are all replaced by the
  // checkpoint's, strictly.
  graph::Program program(train::training_graph(session, backend), backend,
                         train::compile_options(session));
  checkpoint::TrainState state;
  try {
    // A run that averaged its weights evaluated the averages: so does this.
    // The run may still be training, and prune `path` meanwhile.
    if (weights_alone)
      checkpoint::load_parameters(program, checkpoint::SafetensorsFile(path), path, true);
    else
      path = store.read(args.checkpoint, config.checkpoint.metric, config.checkpoint.mode == "max",
                        [&](const std::string& found) {
                          state = checkpoint::load_checkpoint_weights(program, found,
                                                                      config.train.ema_decay > 0);
                        });
  } catch (const checkpoint::CheckpointMismatch& e) {
    // Averaged weights asked for (train.ema_decay) that the run never kept.
    const bool averaged =
        !weights_alone && std::string(e.what()).find("\n  ema.") != std::string::npos;
    const bool model_overrides =
        std::any_of(args.overrides.begin(), args.overrides.end(),
                    [](const std::string& o) { return o.rfind("model.", 0) == 0; });
    std::string advice;
    if (model_overrides) advice = "evaluate with the run's own model: drop the model.* overrides";
    if (averaged)
      advice += std::string(advice.empty() ? "" : "; ") +
                "drop train.ema_decay: the run kept no averaged weights";
    if (advice.empty() && train::config_edited_by_hand(args.run_dir))
      advice = config_path.string() +
               " was edited by hand since the run wrote it (its sha256 is no longer "
               "config.sha256's): restore the run's own config (manifest.json keeps each config "
               "the run trained with, under configs)";
    if (advice.empty() && weights_alone)
      advice = train::weights_fit_advice(session, checkpoint::SafetensorsFile(path).contents());
    if (advice.empty() && weights_alone)
      advice = "give weights of the model " + config_path.string() +
               " builds, under its parameters' names (`trainer plan` lists them)";
    if (advice.empty())
      advice = "give one of this run's checkpoints (" +
               (fs::path(args.run_dir) / "checkpoints").string() +
               "), or evaluate another run's checkpoint with that run's directory";
    throw UsageError(std::string("the checkpoint does not fit the model this config builds: ") +
                     e.what() + "\n  " + advice);
  }
  if (args.checkpoint == "best")
    std::fputs(best_not_kept_note(args.run_dir, config, state).c_str(), stderr);
  if (weights_alone && config.train.ema_decay > 0)
    std::fprintf(stderr,
                 "note: the run averaged its weights (train.ema_decay), and its evaluations "
                 "scored the averages; these are %s as they are (a checkpoint's "
                 "model_ema.safetensors holds its averages)\n",
                 path.c_str());
  if (const std::string changes = other_run_model_changes(path, args.run_dir, config);
      !changes.empty())
    std::fprintf(stderr,
                 "warning: checkpoint %s is another run's, whose model differs from the one %s "
                 "builds (%s): these figures are its weights in this model; to evaluate it as "
                 "it trained, give its own run directory\n",
                 path.c_str(), config_path.c_str(), changes.c_str());
  // The run's own evaluation data, changed since the checkpoint evaluated it:
  // these figures are not the run's (other data asked for by override is meant).
  if (const std::string digest = data::digest_text(session.eval_data->content_digest());
      !other_data && !state.eval_digest.empty() && digest != state.eval_digest)
    std::fprintf(stderr,
                 "warning: the evaluation data's content digest is %s, and was %s when checkpoint "
                 "%s was written: the data changed since the run evaluated it, so these figures "
                 "measure other data than the run's\n",
                 digest.c_str(), state.eval_digest.c_str(), path.c_str());
  SingleProcess alone;
  const train::EvalResult result = train::evaluate(session, program, alone);
  if (!std::isfinite(result.loss)) {
    std::fprintf(stderr,
                 "error: the evaluation loss of %s %s is %s (over %lld samples): its "
                 "weights overflow on this data, or the data holds non-finite or very large "
                 "values; check the evaluation data (trainer validate --data)%s\n",
                 weights_alone ? "weights" : "checkpoint", path.c_str(),
                 std::isnan(result.loss) ? "NaN" : "infinite",
                 static_cast<long long>(result.samples),
                 weights_alone ? "" : ", or evaluate an earlier checkpoint (--checkpoint NAME)");
    return 1;
  }

  nlohmann::json record = {{"checkpoint", path},
                           {"step", weights_alone ? nlohmann::json() : nlohmann::json(state.step)},
                           {"loss", result.loss},
                           {"samples", result.samples}};
  if (session.num_classes > 0) {
    record["accuracy"] = result.accuracy;
    if (session.num_classes > 5) record["top5"] = result.top5;
  }
  if (args.json) {
    std::printf("%s\n", json_text(record).c_str());
    return 0;
  }
  // The run's train.eval_batches, for a run that evaluated part of the set
  // as it trained: a figure of that part, said so.
  if (const std::int64_t all = session.eval_data->size(); result.samples < all) {
    // A run of several ranks evaluated that many batches on each.
    const std::int64_t ranks =
        eval_batches_per_rank > 0 ? session.config.train.eval_batches / eval_batches_per_rank : 1;
    std::fprintf(
        stderr,
        "note: %lld of the %lld evaluation samples, as train.eval_batches %lld takes%s "
        "(the run's config, unless overridden); train.eval_batches=0 evaluates them "
        "all\n",
        static_cast<long long>(result.samples), static_cast<long long>(all),
        static_cast<long long>(eval_batches_per_rank),
        ranks > 1 ? (" on each of the run's " + std::to_string(ranks) + " ranks").c_str() : "");
  }
  std::string line = "eval: loss " + fmt::format("{:.6f}", result.loss);
  if (session.num_classes > 0) line += fmt::format(" accuracy {:.4f}", result.accuracy);
  if (session.num_classes > 5) line += fmt::format(" top5 {:.4f}", result.top5);
  if (weights_alone)
    std::printf("weights %s (no checkpoint: no step)\n%s on %lld samples\n", path.c_str(),
                line.c_str(), static_cast<long long>(result.samples));
  else
    std::printf("checkpoint %s (step %lld)\n%s on %lld samples\n", path.c_str(),
                static_cast<long long>(state.step), line.c_str(),
                static_cast<long long>(result.samples));
  return 0;
}

}  // namespace trainer
