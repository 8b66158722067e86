// labels: cpu
// The fusion pass: which linear -> activation pairs become one node, that the
// graph stays consistent afterwards, and that a fused program trains exactly
// like the unfused one on the CPU (relu as a post-op, gelu after the GEMM).
#include <catch2/catch.hpp>

#include <string>
#include <utility>

#include "runner/graph/fusion.h"
#include "tests/program_fixture.h"

using namespace trainer;
using namespace trainer::graph;

namespace {

ModelInput input_of(Shape sample = {1, 4, 4}) {
  ModelInput in;
  in.batch = 6;
  in.sample_shape = std::move(sample);
  in.num_classes = 5;
  return in;
}

// The CPU's rule for linear, and the GPU's.
bool relu_only(const std::string&, Epilogue e) {
  return e == Epilogue::relu;
}
bool relu_and_gelu_tanh(const std::string& op, Epilogue e) {
  return op == "linear" && (e == Epilogue::relu || e == Epilogue::gelu_tanh);
}

const Node* node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

// Every reference in the graph points at something that is there and agrees.
void check_consistent(const Graph& g) {
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    INFO("node " << node.name);
    REQUIRE(node.output >= 0);
    REQUIRE(node.output < static_cast<ValueId>(g.values.size()));
    CHECK(g.values[node.output].producer == static_cast<int>(n));
    for (ValueId in : node.inputs) {
      REQUIRE(in >= 0);
      REQUIRE(in < static_cast<ValueId>(g.values.size()));
      CHECK(g.values[in].producer < static_cast<int>(n));  // topological, or fed (-1)
    }
    for (int p : node.params) CHECK(g.params[p].node == static_cast<int>(n));
  }
  for (const Value& v : g.values)
    if (v.producer < 0) CHECK((v.kind == ValueKind::input || v.kind == ValueKind::labels));
  CHECK(g.values[g.logits].producer >= 0);
  CHECK(g.nodes[g.values[g.loss].producer].op->is_loss);
}

// Trains `a` and `b` (one model, folded two ways) for two steps from the same
// start and requires the same loss, parameters (running statistics included)
// and gradients, bit for bit, parameter by parameter name.
void check_trains_identically(const Graph& a, const Graph& b) {
  auto ra = compile_test_program(a, 3, 5, 5);
  auto rb = compile_test_program(b, 3, 5, 5);
  for (std::uint64_t step = 1; step <= 2; ++step) {
    ra->train_step(step);
    rb->train_step(step);
  }
  CHECK(rb->loss().f32()[0] == ra->loss().f32()[0]);
  REQUIRE(ra->params().size() == rb->params().size());
  for (std::size_t p = 0; p < ra->params().size(); ++p) {
    const auto& pa = ra->params()[p];
    const auto& pb = rb->params()[p];
    INFO(pa.param->name);
    REQUIRE(pa.param->name == pb.param->name);
    for (std::int64_t i = 0; i < pa.value.numel(); ++i)
      REQUIRE(pa.value.f32()[i] == pb.value.f32()[i]);
    if (!pa.grad) continue;
    for (std::int64_t i = 0; i < pa.grad.numel(); ++i)
      REQUIRE(pa.grad.f32()[i] == pb.grad.f32()[i]);
  }
}

const char* kMlp = R"(
layers:
  - {type: flatten}
  - {type: linear, name: fc1, out_features: 8}
  - {type: relu, name: r1}
  - {type: dropout, name: d1, p: 0.3}
  - {type: linear, name: fc2, out_features: 8}
  - {type: gelu, name: g2, approximate: tanh}
  - {type: linear, name: fc3, out_features: 8}
  - {type: gelu, name: g3}
  - {type: linear, name: out, out_features: 5}
)";

}  // namespace

TEST_CASE("a linear followed by an activation the backend fuses becomes one node") {
  const Graph before = graph_of_yaml(kMlp, input_of());
  Graph cpu = before;
  CHECK(fuse_activations(cpu, relu_only) == 1);
  check_consistent(cpu);
  CHECK(cpu.nodes.size() == before.nodes.size() - 1);
  CHECK(cpu.values.size() == before.values.size() - 1);
  CHECK_FALSE(node_named(cpu, "r1"));
  REQUIRE(node_named(cpu, "fc1"));
  CHECK(op_label(*node_named(cpu, "fc1")) == "linear+relu");
  // fc1 now writes what r1 wrote, under r1's value name, read by d1 as before.
  CHECK(cpu.values[node_named(cpu, "fc1")->output].name ==
        before.values[node_named(before, "r1")->output].name);
  CHECK(node_named(cpu, "d1")->inputs[0] == node_named(cpu, "fc1")->output);
  CHECK(node_named(cpu, "g2"));  // gelus stay where the backend does not fuse them
  CHECK(cpu.params.size() == before.params.size());
  CHECK(cpu.params[node_named(cpu, "fc1")->params[0]].name == "fc1.weight");

  Graph gpu = before;
  CHECK(fuse_activations(gpu, relu_and_gelu_tanh) == 2);
  check_consistent(gpu);
  CHECK(op_label(*node_named(gpu, "fc2")) == "linear+gelu_tanh");
  CHECK_FALSE(node_named(gpu, "g2"));
  CHECK(op_label(*node_named(gpu, "fc3")) == "linear");  // the erf gelu is not cuBLASLt's
  CHECK(node_named(gpu, "g3"));
  CHECK(fuse_activations(gpu, relu_and_gelu_tanh) == 0);  // nothing left to fold
}

