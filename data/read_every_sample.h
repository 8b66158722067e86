// Reading every sample of a dataset once, on several threads, to find the
// samples that cannot be read (a damaged image in an image folder) before a
// run meets them: `trainer validate --data`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace trainer::data {

struct SampleScan {
  std::int64_t samples = 0;  // how many were read (all of the dataset)
  std::int64_t failed = 0;   // how many of them threw
  // The errors of the first failures in index order, at most `keep_errors`
  // of them: (index, message naming the file).
  std::vector<std::pair<std::int64_t, std::string>> first_errors;
};

// Calls dataset.read for every index on `threads` threads (at least one) and
// counts the failures; never throws for a sample that cannot be read.
// `progress`, when set, is called from one thread now and then with the
// number of samples read so far.
SampleScan read_every_sample(const Dataset& dataset, int threads, std::size_t keep_errors,
                             const std::function<void(std::int64_t)>& progress = {});

}  // namespace trainer::data
