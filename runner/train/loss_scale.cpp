// Dynamic and static loss scaling: the configuration turned into the rule, and
// the state's checkpoint form.
#include "runner/train/loss_scale.h"

namespace trainer::train {

LossScaler::LossScaler(const config::LossScaleConfig& config, bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  rule_.dynamic = config.static_scale <= 0;
  rule_.growth_factor = config.growth_factor;
  rule_.backoff_factor = config.backoff_factor;
  rule_.min_scale = config.min_scale;
  rule_.growth_interval = config.growth_interval;
  rule_.hysteresis = config.hysteresis;
  rule_.collapse_patience = config.collapse_patience;
  state_.scale = rule_.dynamic ? config.init_scale : config.static_scale;
  state_.hysteresis_left = config.hysteresis;
}

bool LossScaler::update(bool gradients_finite) {
  if (!enabled_) return true;
  return advance_loss_scale(rule_, state_, gradients_finite);
}

nlohmann::json LossScaler::to_json() const {
  if (!enabled_) return nlohmann::json::object();
  return {{"scale", state_.scale},
          {"clean_steps", state_.clean_steps},
          {"hysteresis_left", state_.hysteresis_left},
          {"skipped_steps", state_.skipped},
          {"overflows_at_min", state_.overflows_at_min},
          {"last_overflow_step", state_.last_overflow_step},
          {"last_overflow_scale", state_.last_overflow_scale}};
}

void LossScaler::restore(const nlohmann::json& state, std::int64_t step) {
  if (!enabled_) return;
  state_.steps = step;  // also when the checkpoint has no scaler (a run that was not fp16)
  if (!state.is_object() || !state.contains("scale")) return;
  state_.scale = state.at("scale").get<double>();
  state_.clean_steps = state.at("clean_steps").get<std::int64_t>();
  state_.hysteresis_left = state.at("hysteresis_left").get<std::int64_t>();
  state_.skipped = state.at("skipped_steps").get<std::int64_t>();
  state_.overflows_at_min = state.at("overflows_at_min").get<std::int64_t>();
  state_.last_overflow_step = state.value("last_overflow_step", std::int64_t{0});
  state_.last_overflow_scale = state.value("last_overflow_scale", 0.0);
}

}  // namespace trainer::train
