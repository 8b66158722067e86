// TrainState to and from JSON, with errors naming the state file and the field.
#include "runner/checkpoint/train_state.h"

#include <cmath>
#include <limits>
#include <utility>

#include "runner/checkpoint/safetensors.h"
#include "runner/json_shown.h"

namespace trainer::checkpoint {
namespace {

using nlohmann::json;

// Non-finite numbers as JSON text (which has none: the library writes them
// as null, which reads back as no number at all).
constexpr const char* kNaN = "NaN";
constexpr const char* kInfinity = "Infinity";
constexpr const char* kNegativeInfinity = "-Infinity";

// The deepest nesting a state may have: the trainer writes 3 levels; deeper
// is an edit, refused before anything walks it.
constexpr int kMaxDepth = 32;

// Replaces every non-finite number in `j` by one of the strings above.
void non_finite_as_text(json& j) {
  if (j.is_number_float()) {
    const double v = j.get<double>();
    if (std::isnan(v)) j = kNaN;
    if (std::isinf(v)) j = v > 0 ? kInfinity : kNegativeInfinity;
    return;
  }
  if (j.is_structured())
    for (auto& [key, value] : j.items()) non_finite_as_text(value);
}

// The non-finite number string `j` stands for, if it is one of them.
std::optional<double> non_finite_of(const json& j) {
  if (!j.is_string()) return std::nullopt;
  const auto& text = j.get_ref<const std::string&>();
  if (text == kNaN) return std::numeric_limits<double>::quiet_NaN();
  if (text == kInfinity) return std::numeric_limits<double>::infinity();
  if (text == kNegativeInfinity) return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

// Throws, naming `path`, when `j` (`depth` levels down a state) nests deeper
// than kMaxDepth: copying or printing it would recurse that deep.
void check_depth(const json& j, const std::string& path, int depth = 0) {
  if (!j.is_structured()) return;
  if (depth >= kMaxDepth)
    throw CheckpointError(path + ": state nests deeper than " + std::to_string(kMaxDepth) +
                          " levels (no state the trainer writes does)");
  for (const auto& [key, value] : j.items()) check_depth(value, path, depth + 1);
}

// The reverse of non_finite_as_text: those strings become numbers again.
void non_finite_read(json& j) {
  if (const auto v = non_finite_of(j)) j = *v;
  if (j.is_structured())
    for (auto& [key, value] : j.items()) non_finite_read(value);
}

// Null members of a record (or of the loss scaler's state) become NaN: the
// numbers that earlier versions wrote as null because they were not finite.
void nulls_as_nan(json& object) {
  if (!object.is_object()) return;
  for (auto& [key, value] : object.items())
    if (value.is_null()) value = std::numeric_limits<double>::quiet_NaN();
}

// Reads the fields of one state, each error naming the file and the field.
class FieldReader {
 public:
  explicit FieldReader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw CheckpointError(path_ + ": state '" + field + "' " + what);
  }

  // The member `key` of `parent` (named `field` in messages): it must be there.
  const json& member(const json& parent, const std::string& key, const std::string& field) const {
    if (!parent.is_object() || !parent.contains(key)) fail(field, "is missing");
    return parent.at(key);
  }

  // An object (or, when `null_ok`, null).
  const json& object(const json& parent, const std::string& key, const std::string& field,
                     bool null_ok) const {
    const json& j = member(parent, key, field);
    if (!j.is_object() && !(null_ok && j.is_null()))
      fail(field, "is " + shown_json(j) + ", expected an object" + (null_ok ? " or null" : ""));
    return j;
  }

  // An integer that fits int64.
  std::int64_t integer(const json& j, const std::string& field) const {
    if (j.is_number_integer() &&
        !(j.is_number_unsigned() &&
          j.get<std::uint64_t>() >
              static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())))
      return j.get<std::int64_t>();
    fail(field, "is " + shown_json(j) + ", expected an integer");
  }

  // A byte count: an integer >= 0.
  std::uint64_t count(const json& j, const std::string& field) const {
    if (j.is_number_unsigned() || (j.is_number_integer() && j.get<std::int64_t>() >= 0))
      return j.get<std::uint64_t>();
    fail(field, "is " + shown_json(j) + ", expected a byte count (an integer >= 0)");
  }

  // A number; NaN and infinities included (null: a NaN an earlier version wrote).
  double number(const json& j, const std::string& field) const {
    if (j.is_number()) return j.get<double>();
    if (j.is_null()) return std::numeric_limits<double>::quiet_NaN();
    fail(field, "is " + shown_json(j) + ", expected a number");
  }

