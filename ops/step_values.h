// StepValues: what changes from one training step to the next inside the
// kernels (the step's seed and how many batch rows are real). They live in
// backend memory and kernels read them there, so a step recorded once (a CUDA
// graph) reads the current ones each time it is replayed.
#pragma once

#include <algorithm>
#include <cstdint>

namespace trainer {

struct StepValues {
  std::uint64_t seed = 0;        // the step's seed; each stochastic call mixes in its salt
  std::int64_t valid_rows = -1;  // losses: rows beyond this are padding (-1: all)
};

// splitmix64: a well-mixed 64-bit hash of a counter.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The seed one stochastic call draws from: the step's seed mixed with the
// call's fixed salt. These functions are constexpr, so CUDA kernels call them
// on the device too (--expt-relaxed-constexpr).
constexpr std::uint64_t call_seed(std::uint64_t step_seed, std::uint64_t salt) {
  return splitmix64(step_seed ^ salt);
}

// How many of `rows` rows a loss counts.
constexpr std::int64_t rows_used(std::int64_t valid_rows, std::int64_t rows) {
  return valid_rows < 0 ? rows : std::min(valid_rows, rows);
}

}  // namespace trainer
