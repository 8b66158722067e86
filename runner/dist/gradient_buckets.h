// GradientBuckets: the gradients of a step grouped into buckets of about
// `bucket_bytes`, in the order backward finishes them. A bucket's all-reduce
// is started as soon as its last gradient is final, so communication overlaps
// the rest of backward; finish() waits for all of them. Every rank builds the
// same buckets from the same program, so the collectives match up.
#pragma once

#include <cstddef>
#include <functional>
#include <unordered_map>
#include <vector>

#include "ops/tensor.h"

namespace trainer::graph {
class Program;
struct Call;
}  // namespace trainer::graph

namespace trainer::dist {

class GradientBuckets {
 public:
  // Starts the reduction of one packed bucket (floats, summed in place).
  using Launch = std::function<void(float* data, std::size_t count)>;

  // `grads` in the order they become final; `bucket_bytes` 0: one bucket each.
  GradientBuckets(std::vector<TensorRef> grads, std::size_t bucket_bytes);

  // The order backward finishes `program`'s parameter gradients, and which
  // backward call (by node) finishes which of them.
  static GradientBuckets from_program(const graph::Program& program, std::size_t bucket_bytes);

  // A backward call finished: packs and launches every bucket now complete.
  void after_backward(const graph::Call& call, const Launch& launch);
  // Launches what is still pending (e.g. no hook ran), in bucket order.
  void launch_remaining(const Launch& launch);
  // After every launched reduction completed: copies the sums back, resets for the next step.
  void unpack();

  bool covers(const std::vector<TensorRef>& grads) const;  // the same tensors, any order
  std::size_t bucket_count() const { return buckets_.size(); }
  std::size_t bucket_bytes() const { return bucket_bytes_; }

 private:
  struct Bucket {
    std::vector<std::size_t> grads;     // indices into grads_
    std::size_t offset = 0, count = 0;  // floats in staging_
    std::size_t ready = 0;
    bool launched = false;
  };
  void mark_ready(std::size_t grad, const Launch& launch);
  void launch(Bucket& b, const Launch& launch);

  std::vector<TensorRef> grads_;
  std::vector<std::size_t> bucket_of_;  // per grad
  std::vector<Bucket> buckets_;
  std::vector<float> staging_;
  std::size_t bucket_bytes_;
  std::size_t next_launch_ = 0;  // buckets launch strictly in order
  std::unordered_map<int, std::vector<std::size_t>> finished_by_node_;
  std::vector<bool> ready_;
};

}  // namespace trainer::dist
