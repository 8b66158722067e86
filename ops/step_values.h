// StepValues: what changes from one training step to the next inside the
// kernels (the step's seed, how many batch rows are real and where the rows
// sit in the step's whole batch). They live in
// backend memory and kernels read them there, so a step recorded once (a CUDA
// graph) reads the current ones each time it is replayed.
#pragma once

#include <algorithm>
#include <cstdint>

namespace trainer {

struct StepValues {
  std::uint64_t seed = 0;        // the step's seed; each stochastic call mixes in its salt
  std::int64_t valid_rows = -1;  // losses: rows beyond this are padding (-1: all)
  // Row i of this micro-batch is sample first_position + i * position_stride
  // of the step's global batch (over all ranks and micro-batches). Stochastic
  // ops key their draws by it, so a sample draws alike whichever rank or
  // micro-batch holds it: 2 ranks x 64 train like 1 x 128, dropout included.
  std::int64_t first_position = 0;
  std::int64_t position_stride = 1;
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

// The counter a stochastic op draws element `column` of row `row` (of
// `per_row` elements) from: the element's index in the step's global batch.
constexpr std::uint64_t draw_index(std::int64_t first_position, std::int64_t position_stride,
                                   std::int64_t row, std::int64_t per_row, std::int64_t column) {
  return static_cast<std::uint64_t>((first_position + row * position_stride) * per_row + column);
}

// How many of `rows` rows a loss counts.
constexpr std::int64_t rows_used(std::int64_t valid_rows, std::int64_t rows) {
  return valid_rows < 0 ? rows : std::min(valid_rows, rows);
}

}  // namespace trainer
