// labels: cpu
// The format pass (runner/graph/formats.h): which activations it keeps blocked
// and in bf16, that blocked float32 activations train bit for bit like plain
// ones, and that bf16 storage stays close to float32 storage and halves those
// buffers in the memory plan. And the bf16 weight copies (graph/precision.h):
// rounded to nearest even, rewritten by the optimizer, refreshed after any
// other write to the weights.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>

#include "runner/checkpoint/safetensors.h"
#include "runner/checkpoint/weights.h"
#include "runner/graph/formats.h"
#include "runner/graph/precision.h"
#include "runner/graph/program.h"
#include "tests/program_fixture.h"
#include "tests/temp_dir.h"

using namespace trainer;
using namespace trainer::graph;

namespace {

// conv -> batchnorm -> relu -> pool, a value read by two convolutions (one with
// a bias, whose gradient sums read a blocked bf16 gradient), a residual add
// (its own float32 loop: blocked, never bf16), pooling into flatten (blocked,
// then plain rows), and linear -> relu -> linear.
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

// Dropout between activations (float32, blocked), and global average pooling
// from a bf16 blocked input into a bf16 linear input.
const char* kPooledModel = R"(
layers:
  - {type: conv2d, name: c1, out_channels: 16, kernel: 3, padding: 1, bias: false}
  - {type: batchnorm, name: bn1}
  - {type: relu, name: r1}
  - {type: dropout, name: drop, p: 0.25}
  - {type: conv2d, name: c2, out_channels: 16, kernel: 3, padding: 1, bias: false}
  - {type: relu, name: r2}
  - {type: global_avgpool, name: gap}
  - {type: linear, name: f, out_features: 5}
)";

constexpr std::int64_t kBatch = 8;

Graph model_graph(const char* yaml = kModel) {
  ModelInput in;
  in.batch = kBatch;
  in.sample_shape = {3, 8, 8};
  in.num_classes = 5;
  return graph_of_yaml(yaml, in);
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
  const char* model = kModel;
};

std::unique_ptr<Program> compile(const Case& c) {
  Graph g = model_graph(c.model);
  assign_compute_types(g, c.precision);
  if (c.formats) assign_formats(g, cpu_backend().activation_formats(), c.precision);
  return compile_test_program(std::move(g), 11, 5, 5);
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
  CHECK(output_of(g, "bna").format() == blocked_f32);  // read by add, a float32 loop
  CHECK(output_of(g, "cb").format() == blocked_f32);
  CHECK(output_of(g, "sum").format() == blocked_f32);
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

  SECTION("dropout and global average pooling") {
    Graph f = model_graph(kPooledModel);
    assign_formats(f, support, "bf16");
    CHECK(output_of(f, "bn1").format() == blocked_f32);  // tied to dropout's float32 loop
    CHECK(output_of(f, "drop").format() == blocked_f32);
    CHECK(output_of(f, "r2").format() == blocked_bf16);
    CHECK(output_of(f, "gap").format() == TensorFormat{DType::bf16, 0});
  }
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

  SECTION("with dropout and global average pooling") {
    auto pooled16 = compile({"bf16", true, kPooledModel});
    auto pooled32 = compile({"fp32", true, kPooledModel});
    pooled16->train_step(1);
    pooled32->train_step(1);
    // The same bound as bf16 compute alone (5%): which elements the dropout
    // keeps decides how the roundings add up (3.1% with the mask drawn here).
    const double pooled_diff = gradient_difference(*pooled16, *pooled32);
    INFO("largest gradient difference, relative to the largest gradient: " << pooled_diff);
    CHECK(pooled_diff < 0.05);
    CHECK(pooled_diff > 0.0);
  }
}

