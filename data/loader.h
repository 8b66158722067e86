// Loader: the threaded prefetching batch loader. Worker threads assemble whole
// batches (read + transform every sample) straight into a ring of reusable
// host buffers; the trainer takes them in order with next(), without copying.
//
// Order and sharding. Each epoch visits the dataset in a permutation seeded by
// (seed, epoch) (or in order without shuffle). With world_size > 1 rank r
// takes positions r, r + world, r + 2*world, ... With equal_shards (training)
// every rank gets the same number of samples: with drop_last floor(N / world),
// the last N mod world of the permutation left out, so that the ranks train
// the samples one rank with their batches together would; without, ceil(N /
// world), the permutation padded by wrapping around to a multiple of world
// (at most world-1 samples twice) so that together they cover every sample.
// Without equal_shards (evaluation) each sample is in exactly one shard, and
// the shards differ by at most one sample.
// With drop_last the last incomplete batch of a shard is dropped; otherwise it
// is padded: pad rows hold zeros and label -100 (ignored by the losses), and
// Batch::rows says how many rows are real.
//
// Determinism. Augmentation randomness is a function of (seed, epoch, dataset
// index) only, so batches are bit-identical whatever the number of workers.
//
// Lifetime. The batch returned by next() stays valid until the next call to
// next() or start_epoch(); the destructor stops the workers at any point
// without waiting for the epoch to finish.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/transforms.h"
#include "ops/tensor.h"

namespace trainer::data {

struct LoaderOptions {
  std::int64_t batch_size = 64;
  std::int64_t workers = 2;   // 0: batches are built on the calling thread inside next()
  std::int64_t prefetch = 4;  // batches built ahead of the one the step uses (ring: one more)
  bool shuffle = true;
  bool drop_last = true;
  std::uint64_t seed = 0;
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
  bool equal_shards = true;  // false: no wrapped samples, each counted once over the ranks
  bool evaluation = false;   // an evaluation's: errors name its batch without an epoch
  // Host buffer allocation for the ring. Default: 64-byte aligned malloc. The
  // CUDA build passes cudaHostAlloc / cudaFreeHost when pin_memory is on.
  bool pin_memory = false;
  std::function<void*(std::size_t bytes)> allocate;
  std::function<void(void* pointer)> free;
};

struct Batch {
  TensorRef inputs;       // f32 [batch_size, ...sample shape after transforms]
  TensorRef labels;       // i64 [batch_size] classes, or f32 [batch_size, ...target] for regression
  std::int64_t rows = 0;  // real rows; rows..batch_size-1 are padding (zeros, label -100)
  std::int64_t epoch = 0;
  std::int64_t index = 0;  // batch position within the epoch
};

// Where the loader stands: `position` batches of `epoch` have been handed out.
struct Cursor {
  std::int64_t epoch = 0;
  std::int64_t position = 0;
};

inline constexpr std::int64_t kIgnoreLabel = -100;

class Loader {
 public:
  // Throws std::invalid_argument for impossible options (batch_size < 1, rank
  // outside [0, world_size), a pipeline that cannot take the dataset's samples).
  Loader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const Pipeline> pipeline,
         LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts (or restarts) producing `epoch` from batch `position`; abandons any
  // batch in flight. Must be called before the first next().
  void start_epoch(std::int64_t epoch, std::int64_t position = 0);
  // Blocks until the next batch in order is ready. nullptr at the end of the
  // epoch. Throws SampleReadError when a sample of the batch cannot be read
  // (a worker's error, or the calling thread's with workers: 0).
  const Batch* next();

  Cursor cursor() const;  // the next batch next() would return
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The batches each of `world_size` ranks gets from `samples` in one epoch
  // (equal shards).
  static std::int64_t batches_per_epoch(std::int64_t samples, std::int64_t batch_size,
                                        std::int64_t world_size, bool drop_last);
  // The samples each of `world_size` ranks gets in one epoch (equal shards).
  static std::int64_t equal_shard_size(std::int64_t samples, std::int64_t world_size,
                                       bool drop_last);
  // The batch buffers a loader with `options` over `samples` samples holds:
  // `prefetch` built ahead and the one handed out, but never more than an
  // epoch has batches, and one when the batches are built on the calling
  // thread (workers: 0).
  static std::int64_t ring_slots(const LoaderOptions& options, std::int64_t samples);
  std::int64_t samples_per_rank() const { return shard_size_; }
  // The batch buffers of the ring (ring_slots of its options): all of them
  // are being built at once while the step waits for one.
  std::int64_t ring_size() const { return static_cast<std::int64_t>(ring_.size()); }
  // The real rows of batch `batch` of an epoch (batch_size but for the last
  // batch without drop_last; 0 past the end).
  std::int64_t rows_of_batch(std::int64_t batch) const;
  Shape sample_shape() const { return sample_shape_; }  // after transforms
  const LoaderOptions& options() const { return options_; }
  // Dataset indices of batch `batch` of `epoch` for this rank, in row order
  // (what the batch holds; used by tests and tools).
  std::vector<std::int64_t> batch_indices(std::int64_t epoch, std::int64_t batch) const;

  // Production capacity over the last window of batches: samples per second
  // the workers together can build (time spent waiting for a free buffer is
  // excluded). 0 until a batch has been built.
  double samples_per_second() const;
  // Seconds next() spent blocked waiting for a batch, in total.
  double wait_seconds() const;

 private:
  struct Slot;
  void worker_loop();
  void fill(Slot& slot, std::int64_t epoch, std::int64_t batch, const std::atomic<bool>& cancel);
  void stop_workers();
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;  // dataset indices
  std::int64_t shard_position_to_index(const std::vector<std::int64_t>& order,
                                       std::int64_t position) const;

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const Pipeline> pipeline_;
  LoaderOptions options_;
  Shape raw_shape_, sample_shape_, target_shape_;
  std::int64_t sample_numel_ = 0, raw_numel_ = 0, target_numel_ = 0;
  bool regression_ = false;
  std::int64_t shard_size_ = 0, batches_per_epoch_ = 0;

  std::vector<std::unique_ptr<Slot>> ring_;
  std::vector<std::int64_t> order_;  // this epoch's permutation (dataset indices)

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;   // workers wait for a claimable batch
  std::condition_variable batch_ready_;  // next() waits for its batch
  std::condition_variable idle_;         // start_epoch waits for busy workers
  bool stopping_ = false;
  bool started_ = false;
  std::int64_t epoch_ = 0;
  std::int64_t next_claim_ = 0;    // next batch a worker will build
  std::int64_t next_deliver_ = 0;  // next batch next() returns
  std::int64_t busy_ = 0;          // workers filling a slot
  Slot* handed_out_ = nullptr;     // the slot the caller currently holds
  std::atomic<bool> cancel_{false};
  std::vector<std::thread> threads_;

  struct Timing {
    std::int64_t rows = 0;
    double seconds = 0;
  };
  std::vector<Timing> timings_;  // ring of recent batch build times
  std::size_t timing_next_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace trainer::data
