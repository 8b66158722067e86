// The prefetching loader: ring slots, worker threads, epochs and cursors.
#include "data/loader.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "data/rng.h"

namespace trainer::data {

// One reusable batch buffer of the ring. Batch k of an epoch always lives in
// slot k % (the ring's size, ring_slots), so slots are reused strictly in order.
struct Loader::Slot {
  enum class State { free, filling, ready, failed };
  State state = State::free;
  std::int64_t batch = -1;  // batch number held (or being built)
  Batch view;
  std::string error;
  std::function<void(void*)> release;

  ~Slot() {
    if (view.inputs.data) release(view.inputs.data);
    if (view.labels.data) release(view.labels.data);
  }
};

namespace {

// Per-thread buffers for one sample, grown once and then reused.
struct SampleBuffers {
  std::vector<float> raw;
  std::vector<float> target;
  PipelineScratch scratch;
};

void* aligned_host_alloc(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

using Clock = std::chrono::steady_clock;
constexpr std::size_t kTimingWindow = 32;

// Batches in an epoch of a shard of `shard` samples.
std::int64_t batches_of_shard(std::int64_t shard, std::int64_t batch_size, bool drop_last) {
  return drop_last ? shard / batch_size : (shard + batch_size - 1) / batch_size;
}

}  // namespace

std::int64_t Loader::equal_shard_size(std::int64_t samples, std::int64_t world_size,
                                      bool drop_last) {
  return drop_last ? samples / world_size : (samples + world_size - 1) / world_size;
}

std::int64_t Loader::batches_per_epoch(std::int64_t samples, std::int64_t batch_size,
                                       std::int64_t world_size, bool drop_last) {
  return batches_of_shard(equal_shard_size(samples, world_size, drop_last), batch_size, drop_last);
}

namespace {

// The samples of this rank's part of an epoch of `samples`.
std::int64_t shard_size_of(const LoaderOptions& o, std::int64_t samples) {
  return o.equal_shards
             ? Loader::equal_shard_size(samples, o.world_size, o.drop_last)
             : (std::max<std::int64_t>(samples - o.rank, 0) + o.world_size - 1) / o.world_size;
}

}  // namespace

std::int64_t Loader::ring_slots(const LoaderOptions& options, std::int64_t samples) {
  if (options.workers == 0) return 1;  // next() frees the last batch before building one
  const std::int64_t batches =
      batches_of_shard(shard_size_of(options, samples), options.batch_size, options.drop_last);
  // `prefetch` built ahead, and the one the step is using.
  return std::max<std::int64_t>(1, std::min(options.prefetch + 1, batches));
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const Pipeline> pipeline,
               LoaderOptions options)
    : dataset_(std::move(dataset)), pipeline_(std::move(pipeline)), options_(std::move(options)) {
  if (!dataset_) throw std::invalid_argument("data loader: no dataset");
  if (!pipeline_) pipeline_ = std::make_shared<Pipeline>();
  const LoaderOptions& o = options_;
  if (o.batch_size < 1) throw std::invalid_argument("data loader: batch_size must be >= 1");
  if (o.workers < 0) throw std::invalid_argument("data loader: workers must be >= 0");
  if (o.prefetch < 1) throw std::invalid_argument("data loader: prefetch must be >= 1");
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw std::invalid_argument("data loader: rank " + std::to_string(o.rank) +
                                " is outside [0, world_size " + std::to_string(o.world_size) + ")");
  }
  if (dataset_->size() < 1) {
    throw std::invalid_argument("data loader: " + dataset_->describe() + " holds no samples");
  }
  if (!options_.allocate || !options_.free) {
    options_.allocate = aligned_host_alloc;
    options_.free = [](void* p) { std::free(p); };
  }
  raw_shape_ = dataset_->sample_shape();
  raw_numel_ = numel(raw_shape_);
  sample_shape_ = pipeline_->output_shape(raw_shape_);
  sample_numel_ = numel(sample_shape_);
  target_shape_ = dataset_->target_shape();
  regression_ = !target_shape_.empty();
  target_numel_ = regression_ ? numel(target_shape_) : 1;

  const std::int64_t n = dataset_->size();
  shard_size_ = shard_size_of(o, n);
  batches_per_epoch_ = batches_of_shard(shard_size_, o.batch_size, o.drop_last);

