// The per-step losses kept in backend memory (loss_log.h).
#include "runner/train/loss_log.h"

#include <algorithm>

namespace trainer::train {

LossLog::LossLog(Backend& backend, std::size_t capacity)
    : backend_(backend),
      slots_(backend, std::clamp<std::size_t>(capacity, 1, kMaxCapacity) * sizeof(float)),
      capacity_(std::clamp<std::size_t>(capacity, 1, kMaxCapacity)) {
  backend_.vector_ops().fill({slots_.data(), {static_cast<std::int64_t>(capacity_)}, DType::f32},
                             0.0f);
}

void LossLog::record(const TensorRef& loss) {
  if (used_ == capacity_) read_back();
  // slot += loss into a zeroed slot: a copy that stays on the device.
  backend_.vector_ops().accumulate({static_cast<float*>(slots_.data()) + used_, {1}, DType::f32},
                                   loss);
  ++used_;
}

void LossLog::read_back() {
  if (used_ == 0) return;
  const std::size_t first = pending_.size();
  pending_.resize(first + used_);
  backend_.copy_to_host(pending_.data() + first, slots_.data(), used_ * sizeof(float));
  backend_.vector_ops().fill({slots_.data(), {static_cast<std::int64_t>(used_)}, DType::f32}, 0.0f);
  used_ = 0;
}

std::vector<float> LossLog::read() {
  read_back();
  std::vector<float> losses;
  losses.swap(pending_);
  return losses;
}

}  // namespace trainer::train
