// labels: cpu
// The format pass (runner/graph/formats.h): which activations it keeps blocked
// and in bf16, that blocked float32 activations train bit for bit like plain
// ones, and that bf16 storage stays close to float32 storage and halves those
// buffers in the memory plan.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "runner/config/yaml_reader.h"
#include "runner/graph/builder.h"
#include "runner/graph/formats.h"
#include "runner/graph/init.h"
#include "runner/graph/precision.h"
#include "runner/graph/program.h"

using namespace trainer;
using namespace trainer::graph;

namespace {

// conv -> batchnorm -> relu -> pool, a value read by two convolutions (one with
// a bias, whose gradient sums read a blocked bf16 gradient), a residual add
// (plain: its own loop), pooling from it into flatten (blocked, then plain
// rows), and linear -> relu -> linear.
const char* kModel = R"(
layers:
  - {type: conv2d, name: c1, out_channels: 16, kernel: 3, padding: 1, bias: false}
  - {type: batchnorm, name: bn1}
  - {type: relu, name: r1}
  - {type: maxpool2d, name: p1, kernel: 2}
  - {type: conv2d, name: ca, out_channels: 16, kernel: 3, padding: 1, inputs: [p1]}
  - {type: batchnorm, name: bna}
  - {type: conv2d, name: cb, out_channels: 16, kernel: 1, bias: false, inputs: [p1]}
  - {type: add, name: sum, inputs: [bna, cb]}
  - {type: maxpool2d, name: p2, kernel: 2}
  - {type: flatten, name: flat}
  - {type: linear, name: f1, out_features: 32}
  - {type: relu, name: r3}
  - {type: linear, name: f2, out_features: 5}
)";

constexpr std::int64_t kBatch = 8;

Graph model_graph() {
  config::Diagnostics diags;
  const config::Node model = config::parse_yaml(kModel, "model.yaml", diags);
  ModelInput in;
  in.batch = kBatch;
  in.sample_shape = {3, 8, 8};
  in.num_classes = 5;
  Graph g = build_graph(model, in, diags);
  REQUIRE(diags.empty());
  return g;
}

const Value& output_of(const Graph& g, const std::string& node) {
  for (const Node& n : g.nodes)
    if (n.name == node) return g.values[n.output];
  FAIL("no node " << node);
  throw std::logic_error("unreachable");
}

struct Case {
  std::string precision;  // fp32 or bf16
  bool formats;           // run the format pass
};

std::unique_ptr<Program> compile(const Case& c) {
  Graph g = model_graph();
  assign_compute_types(g, c.precision);
  if (c.formats) assign_formats(g, cpu_backend().activation_formats(), c.precision);
  CompileOptions options;
  options.optimizer_state_tensors = 0;
  auto program = std::make_unique<Program>(differentiate(std::move(g)), cpu_backend(), options);
  std::vector<float> values;
  for (auto& p : program->params()) {
    initialize_param(*p.param, 11, values);
    std::copy(values.begin(), values.end(), p.value.f32());
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  float* x = program->input().f32();
  for (std::int64_t i = 0; i < program->input().numel(); ++i) x[i] = normal(rng);
  for (std::int64_t i = 0; i < kBatch; ++i) program->labels().i64()[i] = i % 5;
  program->loss_seed().f32()[0] = 1.0f;
  return program;
}

// The largest difference of all parameter gradients, relative to the largest gradient.
double gradient_difference(const Program& a, const Program& b) {
  double max_abs = 0, max_diff = 0;
  for (std::size_t p = 0; p < a.params().size(); ++p) {
    const TensorRef& ga = a.params()[p].grad;
    const TensorRef& gb = b.params()[p].grad;
    if (!ga) continue;
    for (std::int64_t i = 0; i < ga.numel(); ++i) {
      max_abs = std::max(max_abs, static_cast<double>(std::abs(ga.f32()[i])));
      max_diff = std::max(max_diff, static_cast<double>(std::abs(ga.f32()[i] - gb.f32()[i])));
    }
  }
  return max_diff / max_abs;
}

}  // namespace

