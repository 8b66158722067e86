// labels: cpu
// Autodiff schedule and the memory planner: buffers alive at the same time
// never share bytes, reuse makes the arena smaller than the sum of buffers,
// and gradient fan-in gets a sum node.
#include <catch2/catch.hpp>

#include "runner/graph/autodiff.h"
#include "runner/graph/memory_plan.h"
#include "tests/program_fixture.h"

using namespace trainer;
using namespace trainer::graph;

namespace {

TrainingGraph differentiate_yaml(const std::string& yaml) {
  ModelInput in;
  in.batch = 8;
  in.sample_shape = {3, 12, 12};
  in.num_classes = 10;
  return differentiate(graph_of_yaml(yaml, in));
}

const char* kResidual = R"(
layers:
  - {type: conv2d, name: stem, out_channels: 8, kernel: 3, padding: 1}
  - {type: relu, name: r0}
  - {type: conv2d, name: a, out_channels: 8, kernel: 3, padding: 1}
  - {type: relu, name: r1}
  - {type: add, name: sum, inputs: [r1, r0]}
  - {type: global_avgpool}
  - {type: linear, out_features: 10}
)";

}  // namespace

TEST_CASE("a value read by two layers gets its gradients summed") {
  const TrainingGraph tg = differentiate_yaml(kResidual);
  const Graph& g = tg.graph;
  int sums = 0;
  for (int n = tg.model_nodes; n < static_cast<int>(g.nodes.size()); ++n) {
    CHECK(g.nodes[n].op->name == "add");
    CHECK(g.nodes[n].inputs.size() == 2);
    ++sums;
  }
  CHECK(sums == 1);  // r0 feeds both `a` and `sum`
  // Every model node with parameters runs backward; the stem writes no input gradient.
  int backward_steps = 0;
  for (const Step& s : tg.schedule)
    if (s.kind == Step::Kind::backward) ++backward_steps;
  CHECK(backward_steps == tg.model_nodes);
  for (const Step& s : tg.schedule)
    if (s.kind == Step::Kind::backward && s.node == 0)
      for (ValueId gv : s.grad_inputs) CHECK(gv == kNoValue);
}

TEST_CASE("the plan never overlaps buffers that are alive together") {
  const TrainingGraph tg = differentiate_yaml(kResidual);
  const std::size_t nodes = tg.graph.nodes.size();
  // Pretend every node saves 1000 bytes and needs some workspace.
  const MemoryPlan plan = plan_memory(tg, std::vector<std::vector<std::size_t>>(nodes, {1000}),
                                      std::vector<std::size_t>(nodes, 4096));
  std::size_t total = 0;
  for (std::size_t i = 0; i < plan.buffers.size(); ++i) {
    const Buffer& a = plan.buffers[i];
    total += a.bytes;
    CHECK(a.offset % kArenaAlignment == 0);
    CHECK(a.offset + a.bytes <= plan.arena_bytes);
    for (std::size_t j = i + 1; j < plan.buffers.size(); ++j) {
      const Buffer& b = plan.buffers[j];
      const bool alive_together = a.first_step <= b.last_step && b.first_step <= a.last_step;
      const bool share_bytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      if (alive_together && a.bytes && b.bytes) CHECK_FALSE(share_bytes);
    }
  }
  CHECK(plan.arena_bytes < total);  // liveness lets buffers reuse bytes
  CHECK(plan.workspace_bytes == 4096);
  CHECK(plan.forward_arena_bytes <= plan.arena_bytes);
}

TEST_CASE("forward values the backward needs stay alive until their backward step") {
  const TrainingGraph tg = differentiate_yaml(kResidual);
  const MemoryPlan plan =
      plan_memory(tg, std::vector<std::vector<std::size_t>>(tg.graph.nodes.size()),
                  std::vector<std::size_t>(tg.graph.nodes.size(), 0));
  for (std::size_t s = 0; s < tg.schedule.size(); ++s) {
    const Step& step = tg.schedule[s];
    if (step.kind != Step::Kind::backward) continue;
    const Node& node = tg.graph.nodes[step.node];
    if (!node.op->reads(node.attrs).inputs) continue;
    for (ValueId in : step.inputs)
      CHECK(plan.buffers[plan.value_buffer[in]].last_step >= static_cast<int>(s));
  }
}
