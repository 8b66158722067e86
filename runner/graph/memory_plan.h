// The static memory plan: every activation, gradient and saved buffer of one
// training step gets an offset in one arena, from liveness over the schedule
// (a buffer's bytes are reused once its last reader has run). Parameters,
// their gradients and optimizer state are persistent and sized separately.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runner/graph/autodiff.h"

namespace trainer::graph {

constexpr std::size_t kArenaAlignment = 64;

struct Buffer {
  std::string name;
  std::size_t bytes = 0;
  int first_step = 0;  // index in the schedule of the first writer
  int last_step = 0;   // index of the last reader
  std::size_t offset = 0;
};

struct MemoryPlan {
  std::vector<Buffer> buffers;
  std::vector<int> value_buffer;                // per value: index into buffers (-1: none)
  std::vector<std::vector<int>> saved_buffers;  // per forward step: indices of its saved buffers
  std::size_t arena_bytes = 0;                  // peak of the planned buffers
  std::size_t workspace_bytes = 0;              // one scratch region, the largest any call needs
  std::size_t forward_arena_bytes = 0;          // peak over the forward steps alone (eval)
};

// `saved_bytes[node]` and `workspace_bytes[node]` come from the compiled kernels.
MemoryPlan plan_memory(const TrainingGraph& tg,
                       const std::vector<std::vector<std::size_t>>& saved_bytes,
                       const std::vector<std::size_t>& workspace_bytes);

}  // namespace trainer::graph
