// `trainer lr-find CONFIG [KEY=VALUE ...] [--steps N] [--min-lr A] [--max-lr B] [--out DIR]`:
// the learning-rate range test. One short run of the experiment, a run
// directory of its own (default <output.dir>/<name>-lr-find/<time>), whose
// rate grows exponentially from A at the first step to B at the last (schedule
// type range_test), logging every step and evaluating one batch at the end.
// Then the training loss against the rate, smoothed and cut where it diverges
// (lr_range.h), and the rate where it falls fastest as the one to start from;
// lr_find.json in the run directory holds it all. Training that diverges (a
// non-finite loss or gradients, collapsed fp16 loss scaling) stops the run,
// and the range, there; any other error fails the command as it fails a run.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/field.h"
#include "runner/checkpoint/durable_file.h"
#include "runner/commands.h"
#include "runner/commands/command_config.h"
#include "runner/commands/config_commands.h"
#include "runner/config/fields.h"
#include "runner/config/load.h"
#include "runner/config/overrides.h"
#include "runner/dist/launch_env.h"
#include "runner/guarded_command.h"
#include "runner/json_text.h"
#include "runner/train/lr_range.h"
#include "runner/train/trainer.h"
#include "runner/usage_error.h"

namespace trainer {
namespace {

// The shortest text that reads back as `v` (1e-07, not 9.9999999999999995e-08).
std::string exact(double v) {
  std::array<char, 40> text{};
  const auto written = std::to_chars(text.data(), text.data() + text.size(), v);
  return std::string(text.data(), written.ptr);
}

// The training records of a run's metrics.jsonl: each step's rate and loss
// (a loss written as null, not finite, reads as NaN; a record without a
// rate is left out).
std::vector<train::RangeTestPoint> training_points(const std::string& run_dir) {
  std::vector<train::RangeTestPoint> points;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || record.value("split", "") != "train") continue;
    // A step whose every label is ignore_index records no loss: no point.
    if (!record.contains("loss")) continue;
    const auto& lr = record["lr"];
    const auto& loss = record["loss"];  // null: not finite
    if (!lr.is_number()) continue;
    points.push_back({lr.get<double>(), loss.is_number() ? loss.get<double>() : NAN});
  }
  return points;
}

// About 16 rows spread over the range, and the suggested and lowest ones.
void print_table(const train::RangeTestReading& r) {
  const std::size_t n = r.points.size();
  const std::size_t every = std::max<std::size_t>(1, n / 16);
  std::printf("%12s %10s %10s\n", "lr", "loss", "smoothed");
  for (std::size_t i = 0; i < n; ++i) {
    const bool suggested = r.suggested == i, lowest = r.lowest == i;
    if (i % every != 0 && i + 1 != n && !suggested && !lowest) continue;
    std::printf("%12.4g %10.4f %10.4f%s%s\n", r.points[i].lr, r.points[i].loss, r.smoothed[i],
                suggested ? "  <- steepest fall" : "", lowest ? "  <- lowest" : "");
  }
}

nlohmann::json reading_json(const train::RangeTestReading& r, const std::string& stopped_by) {
  nlohmann::json lrs = nlohmann::json::array(), losses = nlohmann::json::array();
  for (const auto& p : r.points) {
    lrs.push_back(p.lr);
    losses.push_back(p.loss);
  }
  const auto lr_at = [&](const std::optional<std::size_t>& i) {
    return i ? nlohmann::json(r.points[*i].lr) : nlohmann::json();
  };
  return {
      {"lr", lrs},
      {"loss", losses},
      {"smoothed_loss", r.smoothed},
      {"suggested_lr", lr_at(r.suggested)},
      {"lowest_loss_lr", lr_at(r.lowest)},
      {"diverged_at_step", r.diverged_at ? nlohmann::json(*r.diverged_at + 1) : nlohmann::json()},
      {"stopped_by", stopped_by.empty() ? nlohmann::json() : nlohmann::json(stopped_by)}};
}