  Shape input_shape{o.batch_size};
  input_shape.insert(input_shape.end(), sample_shape_.begin(), sample_shape_.end());
  Shape label_shape{o.batch_size};
  if (regression_)
    label_shape.insert(label_shape.end(), target_shape_.begin(), target_shape_.end());
  for (std::int64_t i = 0; i < ring_slots(o, n); ++i) {
    auto slot = std::make_unique<Slot>();
    slot->release = options_.free;
    slot->view.inputs.shape = input_shape;
    slot->view.inputs.dtype = DType::f32;
    slot->view.inputs.data = options_.allocate(slot->view.inputs.bytes());
    slot->view.labels.shape = label_shape;
    slot->view.labels.dtype = regression_ ? DType::f32 : DType::i64;
    slot->view.labels.data = options_.allocate(slot->view.labels.bytes());
    ring_.push_back(std::move(slot));
  }
  timings_.resize(kTimingWindow);
  try {
    for (std::int64_t i = 0; i < o.workers; ++i) threads_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    // The destructor does not run for a constructor that throws: the
    // workers already started are stopped here.
    stop_workers();
    throw std::runtime_error(
        "the data loader cannot start worker thread " + std::to_string(threads_.size() + 1) +
        " of " + std::to_string(o.workers) + " (" + e.what() +
        "): this process may start no more threads (ulimit -u, or a container's pids limit); "
        "set data.workers lower, or raise the limit");
  }
}

Loader::~Loader() {
  stop_workers();
}

void Loader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    cancel_ = true;
  }
  work_ready_.notify_all();
  batch_ready_.notify_all();
  idle_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::vector<std::int64_t> Loader::epoch_order(std::int64_t epoch) const {
  const std::int64_t n = dataset_->size();
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  if (!options_.shuffle) return order;
  CounterRng rng(hash_key({options_.seed, static_cast<std::uint64_t>(RngPurpose::shuffle),
                           static_cast<std::uint64_t>(epoch)}));
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1)));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

std::int64_t Loader::shard_position_to_index(const std::vector<std::int64_t>& order,
                                             std::int64_t position) const {
  const std::int64_t global = options_.rank + options_.world_size * position;
  return order[static_cast<std::size_t>(global % static_cast<std::int64_t>(order.size()))];
}

std::vector<std::int64_t> Loader::batch_indices(std::int64_t epoch, std::int64_t batch) const {
  const std::vector<std::int64_t> order = epoch_order(epoch);
  std::vector<std::int64_t> result;
  for (std::int64_t p = batch * options_.batch_size;
       p < std::min((batch + 1) * options_.batch_size, shard_size_); ++p) {
    result.push_back(shard_position_to_index(order, p));
  }
  return result;
}

void Loader::start_epoch(std::int64_t epoch, std::int64_t position) {
  if (epoch < 0 || position < 0 || position > batches_per_epoch_) {
    throw std::invalid_argument("data loader: cursor (epoch " + std::to_string(epoch) +
                                ", position " + std::to_string(position) +
                                ") is outside the epoch of " + std::to_string(batches_per_epoch_) +
                                " batches");
  }
  std::unique_lock lock(mutex_);
  cancel_ = true;
  idle_.wait(lock, [this] { return busy_ == 0; });
  for (auto& slot : ring_) {
    slot->state = Slot::State::free;
    slot->batch = -1;
    slot->error.clear();
  }
  handed_out_ = nullptr;
  order_ = epoch_order(epoch);  // no worker is busy and none can claim while we hold the lock
  epoch_ = epoch;
  next_claim_ = position;
  next_deliver_ = position;
  started_ = true;
  cancel_ = false;
  lock.unlock();
  work_ready_.notify_all();
}

std::int64_t Loader::rows_of_batch(std::int64_t batch) const {
  return std::clamp<std::int64_t>(shard_size_ - batch * options_.batch_size, 0,
                                  options_.batch_size);
}

Cursor Loader::cursor() const {
  std::lock_guard lock(mutex_);
  return {epoch_, next_deliver_};
}

