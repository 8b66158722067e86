// Gradient buckets: planning from the program's backward calls, packing, launching in order.
#include "runner/dist/gradient_buckets.h"

#include <cstring>
#include <map>
#include <stdexcept>

#include "runner/graph/program.h"

namespace trainer::dist {

GradientBuckets::GradientBuckets(std::vector<TensorRef> grads, std::size_t bucket_bytes)
    : grads_(std::move(grads)), bucket_bytes_(bucket_bytes) {
  bucket_of_.resize(grads_.size());
  ready_.assign(grads_.size(), false);
  std::size_t offset = 0;
  for (std::size_t g = 0; g < grads_.size(); ++g) {
    if (grads_[g].dtype != DType::f32)
      throw std::invalid_argument("gradient buckets hold float32 gradients");
    if (buckets_.empty() || buckets_.back().count * sizeof(float) >= bucket_bytes_) {
      buckets_.push_back({});
      buckets_.back().offset = offset;
    }
    Bucket& b = buckets_.back();
    b.grads.push_back(g);
    const auto n = static_cast<std::size_t>(grads_[g].numel());
    b.count += n;
    offset += n;
    bucket_of_[g] = buckets_.size() - 1;
  }
  staging_.resize(offset);
}

GradientBuckets GradientBuckets::from_program(const graph::Program& program,
                                              std::size_t bucket_bytes) {
  // Which backward calls write each gradient; it is final after the last of them.
  std::map<void*, std::size_t> index_of;  // grad data -> position in the program's params
  std::vector<TensorRef> by_param;
  for (const auto& p : program.params()) {
    if (!p.grad) continue;
    index_of[p.grad.data] = by_param.size();
    by_param.push_back(p.grad);
  }
  std::vector<int> last_writer(by_param.size(), -1);
  for (const auto& call : program.train_calls()) {
    if (!call.backward) continue;
    for (const auto& g : call.args.grad_params) {
      const auto it = index_of.find(g.data);
      if (it != index_of.end()) last_writer[it->second] = call.node;
    }
  }
  std::vector<TensorRef> order;
  std::vector<std::pair<int, std::size_t>> finished;  // (node, position in order)
  for (const auto& call : program.train_calls()) {
    if (!call.backward) continue;
    for (const auto& g : call.args.grad_params) {
      const auto it = index_of.find(g.data);
      if (it == index_of.end() || last_writer[it->second] != call.node) continue;
      last_writer[it->second] = -1;  // listed once
      finished.emplace_back(call.node, order.size());
      order.push_back(g);
    }
  }
  // Gradients no backward call writes (none in practice) go last, launched by launch_remaining().
  for (std::size_t i = 0; i < by_param.size(); ++i)
    if (last_writer[i] != -1) order.push_back(by_param[i]);
  GradientBuckets buckets(std::move(order), bucket_bytes);
  for (const auto& [node, position] : finished) buckets.finished_by_node_[node].push_back(position);
  return buckets;
}

void GradientBuckets::launch(Bucket& b, const Launch& start) {
  std::size_t at = b.offset;
  for (std::size_t g : b.grads) {
    const TensorRef& t = grads_[g];
    std::memcpy(staging_.data() + at, t.data, t.bytes());
    at += static_cast<std::size_t>(t.numel());
  }
  b.launched = true;
  start(staging_.data() + b.offset, b.count);
}

void GradientBuckets::mark_ready(std::size_t grad, const Launch& start) {
  if (ready_[grad]) return;
  ready_[grad] = true;
  ++buckets_[bucket_of_[grad]].ready;
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == buckets_[next_launch_].grads.size()) {
    launch(buckets_[next_launch_], start);
    ++next_launch_;
  }
}

void GradientBuckets::after_backward(const graph::Call& call, const Launch& start) {
  const auto it = finished_by_node_.find(call.node);
  if (it == finished_by_node_.end()) return;
  for (std::size_t g : it->second) mark_ready(g, start);
}

void GradientBuckets::launch_remaining(const Launch& start) {
  for (std::size_t g = 0; g < grads_.size(); ++g) mark_ready(g, start);
}

void GradientBuckets::unpack() {
  for (const Bucket& b : buckets_) {
    std::size_t at = b.offset;
    for (std::size_t g : b.grads) {
      const TensorRef& t = grads_[g];
      std::memcpy(t.data, staging_.data() + at, t.bytes());
      at += static_cast<std::size_t>(t.numel());
    }
  }
  for (Bucket& b : buckets_) {
    b.ready = 0;
    b.launched = false;
  }
  ready_.assign(grads_.size(), false);
  next_launch_ = 0;
}

bool GradientBuckets::covers(const std::vector<TensorRef>& grads) const {
  if (grads.size() != grads_.size()) return false;
  std::map<void*, std::int64_t> mine;
  for (const auto& t : grads_) mine[t.data] = t.numel();
  for (const auto& t : grads) {
    const auto it = mine.find(t.data);
    if (it == mine.end() || it->second != t.numel()) return false;
  }
  return true;
}

}  // namespace trainer::dist
