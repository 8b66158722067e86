// TrainState to and from JSON, with errors naming the state file.
#include "runner/checkpoint/train_state.h"

#include "runner/checkpoint/safetensors.h"

namespace trainer::checkpoint {

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
        {"top1", window_top1},
        {"rows", window_rows},
        {"steps", window_steps},
        {"samples", window_samples}}},
      {"last_eval", last_eval},
      {"best_eval", best_eval},
      {"last_train", last_train},
      {"metrics_bytes", metrics_bytes},
      {"timing_bytes", timing_bytes}};
  if (metric) j["metric"] = *metric;
  if (metric && !metric_name.empty()) j["metric_name"] = metric_name;
  if (events_bytes) j["events_bytes"] = *events_bytes;
  if (!optimizer.empty()) j["optimizer"] = optimizer;
  if (!early_stopping.is_null()) j["early_stopping"] = early_stopping;
  return j;
}

TrainState TrainState::from_json(const nlohmann::json& j, const std::string& path) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.is_object() || !j.contains(key))
      throw CheckpointError(path + ": state has no '" + std::string(key) + "'");
    return j.at(key);
  };
  try {
    TrainState s;
    s.step = need("step").get<std::int64_t>();
    s.epoch = need("epoch").get<std::int64_t>();
    s.epoch_step = need("epoch_step").get<std::int64_t>();
    s.steps_per_epoch = need("steps_per_epoch").get<std::int64_t>();
    s.accumulation = need("accumulation").get<std::int64_t>();
    s.total_steps = need("total_steps").get<std::int64_t>();
    s.seed = need("seed").get<std::int64_t>();
    const auto& schedule = need("schedule");
    s.schedule = schedule.at("type").get<std::string>();
    s.lr = schedule.at("lr").get<double>();
    s.loss_scale = need("loss_scale");
    const auto& w = need("window");
    s.window_loss = w.at("loss").get<double>();
    s.window_top1 = w.at("top1").get<std::int64_t>();
    s.window_rows = w.at("rows").get<std::int64_t>();
    s.window_steps = w.at("steps").get<std::int64_t>();
    s.window_samples = w.at("samples").get<std::int64_t>();
    s.last_eval = need("last_eval");
    s.best_eval = need("best_eval");
    s.last_train = need("last_train");
    s.metrics_bytes = need("metrics_bytes").get<std::uint64_t>();
    s.timing_bytes = need("timing_bytes").get<std::uint64_t>();
    if (j.contains("metric") && j["metric"].is_number()) s.metric = j["metric"].get<double>();
    if (j.contains("metric_name")) s.metric_name = j["metric_name"].get<std::string>();
    if (j.contains("events_bytes")) s.events_bytes = j["events_bytes"].get<std::uint64_t>();
    if (j.contains("optimizer")) s.optimizer = j["optimizer"].get<std::string>();
    if (j.contains("early_stopping")) {
      s.early_stopping = j["early_stopping"];
      // Read now, so that a malformed one is this error and not a later one.
      (void)s.early_stopping.at("best_step").get<std::int64_t>();
      (void)s.early_stopping.at("bad").get<std::int64_t>();
    }
    // Counts that cannot be: a state edited by hand (its checksum recomputed).
    const auto at_least = [&](const char* key, std::int64_t value, std::int64_t low) {
      if (value < low)
        throw CheckpointError(path + ": state '" + key + "' is " + std::to_string(value) +
                              ", below " + std::to_string(low));
    };
    at_least("step", s.step, 0);
    at_least("epoch", s.epoch, 0);
    at_least("epoch_step", s.epoch_step, 0);
    at_least("steps_per_epoch", s.steps_per_epoch, 1);
    at_least("accumulation", s.accumulation, 1);
    if (s.epoch_step > s.steps_per_epoch)
      throw CheckpointError(path + ": state 'epoch_step' " + std::to_string(s.epoch_step) +
                            " is past its epoch of " + std::to_string(s.steps_per_epoch) +
                            " steps");
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + ": malformed state: " + e.what());
  }
}

}  // namespace trainer::checkpoint