TEST_CASE("a linear is not fused when its output has another reader or recomputes differently") {
  const char* shared = R"(
layers:
  - {type: flatten}
  - {type: linear, name: fc1, out_features: 8}
  - {type: relu, name: r1}
  - {type: add, name: sum, inputs: [r1, fc1]}
  - {type: linear, name: out, out_features: 5}
)";
  Graph g = graph_of_yaml(shared, input_of());
  CHECK(fuse_activations(g, relu_only) == 0);
  CHECK(node_named(g, "r1"));

  const std::string recomputed = std::string(kMlp) + "recompute: [r1]\n";
  Graph r = graph_of_yaml(recomputed, input_of());
  CHECK(fuse_activations(r, relu_only) == 0);
  CHECK(node_named(r, "r1"));

  const std::string both = std::string(kMlp) + "recompute: [fc1, r1]\n";
  Graph b = graph_of_yaml(both, input_of());
  CHECK(fuse_activations(b, relu_only) == 1);
  CHECK(node_named(b, "fc1")->recompute);
}

TEST_CASE("fused and unfused programs compute bit-identical losses and gradients on the CPU") {
  // relu as a post-op of the inner product; the gelus, written in the YAML, keep
  // their pre-activation and run after the GEMM. Each is the same oneDNN
  // arithmetic as the separate layer, so the results are equal bit for bit.
  // The dropout draws the same mask although the layers before it are fewer:
  // its random stream is keyed by its name, not its place in the graph.
  const char* written = R"(
layers:
  - {type: flatten}
  - {type: linear, name: fc1, out_features: 8, activation: relu}
  - {type: dropout, name: d1, p: 0.3}
  - {type: linear, name: fc2, out_features: 8, activation: gelu_tanh}
  - {type: linear, name: fc3, out_features: 8, activation: gelu}
  - {type: linear, name: out, out_features: 5}
)";
  const Graph separate = graph_of_yaml(kMlp, input_of());
  Graph folded = graph_of_yaml(kMlp, input_of());
  REQUIRE(fuse_activations(folded, relu_only) == 1);
  check_trains_identically(separate, folded);
  check_trains_identically(separate, graph_of_yaml(written, input_of()));
}

TEST_CASE("batchnorm + relu folds on the CPU and trains bit-identically") {
  const char* cnn = R"(
layers:
  - {type: conv2d, name: c1, out_channels: 16, kernel: 3, padding: 1}
  - {type: batchnorm, name: bn1}
  - {type: relu, name: r1}
  - {type: maxpool2d, kernel: 2}
  - {type: flatten}
  - {type: linear, name: fc, out_features: 5}
)";
  const ModelInput in = input_of({2, 6, 6});
  const Graph separate = graph_of_yaml(cnn, in);
  Graph folded = separate;
  Graph gpu = separate;
  REQUIRE(fuse_activations(folded, relu_only) == 1);
  check_consistent(folded);
  CHECK(op_label(*node_named(folded, "bn1")) == "batchnorm+relu");
  CHECK(fuse_activations(gpu, relu_and_gelu_tanh) == 0);  // cuDNN's batchnorm: not fused

  check_trains_identically(separate, folded);
  // The kernel says it applies the relu (the kernel column of `trainer time`).
  const auto program = compile_test_program(folded, 3, 5, 5);
  const auto kernel_of = [&](const char* name) {
    const Graph& g = program->graph();
    return program->implementation_of(static_cast<int>(node_named(g, name) - g.nodes.data()));
  };
  CHECK_THAT(kernel_of("bn1"), Catch::Contains("+relu"));
  CHECK_THAT(kernel_of("fc"), !Catch::Contains("+relu"));
}

TEST_CASE("a residual add + relu folds on the CPU and trains bit-identically") {
  const char* block = R"(
layers:
  - {type: conv2d, name: c0, out_channels: 16, kernel: 3, padding: 1}
  - {type: batchnorm, name: bn0}
  - {type: relu, name: r0}
  - {type: conv2d, name: c1, out_channels: 16, kernel: 3, padding: 1}
  - {type: batchnorm, name: bn1}
  - {type: add, name: sum, inputs: [bn1, r0]}
  - {type: relu, name: r1}
  - {type: global_avgpool}
  - {type: linear, name: fc, out_features: 5}
)";
  const ModelInput in = input_of({2, 6, 6});
  const Graph separate = graph_of_yaml(block, in);
  Graph folded = separate;
  Graph gpu = separate;
  // r0's input bn0 has one reader (r0); r0 itself is read twice, which does not matter.
  REQUIRE(fuse_activations(folded, relu_only) == 2);
  check_consistent(folded);
  CHECK(op_label(*node_named(folded, "bn0")) == "batchnorm+relu");
  CHECK(op_label(*node_named(folded, "sum")) == "add+relu");
  CHECK(op_label(*node_named(folded, "bn1")) == "batchnorm");  // read by the add, not a relu
  const auto gpu_rule = [](const std::string& op, Epilogue e) {
    return op == "add" && e == Epilogue::relu;
  };
  CHECK(fuse_activations(gpu, gpu_rule) == 1);

  check_trains_identically(separate, folded);
}