// Whether `key` is one of `settings` (KEY=VALUE) sets: the same key, or a key
// under it (schedule.type under schedule).
bool set_by(const std::string& key, const std::vector<std::string>& settings) {
  return std::any_of(settings.begin(), settings.end(), [&](const std::string& setting) {
    const std::string set = config::override_key(setting);
    return key == set || key.starts_with(set + ".");
  });
}

// The user's overrides that no forced setting replaces; warns of each one
// that one does (the same key, or a key under it: schedule.type under
// schedule), saying which flag sets it instead, where one does.
std::vector<std::string> kept_overrides(const std::vector<std::string>& overrides,
                                        const std::vector<std::string>& forced_settings) {
  std::vector<std::string> kept;
  for (const std::string& given : overrides) {
    bool replaced = false;
    const std::string key = config::override_key(given);
    for (const std::string& forced : forced_settings) {
      const std::string forced_key = config::override_key(forced);
      // The name is the user's (an override's too), with "-lr-find" after it.
      if (forced_key == "name" || !set_by(key, {forced})) continue;
      std::string instead;
      if (forced_key == "train.max_steps") instead = " (--steps sets it)";
      if (forced_key == "optimizer.lr") instead = " (--min-lr sets the first rate)";
      if (forced_key == "schedule") instead = " (--max-lr sets the last rate)";
      std::fprintf(stderr, "warning: lr-find sets %s: the override '%s' is replaced%s\n",
                   forced_key.c_str(), given.c_str(), instead.c_str());
      replaced = true;
      break;
    }
    if (!replaced) kept.push_back(given);
  }
  return kept;
}

}  // namespace