TEST_CASE("the format pass keeps conv/batchnorm/activation/pool runs in the backend's format") {
  const Backend::ActivationFormats support{16, true};
  Graph g = model_graph();
  assign_formats(g, support, "bf16");
  const TensorFormat plain{}, blocked_bf16{DType::bf16, 16}, blocked_f32{DType::f32, 16};
  CHECK(g.values[g.input].format() == plain);  // fed by the loader
  CHECK(output_of(g, "c1").format() == blocked_bf16);
  CHECK(output_of(g, "bn1").format() == blocked_bf16);  // relu in place over it
  CHECK(output_of(g, "r1").format() == blocked_bf16);
  CHECK(output_of(g, "p1").format() == blocked_f32);  // two readers: gradients summed in f32
  CHECK(output_of(g, "ca").format() == blocked_bf16);
  CHECK(output_of(g, "bna").format() == plain);  // read by add, an own loop
  CHECK(output_of(g, "cb").format() == plain);
  CHECK(output_of(g, "sum").format() == plain);
  CHECK(output_of(g, "p2").format() == blocked_bf16);  // converted by the pool, then flatten
  CHECK(output_of(g, "flat").format() == TensorFormat{DType::bf16, 0});
  CHECK(output_of(g, "f1").format() == TensorFormat{DType::bf16, 0});
  CHECK(output_of(g, "r3").format() == TensorFormat{DType::bf16, 0});
  CHECK(g.values[g.logits].format() == plain);  // read by the loss
  CHECK(format_name(output_of(g, "c1")) == "bf16 nChw16c");

  // Gradients take their value's format.
  const TrainingGraph tg = differentiate(g);
  int gradients = 0;
  for (const Value& v : tg.graph.values) {
    if (v.kind != ValueKind::gradient || v.name.rfind("c1.grad", 0) != 0) continue;
    CHECK(v.format() == blocked_bf16);
    ++gradients;
  }
  CHECK(gradients == 1);

  SECTION("float32: blocked, never bf16") {
    Graph f = model_graph();
    assign_formats(f, support, "fp32");
    CHECK(output_of(f, "c1").format() == blocked_f32);
    CHECK(output_of(f, "r1").format() == blocked_f32);
    CHECK(output_of(f, "f1").format() == plain);
  }
  SECTION("a backend without formats (CUDA) leaves every value plain") {
    Graph f = model_graph();
    const Graph before = f;
    assign_formats(f, Backend::ActivationFormats{}, "bf16");
    for (std::size_t v = 0; v < f.values.size(); ++v)
      CHECK(f.values[v].format() == before.values[v].format());
  }
  SECTION("channels that do not divide into blocks stay plain") {
    Graph f = model_graph();
    assign_formats(f, Backend::ActivationFormats{32, false}, "fp32");
    CHECK(output_of(f, "c1").format() == plain);
  }
}

TEST_CASE("blocked float32 activations give the same gradients as plain ones, bit for bit") {
  if (cpu_backend().activation_formats().channel_block == 0) {
    WARN("no blocked layout on this CPU: nothing to compare");
    return;
  }
  auto blocked = compile({"fp32", true});
  auto plain = compile({"fp32", false});
  blocked->train_step(1);
  plain->train_step(1);
  CHECK(blocked->loss().f32()[0] == plain->loss().f32()[0]);
  CHECK(gradient_difference(*blocked, *plain) == 0.0);
}

TEST_CASE("bf16 activation storage stays close to float32 and halves its buffers") {
  if (!cpu_backend().activation_formats().bf16_storage) {
    WARN("no bf16 kernels on this CPU: nothing to compare");
    return;
  }
  auto stored_bf16 = compile({"bf16", true});
  auto reference = compile({"fp32", true});
  stored_bf16->train_step(1);
  reference->train_step(1);
  const float loss16 = stored_bf16->loss().f32()[0], loss32 = reference->loss().f32()[0];
  CHECK(std::abs(loss16 - loss32) <= 0.02 * std::abs(loss32));
  // bf16 keeps 8 bits of mantissa: ~0.4% per rounding, a few percent through
  // a batchnorm backward over 8 samples (bf16 compute alone, with float32
  // storage, differs from float32 by 5% on this model).
  const double diff = gradient_difference(*stored_bf16, *reference);
  INFO("largest gradient difference, relative to the largest gradient: " << diff);
  CHECK(diff < 0.03);
  CHECK(diff > 0.0);  // the bf16 path did run

  auto stored_f32 = compile({"bf16", false});
  CHECK(stored_bf16->memory_plan().arena_bytes < stored_f32->memory_plan().arena_bytes);
}
