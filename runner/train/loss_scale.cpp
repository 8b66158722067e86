// Dynamic and static loss scaling.
#include "runner/train/loss_scale.h"

#include <algorithm>

namespace trainer::train {
namespace {

// Above this the scaled loss itself risks overflowing float32 gradients.
constexpr double kMaxScale = 16777216.0;  // 2^24

}  // namespace

LossScaler::LossScaler(const config::LossScaleConfig& config, bool enabled)
    : config_(config), enabled_(enabled) {
  if (!enabled_) return;
  dynamic_ = config_.static_scale <= 0;
  scale_ = dynamic_ ? config_.init_scale : config_.static_scale;
  hysteresis_left_ = config_.hysteresis;
}

bool LossScaler::update(bool gradients_finite) {
  if (!enabled_) return true;
  if (gradients_finite) {
    overflows_at_min_ = 0;
    hysteresis_left_ = config_.hysteresis;
    if (dynamic_ && ++clean_steps_ >= config_.growth_interval) {
      scale_ = std::min(kMaxScale, scale_ * config_.growth_factor);
      clean_steps_ = 0;
    }
    return true;
  }
  ++skipped_;
  clean_steps_ = 0;
  const double floor = dynamic_ ? config_.min_scale : scale_;
  if (scale_ <= floor) ++overflows_at_min_;
  if (dynamic_ && --hysteresis_left_ <= 0) {
    scale_ = std::max(config_.min_scale, scale_ * config_.backoff_factor);
    hysteresis_left_ = config_.hysteresis;
  }
  return false;
}

nlohmann::json LossScaler::to_json() const {
  if (!enabled_) return nlohmann::json::object();
  return {{"scale", scale_},
          {"clean_steps", clean_steps_},
          {"hysteresis_left", hysteresis_left_},
          {"skipped_steps", skipped_},
          {"overflows_at_min", overflows_at_min_}};
}

void LossScaler::restore(const nlohmann::json& state) {
  if (!enabled_ || !state.is_object() || !state.contains("scale")) return;
  scale_ = state.at("scale").get<double>();
  clean_steps_ = state.at("clean_steps").get<std::int64_t>();
  hysteresis_left_ = state.at("hysteresis_left").get<std::int64_t>();
  skipped_ = state.at("skipped_steps").get<std::int64_t>();
  overflows_at_min_ = state.at("overflows_at_min").get<std::int64_t>();
}

}  // namespace trainer::train