TEST_CASE("float32 -> bf16 rounds to nearest even, keeps inf and NaN") {
  const std::size_t n = 100003;  // split over threads, with a vector tail
  std::vector<float> src(n, 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<float, std::uint16_t>> cases = {
      {1.0f, 0x3f80},
      {1.00390625f, 0x3f80},    // 1 + 2^-8: halfway, to the even neighbour 1.0
      {1.01171875f, 0x3f82},    // 1 + 3 * 2^-8: halfway, to the even neighbour above
      {1.0048828125f, 0x3f81},  // just above halfway: up
      {-2.5f, 0xc020},
      {std::numeric_limits<float>::max(), 0x7f80},  // rounds up to inf
      {inf, 0x7f80},
      {-inf, 0xff80},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    src[i] = cases[i].first;
    src[n - 1 - i] = cases[i].first;
  }
  src[cases.size()] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::uint16_t> dst(n);
  cpu_backend().vector_ops().round_to_bf16(
      {src.data(), {static_cast<std::int64_t>(n)}},
      {dst.data(), {static_cast<std::int64_t>(n)}, DType::bf16});
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("value " << cases[i].first);
    CHECK(dst[i] == cases[i].second);
    CHECK(dst[n - 1 - i] == cases[i].second);
  }
  const std::uint16_t nan = dst[cases.size()];
  CHECK((nan & 0x7f80) == 0x7f80);
  CHECK((nan & 0x007f) != 0);
  CHECK(dst[n / 2] == 0x3f80);
}

namespace {

float bf16_value(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// Every bf16 weight copy against its float32 values: within half a bf16 step.
void check_copies_current(Program& program) {
  int copies = 0;
  for (const ParamStorage& p : std::as_const(program).params()) {
    if (!p.bf16_copy) continue;
    ++copies;
    const auto* copy = static_cast<const std::uint16_t*>(p.bf16_copy.data);
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < p.value.numel(); ++i) {
      const float v = p.value.f32()[i];
      if (std::abs(bf16_value(copy[i]) - v) > std::ldexp(std::abs(v), -8)) ++wrong;
    }
    INFO(p.param->name);
    CHECK(wrong == 0);
  }
  CHECK(copies == 5);  // the weights of c1, ca, cb, f1 and f2
}

}  // namespace

TEST_CASE("the optimizer rewrites the bf16 weight copies with each update") {
  if (!cpu_backend().activation_formats().bf16_storage) {
    WARN("no bf16 kernels on this CPU: nothing to compare");
    return;
  }
  auto program = compile({"bf16", true});
  program->train_step(1);
  check_copies_current(*program);
  const std::vector<float> before(program->params()[0].value.f32(),
                                  program->params()[0].value.f32() + 16);
  std::vector<ParamSlot> slots = program->optimizer_slots();
  OptimizerStep step;
  step.lr = 0.5f;
  step.momentum = 0.9f;
  for (int s = 0; s < 3; ++s) {
    program->train_step(static_cast<std::uint64_t>(s));
    cpu_backend().vector_ops().optimizer_step(slots, step);
  }
  CHECK(program->params()[0].value.f32()[0] != before[0]);  // the weights moved
  check_copies_current(*program);
}

TEST_CASE("bf16 weight copies follow weights written outside the optimizer") {
  if (!cpu_backend().activation_formats().bf16_storage) {
    WARN("no bf16 kernels on this CPU: nothing to compare");
    return;
  }
  // A program that has run, then has its weights overwritten (as a checkpoint
  // restore or a broadcast from rank 0 does), against a fresh program given
  // the same weights: the same loss, so the copies were refreshed.
  auto used = compile({"bf16", true});
  used->train_step(1);
  for (auto& p : used->params())
    for (std::int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] *= 0.5f;
  used->train_step(1);

  auto fresh = compile({"bf16", true});
  for (std::size_t p = 0; p < fresh->params().size(); ++p)
    std::copy_n(std::as_const(*used).params()[p].value.f32(), used->params()[p].value.numel(),
                fresh->params()[p].value.f32());
  fresh->train_step(1);
  CHECK(used->loss().f32()[0] == fresh->loss().f32()[0]);
  check_copies_current(*used);

  // Loaded from a weights file into a program whose copies were just
  // refreshed by a step: the same.
  used->train_step(1);
  checkpoint::Safetensors file;
  for (const ParamStorage& p : fresh->params()) {  // written: its copies refreshed
    for (std::int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] *= 0.5f;
    file.tensors.push_back({p.param->name, "F32", p.value.shape,
                            std::string(static_cast<const char*>(p.value.data), p.value.bytes())});
  }
  std::sort(file.tensors.begin(), file.tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  testing::TempDir tmp("bf16-load");
  const std::string path = tmp / "weights.safetensors";
  std::ofstream(path, std::ios::binary) << checkpoint::encode_safetensors(file);
  checkpoint::load_parameters(*used, checkpoint::SafetensorsFile(path), path, true);
  fresh->train_step(1);
  used->train_step(1);
  CHECK(used->loss().f32()[0] == fresh->loss().f32()[0]);
  check_copies_current(*used);
}