int command_lr_find(const CommandArgs& given) {
  const std::int64_t steps = given.steps > 0 ? given.steps : 100;  // --steps is at least 10
  // The optimizer computes in float32: both ends must be ordinary float rates,
  // as optimizer.lr must be.
  constexpr double kLowest = kFloat32Smallest, kHighest = kFloat32Largest;
  if (!(given.min_lr >= kLowest) || !(given.max_lr > given.min_lr) || !(given.max_lr <= kHighest))
    throw UsageError("lr-find: --min-lr " + config::format_number(given.min_lr) + " and --max-lr " +
                     config::format_number(given.max_lr) + ": the range needs " +
                     config::format_number(kLowest) + " <= min-lr < max-lr <= " +
                     config::format_number(kHighest) + " (without the flags it runs from " +
                     config::format_number(CommandArgs{}.min_lr) + " to " +
                     config::format_number(CommandArgs{}.max_lr) + ")");
  const config::Config user = load_command_config(given.config_path, given.overrides);
  std::optional<dist::LaunchEnv> launched;
  try {
    launched = dist::detect_launch_env();
  } catch (const std::runtime_error&) {  // a launcher's variables, malformed: several ranks
    launched = dist::LaunchEnv{"", 0, 2, 0, 1};
  }
  if (launched && launched->world > 1) {
    if (launched->rank != 0) return 2;  // the first rank says why
    throw UsageError("lr-find trains one process, and " + std::to_string(launched->world) +
                     " were started (mpirun -np, srun): run it without the launcher; the rate "
                     "it finds holds for the same global batch on more ranks");
  }
  if (user.devices.world_size > 1 || user.devices.gpus.size() > 1)
    throw UsageError(
        "lr-find trains one process: set devices to one GPU (devices=[0]) or "
        "devices.world_size=1; the rate it finds holds for the same global batch on more");
  CommandArgs args = given;
  std::vector<std::string> forced_settings = {
      "schedule={type: range_test, max_lr: " + exact(given.max_lr) + "}",
      "optimizer.lr=" + exact(given.min_lr), "train.max_steps=" + std::to_string(steps),
      std::string("train.log_every=1"), std::string("train.eval_every=0"),
      std::string("train.early_stopping.patience=0"), std::string("checkpoint.every_steps=0"),
      std::string("checkpoint.keep_best=0"),
      // Within the longest name, as the run's own name is.
      "name=" + user.name.substr(0, config::kMaxNameBytes - 8) + "-lr-find"};
  // The closing evaluation short, where there is one (without, the setting
  // would only be warned of as without effect).
  if (user.data.eval || user.data.split > 0) forced_settings.push_back("train.eval_batches=1");
  // The config's warnings, but of the settings lr-find replaces (it keeps
  // the name, with "-lr-find" after it).
  for (const config::Diagnostic& warning : user.warnings)
    if (warning.key_path == "name" || !set_by(warning.key_path, forced_settings))
      std::fprintf(stderr, "%s\n", config::format(warning, "warning").c_str());
  args.warnings_shown = true;
  args.overrides = kept_overrides(given.overrides, forced_settings);
  for (const std::string& forced : forced_settings) args.overrides.push_back(forced);
  std::string run_dir, stopped_by;
  // Any other failure reported here, as the command line would, so that what
  // lr-find adds to it comes after it.
  const int code = run_guarded(
      [&] {
        try {
          return command_run(args, &run_dir);
        } catch (const train::DivergedError& e) {
          stopped_by = e.what();  // the range ends there
          return 0;
        }
      },
      args.overrides);
  // Stopped by a signal, or failed (a damaged sample) after a checkpoint the
  // run's message offers to resume from: the range was not read, and a resume
  // would finish the run without reading it.
  std::error_code ec;
  const bool stopped = code > 128;
  if (stopped || (code != 0 && !run_dir.empty() &&
                  std::filesystem::exists(run_dir + "/checkpoints/last", ec))) {
    // Again in a directory of its own: this one holds the stopped run.
    const std::string again =
        given.out_dir.empty()
            ? "run lr-find again"
            : "run lr-find again with another --out (or after removing " + given.out_dir + ")";
    std::fprintf(stderr,
                 "lr-find %s before the end of its range, so there is no reading: %s%s (the "
                 "`trainer run --resume` above would finish the run without reading the "
                 "range)\n",
                 stopped ? "was stopped" : "failed", stopped ? "" : "once the cause is mended, ",
                 again.c_str());
    return code;
  }
  if (code != 0) return code;  // the run said why
  std::vector<train::RangeTestPoint> points = training_points(run_dir);
  if (!stopped_by.empty()) points.push_back({points.empty() ? 0.0 : points.back().lr, NAN});
  const train::RangeTestReading reading = train::read_range_test(points);
  if (reading.points.empty()) {
    std::fprintf(stderr, "error: lr-find: the run in %s logged no finite loss%s%s\n",
                 run_dir.c_str(), stopped_by.empty() ? "" : ": ", stopped_by.c_str());
    return 1;
  }
  // fp16 loss scaling holds the rate on the steps it skips: the rate reached
  // can fall short of --max-lr.
  std::printf("\nlearning-rate range test: %zu step%s read, rates %g to %g (--max-lr %g)\n",
              reading.points.size(), reading.points.size() == 1 ? "" : "s",
              reading.points.front().lr, reading.points.back().lr, given.max_lr);
  print_table(reading);
  if (reading.diverged_at)
    std::printf("diverged at step %zu (%s)\n", *reading.diverged_at + 1,
                reading.non_finite ? "the training stopped being finite"
                                   : "the smoothed loss passed 4 x its lowest");
  if (!stopped_by.empty()) std::printf("the run stopped: %s\n", stopped_by.c_str());
  if (reading.suggested) {
    const double lr = reading.points[*reading.suggested].lr;
    std::printf(
        "suggested: optimizer.lr=%.3g (the smoothed loss falls fastest there; the lowest loss "
        "was at %.3g, a peak rate such as schedule.max_lr of onecycle sits between them)\n",
        lr, reading.points[*reading.lowest].lr);
  } else {
    std::printf("no suggestion: %s\n", train::why_no_suggestion(reading).c_str());
  }
  checkpoint::write_file_atomically(run_dir + "/lr_find.json",
                                    json_text(reading_json(reading, stopped_by), 2) + "\n");
  std::printf("written: %s/lr_find.json\n", run_dir.c_str());
  return 0;
}

}  // namespace trainer