  // A string.
  std::string text(const json& j, const std::string& field) const {
    if (j.is_string()) return j.get<std::string>();
    fail(field, "is " + shown_json(j) + ", expected a string");
  }

  // integer() and number() of the member `key` of `parent`.
  std::int64_t integer_at(const json& parent, const std::string& key,
                          const std::string& field) const {
    return integer(member(parent, key, field), field);
  }
  double number_at(const json& parent, const std::string& key, const std::string& field) const {
    return number(member(parent, key, field), field);
  }

  // `value` of `field` at least `low`.
  void at_least(const std::string& field, std::int64_t value, std::int64_t low) const {
    if (value < low) fail(field, "is " + std::to_string(value) + ", below " + std::to_string(low));
  }

  // `value` of `field` at most `high`, which is `high_field`'s value.
  void at_most(const std::string& field, std::int64_t value, const std::string& high_field,
               std::int64_t high) const {
    if (value > high)
      fail(field, "is " + std::to_string(value) + ", above '" + high_field + "' (" +
                      std::to_string(high) + ")");
  }

  // A metrics record (last_eval, best_eval, last_train): null or an object
  // whose step, loss and accuracy, when there, are numbers (the step one
  // taken no later than the state's).
  void record(const json& r, const std::string& field, std::int64_t step) const {
    if (r.is_null()) return;
    if (!r.is_object()) fail(field, "is " + shown_json(r) + ", expected a metrics record or null");
    if (r.contains("step")) {
      const std::int64_t at = integer(r.at("step"), field + ".step");
      at_least(field + ".step", at, 0);
      at_most(field + ".step", at, "step", step);
    }
    for (const char* key : {"loss", "accuracy"})
      if (r.contains(key)) number(r.at(key), field + "." + key);
  }

