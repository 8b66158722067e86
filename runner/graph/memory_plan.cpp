// Liveness analysis and offset assignment (largest buffers first, each at the
// lowest offset that no buffer alive at the same time occupies).
#include "runner/graph/memory_plan.h"

#include <algorithm>

namespace trainer::graph {
namespace {

std::size_t align(std::size_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

void assign_offsets(std::vector<Buffer>& buffers, std::size_t& peak) {
  std::vector<int> order(buffers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return buffers[a].bytes > buffers[b].bytes; });
  // The buffers placed so far, by offset: the ranges of those alive at the
  // same time as the next one are met in the order of their starts.
  std::vector<int> placed;
  peak = 0;
  for (int b : order) {
    Buffer& buf = buffers[b];
    const std::size_t size = align(buf.bytes);
    std::size_t offset = 0;
    for (int p : placed) {
      const Buffer& o = buffers[p];
      if (o.first_step > buf.last_step || buf.first_step > o.last_step) continue;
      if (offset + size <= o.offset) break;  // the gap before it holds this one
      offset = std::max(offset, o.offset + align(o.bytes));
    }
    buf.offset = offset;
    peak = std::max(peak, offset + size);
    placed.insert(std::upper_bound(placed.begin(), placed.end(), offset,
                                   [&](std::size_t at, int p) { return at < buffers[p].offset; }),
                  b);
  }
}

}  // namespace

MemoryPlan plan_memory(const TrainingGraph& tg,
                       const std::vector<std::vector<std::size_t>>& saved_bytes,
                       const std::vector<std::size_t>& workspace_bytes) {
  const Graph& g = tg.graph;
  MemoryPlan plan;
  plan.value_buffer.assign(g.values.size(), -1);
  plan.saved_buffers.assign(tg.schedule.size(), {});
  const int last = static_cast<int>(tg.schedule.size()) - 1;

  auto buffer_of = [&](ValueId v) -> Buffer& {
    if (plan.value_buffer[v] < 0) {
      plan.value_buffer[v] = static_cast<int>(plan.buffers.size());
      const Value& value = g.values[v];
      plan.buffers.push_back(
          {value.name, static_cast<std::size_t>(numel(value.shape)) * dtype_size(value.dtype), -1,
           -1, 0});
    }
    return plan.buffers[plan.value_buffer[v]];
  };
  auto write = [&](ValueId v, int step) {
    Buffer& b = buffer_of(v);
    if (b.first_step < 0 || step < b.first_step) b.first_step = step;
    b.last_step = std::max(b.last_step, step);
  };
  auto read = [&](ValueId v, int step) {
    Buffer& b = buffer_of(v);
    b.last_step = std::max(b.last_step, step);
  };

  // Fed values live through the whole step: the batch, the labels, the loss seed.
  for (ValueId v : {g.input, g.labels, tg.loss_seed}) {
    if (v == kNoValue) continue;
    write(v, 0);
    read(v, last);
  }
  // The loss and the logits are read back after the step (metrics).
  for (ValueId v : {g.loss, g.logits})
    if (v != kNoValue) read(v, last);

  for (int s = 0; s <= last; ++s) {
    const Step& step = tg.schedule[s];
    const Node& node = g.nodes[step.node];
    plan.workspace_bytes = std::max(plan.workspace_bytes, workspace_bytes[step.node]);
    if (step.kind == Step::Kind::forward) {
      for (ValueId in : step.inputs) read(in, s);
      write(step.output, s);
      for (std::size_t i = 0; i < saved_bytes[step.node].size(); ++i) {
        const int id = static_cast<int>(plan.buffers.size());
        plan.buffers.push_back(
            {node.name + (step.recompute ? ".recomputed" : "") + ".saved" + std::to_string(i),
             saved_bytes[step.node][i], s, s, 0});
        plan.saved_buffers[s].push_back(id);
      }
    } else {
      if (node.op->reads(node.attrs).inputs)
        for (ValueId in : step.inputs) read(in, s);
      if (node.op->reads(node.attrs).output) read(step.output, s);
      read(step.grad_output, s);
      for (int id : plan.saved_buffers[step.saved_from])
        plan.buffers[id].last_step = std::max(plan.buffers[id].last_step, s);
      for (ValueId gv : step.grad_inputs)
        if (gv != kNoValue) write(gv, s);
    }
  }
  for (auto& b : plan.buffers) {
    if (b.first_step < 0) b.first_step = 0;
    if (b.last_step < b.first_step) b.last_step = b.first_step;
  }
  assign_offsets(plan.buffers, plan.arena_bytes);

  // The forward pass alone (eval): the same offsets are valid, its peak is what it touches.
  for (const auto& b : plan.buffers)
    if (b.first_step < tg.forward_steps)
      plan.forward_arena_bytes = std::max(plan.forward_arena_bytes, b.offset + align(b.bytes));
  return plan;
}

}  // namespace trainer::graph