void Loader::fill(Slot& slot, std::int64_t epoch, std::int64_t batch,
                  const std::atomic<bool>& cancel) {
  thread_local SampleBuffers buffers;
  buffers.raw.resize(static_cast<std::size_t>(raw_numel_));
  buffers.target.resize(static_cast<std::size_t>(target_numel_));
  const std::int64_t b = options_.batch_size;
  const std::int64_t first = batch * b;
  const std::int64_t rows = std::min(b, shard_size_ - first);
  float* inputs = slot.view.inputs.f32();
  for (std::int64_t r = 0; r < rows; ++r) {
    if (cancel.load(std::memory_order_relaxed)) return;
    const std::int64_t index = shard_position_to_index(order_, first + r);
    std::int64_t label = 0;
    try {
      dataset_->read(index, buffers.raw.data(), &label,
                     regression_ ? buffers.target.data() : nullptr);
      pipeline_->apply(buffers.raw.data(), raw_shape_, inputs + r * sample_numel_, options_.seed,
                       epoch, index, buffers.scratch);
    } catch (const std::exception& e) {
      const std::string where = options_.evaluation ? "evaluation batch " + std::to_string(batch)
                                                    : "epoch " + std::to_string(epoch) +
                                                          ", batch " + std::to_string(batch);
      throw SampleReadError("data loader: sample " + std::to_string(index) + " (" + where +
                            ") of " + dataset_->describe() + ": " + e.what());
    }
    if (regression_) {
      std::copy_n(buffers.target.data(), target_numel_, slot.view.labels.f32() + r * target_numel_);
    } else {
      slot.view.labels.i64()[r] = label;
    }
  }
  // Padding rows of a last, incomplete batch.
  std::fill(inputs + rows * sample_numel_, inputs + b * sample_numel_, 0.0f);
  if (regression_) {
    std::fill(slot.view.labels.f32() + rows * target_numel_,
              slot.view.labels.f32() + b * target_numel_, 0.0f);
  } else {
    std::fill(slot.view.labels.i64() + rows, slot.view.labels.i64() + b, kIgnoreLabel);
  }
  slot.view.rows = rows;
  slot.view.epoch = epoch;
  slot.view.index = batch;
}

void Loader::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] {
      return stopping_ || (started_ && !cancel_ && next_claim_ < batches_per_epoch_ &&
                           ring_[static_cast<std::size_t>(next_claim_ % ring_size())]->state ==
                               Slot::State::free);
    });
    if (stopping_) return;
    const std::int64_t batch = next_claim_++;
    const std::int64_t epoch = epoch_;
    Slot& slot = *ring_[static_cast<std::size_t>(batch % ring_size())];
    slot.state = Slot::State::filling;
    slot.batch = batch;
    ++busy_;
    lock.unlock();

    std::string error;
    const auto begin = Clock::now();
    try {
      fill(slot, epoch, batch, cancel_);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();

    lock.lock();
    --busy_;
    if (cancel_) {
      slot.state = Slot::State::free;
      idle_.notify_all();
      continue;
    }
    if (error.empty()) {
      slot.state = Slot::State::ready;
      timings_[timing_next_++ % kTimingWindow] = {slot.view.rows, seconds};
    } else {
      slot.state = Slot::State::failed;
      slot.error = std::move(error);
    }
    batch_ready_.notify_all();
  }
}

const Batch* Loader::next() {
  std::unique_lock lock(mutex_);
  if (!started_) throw std::logic_error("data loader: next() before start_epoch()");
  if (handed_out_) {
    handed_out_->state = Slot::State::free;
    handed_out_ = nullptr;
    work_ready_.notify_all();
  }
  if (next_deliver_ >= batches_per_epoch_) return nullptr;
  const std::int64_t batch = next_deliver_;
  Slot& slot = *ring_[static_cast<std::size_t>(batch % ring_size())];

  if (threads_.empty()) {  // workers: 0, build the batch here
    slot.state = Slot::State::filling;
    slot.batch = batch;
    const auto begin = Clock::now();
    lock.unlock();
    std::atomic<bool> never{false};
    fill(slot, epoch_, batch, never);  // exceptions go straight to the caller
    lock.lock();
    timings_[timing_next_++ % kTimingWindow] = {
        slot.view.rows, std::chrono::duration<double>(Clock::now() - begin).count()};
    slot.state = Slot::State::ready;
  }

  const auto wait_begin = Clock::now();
  batch_ready_.wait(lock, [&] {
    return stopping_ || (slot.batch == batch &&
                         (slot.state == Slot::State::ready || slot.state == Slot::State::failed));
  });
  wait_seconds_ += std::chrono::duration<double>(Clock::now() - wait_begin).count();
  if (stopping_) return nullptr;
  if (slot.state == Slot::State::failed) throw SampleReadError(slot.error);
  handed_out_ = &slot;
  ++next_deliver_;
  return &slot.view;
}

double Loader::samples_per_second() const {
  std::lock_guard lock(mutex_);
  double rows = 0, seconds = 0;
  for (const Timing& t : timings_) {
    rows += static_cast<double>(t.rows);
    seconds += t.seconds;
  }
  if (seconds <= 0) return 0;
  // The batches built at once while the step waits for one (the rate is
  // asked for then): a worker each, in every slot of the ring, the one the
  // step handed back included. (Fill times are wall time: workers sharing
  // cores fill slower.)
  const std::int64_t building = std::clamp<std::int64_t>(options_.workers, 1, ring_size());
  return static_cast<double>(building) * rows / seconds;
}

double Loader::wait_seconds() const {
  std::lock_guard lock(mutex_);
  return wait_seconds_;
}

}  // namespace trainer::data