 private:
  const std::string& path_;
};

// The loss scaler's state: {} (no scaling) or the fields LossScaler::restore reads.
void check_loss_scale(const FieldReader& in, const json& scale) {
  if (!scale.is_object()) in.fail("loss_scale", "is " + shown_json(scale) + ", expected an object");
  if (scale.empty()) return;
  in.number_at(scale, "scale", "loss_scale.scale");
  for (const char* key : {"clean_steps", "hysteresis_left", "skipped_steps", "overflows_at_min"})
    in.integer_at(scale, key, std::string("loss_scale.") + key);
  if (scale.contains("last_overflow_step"))
    in.integer(scale.at("last_overflow_step"), "loss_scale.last_overflow_step");
  if (scale.contains("last_overflow_scale"))
    in.number(scale.at("last_overflow_scale"), "loss_scale.last_overflow_scale");
}

// train.early_stopping's count: null, or {best (a number or null), best_step, bad}.
void check_early_stopping(const FieldReader& in, const json& stop, std::int64_t step) {
  if (stop.is_null()) return;
  if (!stop.is_object())
    in.fail("early_stopping", "is " + shown_json(stop) + ", expected an object");
  const json& best = in.member(stop, "best", "early_stopping.best");
  if (!best.is_null()) in.number(best, "early_stopping.best");
  const std::int64_t best_step = in.integer_at(stop, "best_step", "early_stopping.best_step");
  in.at_least("early_stopping.best_step", best_step, 0);
  in.at_most("early_stopping.best_step", best_step, "step", step);
  in.at_least("early_stopping.bad", in.integer_at(stop, "bad", "early_stopping.bad"), 0);
}

// The logging window's counts: none negative, no more steps than were done,
// no more rows scored than samples seen, no more hits than rows.
void check_window(const FieldReader& in, const TrainState& s) {
  in.at_least("window.steps", s.window_steps, 0);
  in.at_most("window.steps", s.window_steps, "step", s.step);
  if (!(s.window_loss_steps >= 0 && s.window_loss_steps <= static_cast<double>(s.window_steps)))
    in.fail("window.loss_steps", "is " + std::to_string(s.window_loss_steps) +
                                     ", outside 0 to window.steps (" +
                                     std::to_string(s.window_steps) + ")");
  in.at_least("window.samples", s.window_samples, 0);
  in.at_least("window.rows", s.window_rows, 0);
  in.at_most("window.rows", s.window_rows, "window.samples", s.window_samples);
  in.at_least("window.top1", s.window_top1, 0);
  in.at_most("window.top1", s.window_top1, "window.rows", s.window_rows);
  in.at_least("window.last_step_rows", s.last_step_rows, 0);
  in.at_least("window.last_step_top1", s.last_step_top1, 0);
  in.at_most("window.last_step_top1", s.last_step_top1, "window.last_step_rows", s.last_step_rows);
}

// The position as the training loop keeps it: `step` steps done, `epoch`
// whole epochs of `steps_per_epoch` steps and `epoch_step` more, and no more
// than the `total_steps` the run was to train when the state was taken.
void check_position(const FieldReader& in, const TrainState& s) {
  in.at_least("step", s.step, 0);
  in.at_least("epoch", s.epoch, 0);
  in.at_least("epoch_step", s.epoch_step, 0);
  in.at_least("steps_per_epoch", s.steps_per_epoch, 1);
  in.at_least("accumulation", s.accumulation, 1);
  if (s.epoch_step > s.steps_per_epoch)
    in.fail("epoch_step", std::to_string(s.epoch_step) + " is past its epoch of " +
                              std::to_string(s.steps_per_epoch) + " steps");
  in.at_most("step", s.step, "total_steps", s.total_steps);
  std::int64_t expected = 0;
  if (__builtin_mul_overflow(s.epoch, s.steps_per_epoch, &expected) ||
      __builtin_add_overflow(expected, s.epoch_step, &expected) || expected != s.step)
    in.fail("step", "is " + std::to_string(s.step) + ", but epoch " + std::to_string(s.epoch) +
                        " x " + std::to_string(s.steps_per_epoch) + " steps per epoch + " +
                        std::to_string(s.epoch_step) + " steps of the epoch in progress is not");
}

// The state `stored` holds, every field checked (from_json).
TrainState read_state(const nlohmann::json& stored, const std::string& path) {
  if (!stored.is_object())
    throw CheckpointError(path + ": state is " + shown_json(stored) + ", expected an object");
  check_depth(stored, path);
  json j = stored;
  non_finite_read(j);
  const FieldReader in(path);
  TrainState s;
  s.step = in.integer_at(j, "step", "step");
  s.epoch = in.integer_at(j, "epoch", "epoch");
  s.epoch_step = in.integer_at(j, "epoch_step", "epoch_step");
  s.steps_per_epoch = in.integer_at(j, "steps_per_epoch", "steps_per_epoch");
  s.accumulation = in.integer_at(j, "accumulation", "accumulation");
  s.total_steps = in.integer_at(j, "total_steps", "total_steps");
  s.seed = in.integer_at(j, "seed", "seed");
  const json& schedule = in.object(j, "schedule", "schedule", false);
  s.schedule = in.text(in.member(schedule, "type", "schedule.type"), "schedule.type");
  s.lr = in.number_at(schedule, "lr", "schedule.lr");
  s.loss_scale = in.member(j, "loss_scale", "loss_scale");
  nulls_as_nan(s.loss_scale);
  const json& w = in.object(j, "window", "window", false);
  s.window_loss = in.number_at(w, "loss", "window.loss");
  s.window_top1 = in.integer_at(w, "top1", "window.top1");
  s.window_rows = in.integer_at(w, "rows", "window.rows");
  s.window_steps = in.integer_at(w, "steps", "window.steps");
  s.window_samples = in.integer_at(w, "samples", "window.samples");
  if (w.contains("last_step_rows")) {
    s.last_step_top1 = in.integer_at(w, "last_step_top1", "window.last_step_top1");
    s.last_step_rows = in.integer_at(w, "last_step_rows", "window.last_step_rows");
  }
  s.window_loss_steps = w.contains("loss_steps")
                            ? in.number_at(w, "loss_steps", "window.loss_steps")
                            : static_cast<double>(s.window_steps);
  s.last_eval = in.member(j, "last_eval", "last_eval");
  s.best_eval = in.member(j, "best_eval", "best_eval");
  s.last_train = in.member(j, "last_train", "last_train");
  for (json* record : {&s.last_eval, &s.best_eval, &s.last_train}) nulls_as_nan(*record);
  s.metrics_bytes = in.count(in.member(j, "metrics_bytes", "metrics_bytes"), "metrics_bytes");
  s.timing_bytes = in.count(in.member(j, "timing_bytes", "timing_bytes"), "timing_bytes");
  if (j.contains("metric") && j["metric"].is_number()) s.metric = j["metric"].get<double>();
  if (j.contains("metric_name")) s.metric_name = in.text(j["metric_name"], "metric_name");
  if (j.contains("unscheduled")) {
    if (!j["unscheduled"].is_boolean())
      in.fail("unscheduled", "is " + shown_json(j["unscheduled"]) + ", expected true or false");
    s.unscheduled = j["unscheduled"].get<bool>();
  }
  if (j.contains("events_bytes")) s.events_bytes = in.count(j["events_bytes"], "events_bytes");
  if (j.contains("optimizer")) s.optimizer = in.text(j["optimizer"], "optimizer");
  if (j.contains("batch_size")) {
    s.batch_size = in.integer_at(j, "batch_size", "batch_size");
    in.at_least("batch_size", s.batch_size, 1);
  }
  if (j.contains("train_samples")) {
    s.train_samples = in.integer_at(j, "train_samples", "train_samples");
    in.at_least("train_samples", s.train_samples, 1);
  }
  for (auto [field, digest] :
       {std::pair{"train_digest", &s.train_digest}, std::pair{"eval_digest", &s.eval_digest}}) {
    if (!j.contains(field)) continue;
    *digest = in.text(j[field], field);
    if (digest->size() != 16 || digest->find_first_not_of("0123456789abcdef") != std::string::npos)
      in.fail(field, "is " + j[field].dump() + ", expected 16 lowercase hex digits");
  }
  if (j.contains("base_lr")) {
    s.base_lr = in.number(j["base_lr"], "base_lr");
    if (!(s.base_lr > 0) || !std::isfinite(s.base_lr))
      in.fail("base_lr", "is " + j["base_lr"].dump() + ", expected a rate > 0");
  }
  if (j.contains("early_stopping")) s.early_stopping = j["early_stopping"];

  // What cannot be: a state edited by hand (its checksum recomputed).
  check_position(in, s);
  check_window(in, s);
  check_loss_scale(in, s.loss_scale);
  check_early_stopping(in, s.early_stopping, s.step);
  in.record(s.last_eval, "last_eval", s.step);
  in.record(s.best_eval, "best_eval", s.step);
  in.record(s.last_train, "last_train", s.step);
  return s;
}

}  // namespace

