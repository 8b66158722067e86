// Counter-based random numbers for the data pipeline. Every random choice the
// pipeline makes (epoch permutation, eval split, augmentation) is a pure
// function of a few integers (seed, epoch, sample index, purpose) hashed with
// splitmix64, so the result never depends on which thread did the work.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace trainer::data {

// One step of splitmix64 applied to `x` (a strong 64-bit mixer).
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Hashes a list of integers into one 64-bit key.
constexpr std::uint64_t hash_key(std::initializer_list<std::uint64_t> parts) {
  std::uint64_t h = 0x6A09E667F3BCC909ull;
  for (std::uint64_t p : parts) h = splitmix64(h ^ splitmix64(p));
  return h;
}

// A small stream of random numbers derived from one key.
class CounterRng {
 public:
  explicit CounterRng(std::uint64_t key) : key_(key) {}

  std::uint64_t next_u64() { return splitmix64(key_ + 0x632BE59BD9B4E019ull * ++counter_); }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next_u64() % n; }
  // Uniform integer in [lo, hi].
  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo + 1)));
  }

 private:
  std::uint64_t key_;
  std::uint64_t counter_ = 0;
};

// Purposes, mixed into keys so the streams for different jobs never coincide.
enum class RngPurpose : std::uint64_t { shuffle = 1, split = 2, augment = 3, synthetic = 4 };

}  // namespace trainer::data