nlohmann::json TrainState::to_json() const {
  nlohmann::json j = {
      {"step", step},
      {"epoch", epoch},
      {"epoch_step", epoch_step},
      {"steps_per_epoch", steps_per_epoch},
      {"accumulation", accumulation},
      {"loader_cursor", {{"epoch", epoch}, {"position", epoch_step * accumulation}}},
      {"total_steps", total_steps},
      {"seed", seed},
      {"rng", {{"init", seed}, {"shuffle", seed}, {"dropout", seed}, {"augmentation", seed}}},
      {"schedule", {{"type", schedule}, {"position", step}, {"lr", lr}}},
      {"loss_scale", loss_scale},
      {"window",
       {{"loss", window_loss},
        {"loss_steps", window_loss_steps},
        {"top1", window_top1},
        {"rows", window_rows},
        {"steps", window_steps},
        {"samples", window_samples}}},
      {"last_eval", last_eval},
      {"best_eval", best_eval},
      {"last_train", last_train},
      {"metrics_bytes", metrics_bytes},
      {"timing_bytes", timing_bytes}};
  if (last_step_rows > 0) {
    j["window"]["last_step_top1"] = last_step_top1;
    j["window"]["last_step_rows"] = last_step_rows;
  }
  if (metric) j["metric"] = *metric;
  if (metric && !metric_name.empty()) j["metric_name"] = metric_name;
  if (unscheduled) j["unscheduled"] = true;
  if (events_bytes) j["events_bytes"] = *events_bytes;
  if (!optimizer.empty()) j["optimizer"] = optimizer;
  if (batch_size > 0) j["batch_size"] = batch_size;
  if (train_samples > 0) j["train_samples"] = train_samples;
  if (!train_digest.empty()) j["train_digest"] = train_digest;
  if (!eval_digest.empty()) j["eval_digest"] = eval_digest;
  if (base_lr > 0) j["base_lr"] = base_lr;
  if (!early_stopping.is_null()) j["early_stopping"] = early_stopping;
  // A diverged window (or evaluation, or loss scale) reads back as it was.
  non_finite_as_text(j);
  return j;
}

TrainState TrainState::from_json(const nlohmann::json& stored, const std::string& path) {
  try {
    return read_state(stored, path);
  } catch (const nlohmann::json::exception& e) {  // none expected: each field is checked first
    throw CheckpointError(path + ": malformed state (" + e.what() + ")");
  }
}

}  // namespace trainer::checkpoint
