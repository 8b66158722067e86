// labels: cpu
// The model builder: sequential and DAG layers, blocks with parameters and
// repeat, parameter names, and errors that point at the YAML.
#include <catch2/catch.hpp>

#include <map>

#include "runner/config/yaml_reader.h"
#include "runner/graph/builder.h"

using namespace trainer;
using namespace trainer::graph;

namespace {

struct Built {
  Graph graph;
  config::Diagnostics diags;
};

Built build(const std::string& yaml, Shape sample = {1, 8, 8}, std::int64_t classes = 10) {
  Built b;
  const config::Node model = config::parse_yaml(yaml, "model.yaml", b.diags);
  REQUIRE(b.diags.empty());
  ModelInput in;
  in.batch = 4;
  in.sample_shape = sample;
  in.num_classes = classes;
  b.graph = build_graph(model, in, b.diags);
  return b;
}

const Param* find_param(const Graph& g, const std::string& name) {
  for (const auto& p : g.params)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace

TEST_CASE("a sequential model infers every shape and names its parameters") {
  auto b = build(R"(
layers:
  - {type: flatten}
  - {type: linear, name: hidden, out_features: 32}
  - {type: relu}
  - {type: linear, out_features: 10}
)");
  REQUIRE(b.diags.empty());
  const Graph& g = b.graph;
  REQUIRE(g.nodes.size() == 5);  // four layers and the default cross-entropy loss
  CHECK(g.values[g.nodes[1].output].shape == Shape{4, 32});
  CHECK(g.values[g.logits].shape == Shape{4, 10});
  CHECK(g.nodes.back().op->name == "cross_entropy");
  REQUIRE(find_param(g, "hidden.weight"));
  CHECK(find_param(g, "hidden.weight")->shape == Shape{32, 64});
  CHECK(find_param(g, "linear2.bias"));  // generated names count per type
  CHECK(g.parameter_count() == 32 * 64 + 32 + 10 * 32 + 10);
}

TEST_CASE("blocks expand with parameters, repeat and per-first overrides") {
  auto b = build(R"(
blocks:
  res:
    params: {channels: 4, stride: 1}
    layers:
      - {name: conv1, type: conv2d, out_channels: $channels, kernel: 3, stride: $stride, padding: 1}
      - {name: relu, type: relu}
      - {name: conv2, type: conv2d, out_channels: $channels, kernel: 3, padding: 1}
      - {name: skip, type: conv2d, out_channels: $channels, kernel: 1, stride: $stride, inputs: [input]}
      - {name: sum, type: add, inputs: [conv2, skip]}
layers:
  - {block: res, name: stage2, repeat: 2, channels: 6, first: {stride: 2}}
  - {type: global_avgpool}
  - {type: linear, out_features: 10}
)");
  REQUIRE(b.diags.empty());
  const Graph& g = b.graph;
  REQUIRE(find_param(g, "stage2.block1.conv1.weight"));
  CHECK(find_param(g, "stage2.block1.conv1.weight")->shape == Shape{6, 1, 3, 3});
  CHECK(find_param(g, "stage2.block2.conv1.weight")->shape == Shape{6, 6, 3, 3});
  // The first repetition strides by 2 (8x8 -> 4x4), the second keeps 4x4.
  for (const auto& n : g.nodes) {
    if (n.name == "stage2.block1.sum") CHECK(g.values[n.output].shape == Shape{4, 6, 4, 4});
    if (n.name == "stage2.block2.sum") CHECK(g.values[n.output].shape == Shape{4, 6, 4, 4});
  }
  // The skip connection of block 2 reads block 1's output (the block input).
  for (const auto& n : g.nodes)
    if (n.name == "stage2.block2.skip") CHECK(g.values[n.inputs[0]].name == "stage2.block1.sum");
}

TEST_CASE("a block instance's first: must be a map of the block's parameters") {
  auto b = build(R"(
blocks:
  res:
    params: {stride: 1}
    layers: [{type: conv2d, out_channels: 4, kernel: 3, stride: $stride, padding: 1}]
layers:
  - {block: res, name: stage, repeat: 2, first: 2}
  - {type: flatten}
  - {type: linear, out_features: 10}
)");
  REQUIRE(b.diags.size() == 1);
  const auto& d = b.diags.list()[0];
  CHECK(d.key_path == "model.layers[0].first");
  CHECK(d.message ==
        "expected a map of the block's parameters for its first repetition, found integer 2");
  CHECK(d.mark.line == 7);
}

TEST_CASE("an unknown layer type names its position and suggests the nearest op") {
  auto b = build("layers:\n  - {type: flatten}\n  - {type: lienar, out_features: 10}\n");
  REQUIRE(b.diags.size() == 1);
  const auto& d = b.diags.list()[0];
  CHECK(d.mark.file == "model.yaml");
  CHECK(d.mark.line == 3);
  CHECK(d.mark.column == 12);
  CHECK(d.key_path == "model.layers[1].type");
  CHECK(d.suggestion == "did you mean 'linear'?");
}

TEST_CASE("a shape error names the layer, its position and the shapes") {
  auto b = build(
      "layers:\n  - {type: conv2d, name: conv3, out_channels: 4, kernel: 3}\n"
      "  - {type: linear, out_features: 10}\n");
  REQUIRE(b.diags.size() == 1);
  const auto& d = b.diags.list()[0];
  CHECK(d.mark.line == 3);
  CHECK_THAT(d.message, Catch::Contains("layer 'linear1'") && Catch::Contains("flatten"));
  CHECK_THAT(d.suggestion, Catch::Contains("[4, 4, 6, 6]"));
}

TEST_CASE("a window of the wrong length is an error at the list, before any shape") {
  auto b = build("layers:\n  - {type: conv2d, out_channels: 4, kernel: []}\n");
  REQUIRE(b.diags.size() == 1);
  const auto& d = b.diags.list()[0];
  CHECK(d.key_path == "model.layers[0].kernel");
  CHECK(d.mark.line == 2);
  CHECK(d.mark.column == 45);
  CHECK(d.message == "expected a list of 1 or 2 integers, found 0 item(s)");
}

TEST_CASE("after a layer's error the later layers' types and fields are still checked") {
  auto b = build(
      "layers:\n"
      "  - {type: linear, out_features: 10}\n"    // a linear on [4, 1, 8, 8]: shape error
      "  - {type: relu, inplace: true}\n"         // unknown key
      "  - {type: lienar, out_features: 4}\n"     // unknown type
      "  - {type: linear, out_features: -3}\n"    // out of range
      "  - {type: linear, out_features: 10}\n");  // fine
  REQUIRE(b.diags.size() == 4);
  const auto& d = b.diags.list();
  CHECK(d[0].mark.line == 2);
  CHECK(d[1].key_path == "model.layers[1].inplace");
  CHECK(d[2].key_path == "model.layers[2].type");
  CHECK_THAT(d[2].suggestion, Catch::Contains("did you mean 'linear'?"));
  CHECK(d[3].key_path == "model.layers[3].out_features");
}

TEST_CASE("a layer whose tensors would overflow element counts is refused at its line") {
  // 2^57 x 64 weights: the element count does not fit in 64 bits.
  auto huge = build(
      "layers:\n  - {type: flatten}\n"
      "  - {type: linear, name: wide, out_features: 144115188075855872}\n"
      "  - {type: linear, out_features: 10}\n");
  REQUIRE(huge.diags.size() == 1);
  CHECK(huge.diags.list()[0].mark.line == 3);
  CHECK_THAT(huge.diags.list()[0].message,
             Catch::Contains("layer 'wide'") && Catch::Contains("is too large"));
  // 2^35 outputs fit in 64 bits but not under the limit of 2^40 elements per tensor.
  auto large =
      build("layers:\n  - {type: flatten}\n  - {type: linear, out_features: 34359738368}\n");
  CHECK(large.diags.size() == 1);
  // Large but possible: no error.
  auto fine = build(
      "layers:\n  - {type: flatten}\n  - {type: linear, out_features: 1000000}\n"
      "  - {type: linear, out_features: 10}\n");
  CHECK(fine.diags.empty());
}

TEST_CASE("a layer giving more dimensions than a tensor may have is refused at its line") {
  // The input is [4, 1, 8, 8]: the batch and 5 more is the most.
  auto deep = build(
      "layers:\n  - {type: reshape, name: deep, shape: [1, 1, 1, 1, 1, 64]}\n"
      "  - {type: flatten}\n  - {type: linear, out_features: 10}\n");
  REQUIRE(deep.diags.size() == 1);
  CHECK(deep.diags.list()[0].mark.line == 2);
  CHECK_THAT(deep.diags.list()[0].message,
             Catch::Contains("layer 'deep' (reshape)") &&
                 Catch::Contains("has 7 dimensions, more than the 6 a tensor may have"));
  CHECK_THAT(deep.diags.list()[0].suggestion, Catch::Contains("5 sample dimensions or fewer"));
  auto most = build(
      "layers:\n  - {type: reshape, shape: [1, 1, 1, 1, 64]}\n  - {type: relu}\n"
      "  - {type: flatten}\n  - {type: linear, out_features: 10}\n");
  CHECK(most.diags.empty());
}

TEST_CASE("bad attribute values and unknown inputs are reported with suggestions") {
  auto b = build(R"(
layers:
  - {type: flatten, name: flat}
  - {type: linear, out_feature: 10}
)");
  REQUIRE(b.diags.size() >= 1);
  CHECK(b.diags.list()[0].key_path.find("out_feature") != std::string::npos);
  CHECK(b.diags.list()[0].suggestion == "did you mean 'out_features'?");

  auto c = build(R"(
layers:
  - {type: flatten, name: flat}
  - {type: linear, out_features: 10, inputs: [flta]}
)");
  REQUIRE(c.diags.size() == 1);
  CHECK(c.diags.list()[0].suggestion == "did you mean 'flat'?");
}

TEST_CASE("two layers never share a name: an automatic one taken by an earlier layer") {
  // linear1 named linear2, then a linear whose automatic name is linear2.
  auto b = build(R"(
layers:
  - {type: flatten}
  - {type: linear, name: linear2, out_features: 16}
  - {type: linear, out_features: 10}
)");
  REQUIRE(b.diags.size() == 1);
  const auto& d = b.diags.list()[0];
  CHECK(d.mark.line == 5);
  CHECK(d.key_path == "model.layers[2]");
  CHECK(d.message ==
        "this layer's automatic name 'linear2' is taken: an earlier layer is named so");
  CHECK(d.suggestion == "give this layer a `name:`, or rename the earlier one");
  // Named the other way round it was already refused.
  auto c = build(R"(
layers:
  - {type: flatten}
  - {type: linear, out_features: 16}
  - {type: linear, name: linear1, out_features: 10}
)");
  REQUIRE(c.diags.size() == 1);
  CHECK(c.diags.list()[0].message == "duplicate layer name 'linear1'");
}

TEST_CASE("'loss' names the loss, as 'input' the batch: no layer takes either name") {
  for (const char* name : {"input", "loss"}) {
    auto b = build(std::string(R"(
layers:
  - {type: flatten}
  - {type: linear, name: )") +
                   name + R"(, out_features: 10}
)");
    REQUIRE(b.diags.size() == 1);
    CHECK(b.diags.list()[0].key_path == "model.layers[1].name");
    CHECK(b.diags.list()[0].mark.line == 4);
  }
  // Inside a block, `loss` names no more than the block's own layer.
  CHECK(build(R"(
blocks:
  head: {layers: [{type: linear, name: loss, out_features: 10}]}
layers:
  - {type: flatten}
  - {block: head, name: out}
)")
            .diags.empty());
}

TEST_CASE("an unnamed instance of a block whose name holds a dot is refused; a named one is not") {
  // Its automatic name "s.b1" would make its parameter names ambiguous.
  const std::string blocks = "blocks:\n  s.b: {layers: [{type: linear, out_features: 10}]}\n";
  auto unnamed = build(blocks + "layers:\n  - {type: flatten}\n  - {block: s.b}\n");
  REQUIRE(unnamed.diags.size() == 1);
  CHECK(unnamed.diags.list()[0].key_path == "model.layers[1]");
  CHECK(unnamed.diags.list()[0].message.starts_with(
      "this instance of block 's.b' needs a `name:`: its automatic name 's.b1' would hold a dot"));
  auto named = build(blocks + "layers:\n  - {type: flatten}\n  - {block: s.b, name: head}\n");
  CHECK(named.diags.empty());
  CHECK(find_param(named.graph, "head.linear1.weight"));
}

TEST_CASE("a model whose loss depends on no parameter that trains is refused") {
  const auto only_message = [](const Built& b) {
    REQUIRE(b.diags.size() == 1);
    CHECK(b.diags.list()[0].key_path == "model.layers");
    return b.diags.list()[0].message;
  };
  // No parameters at all.
  CHECK(only_message(build("layers:\n  - {type: flatten}\n  - {type: tanh}\n", {10})) ==
        "the model has no trainable parameters: nothing would train");
  // The only weights lie on a branch the loss does not read.
  CHECK(only_message(build(R"(
layers:
  - {type: linear, name: dead, out_features: 4}
  - {type: tanh, inputs: [input]}
)",
                           {10}, 10)) ==
        "no parameter that trains reaches the loss, so nothing would train: no later layer reads "
        "dead, so the loss does not depend on it");
  // The weights the loss reads are frozen; the ones that would train are unused.
  CHECK(only_message(build(R"(
layers:
  - {type: flatten, name: flat}
  - {type: linear, name: dead, out_features: 4}
  - {type: linear, name: out, out_features: 10, inputs: [flat]}
freeze: [out]
)")) == "no parameter that trains reaches the loss, so nothing would train: model.freeze holds "
        "out; no later layer reads dead, so the loss does not depend on it");
  // One live layer that trains is enough.
  CHECK(build(R"(
layers:
  - {type: flatten, name: flat}
  - {type: linear, name: dead, out_features: 4}
  - {type: linear, name: out, out_features: 10, inputs: [flat]}
)")
            .diags.empty());
}

TEST_CASE("what is not a name, a later layer's name and an undeclared parameter say so") {
  // The one diagnostic of `yaml`: "key_path: message".
  const auto only = [](const std::string& yaml) {
    auto b = build(yaml);
    REQUIRE(b.diags.size() == 1);
    return b.diags.list()[0].key_path + ": " + b.diags.list()[0].message;
  };
  const std::string blocks = R"(
blocks:
  b: {layers: [{type: linear, out_features: $width}]}
)";
  CHECK(only("layers:\n  - {type: flatten}\n  - {block: [b]}\n" + blocks) ==
        "model.layers[1].block: expected the name of a block, found a list");
  CHECK(only("layers:\n  - {type: flatten}\n  - {type: linear, out_features: 10, inputs: "
             "[[input]]}\n") == "model.layers[1].inputs: expected a layer name, found a list");
  CHECK(only("layers:\n  - {type: flatten}\n  - {type: linear, out_features: 10}\nfreeze: "
             "[{linear1: 1}]\n") ==
        "model.freeze: expected the name of a layer or block, found a map");
  CHECK(only("layers:\n  - {type: flatten, inputs: [late]}\n  - {type: linear, name: late, "
             "out_features: 10}\n") ==
        "model.layers[0].inputs: 'late' comes after this layer: a layer reads earlier layers "
        "only");
  CHECK(only("layers:\n  - {type: flatten}\n  - {block: b, width: 10}\n" + blocks) ==
        "model.layers[1].width: unknown key 'width': the block's layers use $width, but the "
        "block does not declare it as a parameter");
  CHECK(only("layers:\n  - {type: flatten}\n  - {block: b, first: {width: 10}}\n" + blocks)
            .starts_with("model.layers[1].first.width: unknown key 'width': block 'b' has no "
                         "parameters for `first:` to set"));
  // A model ending in a convolution: at the last layer, not at a loss nobody wrote.
  auto conv = build("layers:\n  - {type: conv2d, out_channels: 3, kernel: 1}\n");
  REQUIRE(conv.diags.size() == 1);
  CHECK(conv.diags.list()[0].mark.line == 2);
  CHECK(conv.diags.list()[0].key_path == "model.layers");
  CHECK(conv.diags.list()[0].message ==
        "the last layer gives [4, 3, 8, 8], but cross_entropy takes logits [N, classes]");
}

TEST_CASE("the last layer must match the number of classes") {
  auto b = build("layers:\n  - {type: flatten}\n  - {type: linear, out_features: 7}\n");
  REQUIRE(b.diags.size() == 1);
  CHECK_THAT(b.diags.list()[0].message,
             Catch::Contains("7 outputs") && Catch::Contains("10 classes"));
}

TEST_CASE("an unknown block and an unknown block parameter are reported") {
  auto b = build(R"(
blocks:
  res: {params: {channels: 4}, layers: [{type: relu}]}
layers:
  - {block: rse}
)");
  REQUIRE(b.diags.size() == 1);
  CHECK(b.diags.list()[0].suggestion == "did you mean 'res'?");
  auto c = build(R"(
blocks:
  res: {params: {channels: 4}, layers: [{type: relu}]}
layers:
  - {block: res, chanels: 3}
)");
  REQUIRE(c.diags.size() == 1);
  CHECK(c.diags.list()[0].suggestion == "did you mean 'channels'?");
}

// Two stages of conv + batchnorm blocks and a head, for freeze and lr_scale.
const std::string kStagedModel = R"(
blocks:
  res: {params: {c: 4}, layers: [{name: conv, type: conv2d, out_channels: $c, kernel: 3, padding: 1}, {name: bn, type: batchnorm}, {type: relu}]}
layers:
  - {block: res, name: stage1, repeat: 2}
  - {block: res, name: stage2}
  - {type: flatten, name: flat}
  - {type: linear, name: head, out_features: 10}
)";

TEST_CASE("freeze stops named layers and block instances from training") {
  const std::string& model = kStagedModel;
  auto b = build(model + "freeze: [stage1, stage2.bn]\n");
  REQUIRE(b.diags.empty());
  for (const auto& p : b.graph.params) {
    INFO(p.name);
    // Batchnorm's running statistics are never trained, so never frozen.
    const bool statistics = p.name.find("running") != std::string::npos;
    const bool frozen =
        !statistics && (p.name.rfind("stage1.", 0) == 0 || p.name.rfind("stage2.bn.", 0) == 0);
    CHECK(p.trainable == (!frozen && !statistics));
    CHECK(p.frozen == frozen);
  }
  CHECK(find_param(b.graph, "stage2.conv.weight")->trainable);
  CHECK(find_param(b.graph, "head.weight")->trainable);
  // stage1: conv 1->4 (36 + 4), conv 4->4 (144 + 4), two batchnorms (8 each); stage2.bn: 8.
  CHECK(b.graph.frozen_parameter_count() == 40 + 148 + 8 + 8 + 8);

  // Names that are not there, layers without weights, everything frozen.
  auto errors = build(model + "freeze: [stag1, flat, stage1, stage2, head]\n");
  REQUIRE(errors.diags.size() == 3);
  CHECK(errors.diags.list()[0].message == "no layer or block named 'stag1'");
  CHECK(errors.diags.list()[0].suggestion == "did you mean 'stage1'?");
  CHECK(errors.diags.list()[0].mark.line == 9);
  CHECK(errors.diags.list()[1].message.find("'flat' has no trainable parameters") == 0);
  CHECK(errors.diags.list()[2].message == "every parameter is frozen: nothing would train");
  auto not_a_list = build(model + "freeze: stage1\n");
  REQUIRE(not_a_list.diags.size() == 1);
  CHECK(not_a_list.diags.list()[0].key_path == "model.freeze");
}

TEST_CASE("lr_scale sets the learning-rate factor of named layers; the longer name decides") {
  const std::string& model = kStagedModel;
  // The specific entry first: the block's factor must not override it.
  auto b = build(model + "lr_scale: {stage1.block2.conv: 0.5, stage1: 0.1, head: 3}\n");
  REQUIRE(b.diags.empty());
  CHECK(find_param(b.graph, "stage1.block1.conv.weight")->lr_scale == 0.1);
  CHECK(find_param(b.graph, "stage1.block1.bn.bias")->lr_scale == 0.1);
  CHECK(find_param(b.graph, "stage1.block2.conv.weight")->lr_scale == 0.5);
  CHECK(find_param(b.graph, "stage1.block2.bn.weight")->lr_scale == 0.1);
  CHECK(find_param(b.graph, "head.bias")->lr_scale == 3);

  auto errors =
      build(model + "freeze: [head]\nlr_scale: {stag1: 0.1, flat: 2, head: 2, stage1: 0}\n");
  REQUIRE(errors.diags.size() == 4);
  CHECK(errors.diags.list()[0].message == "no layer or block named 'stag1'");
  CHECK(errors.diags.list()[0].suggestion == "did you mean 'stage1'?");
  CHECK(errors.diags.list()[0].key_path == "model.lr_scale.stag1");
  CHECK(errors.diags.list()[1].message.find("'flat' has no trainable parameters") == 0);
  CHECK(errors.diags.list()[2].message.find("'head' has no trainable parameters") == 0);
  CHECK(errors.diags.list()[3].message == "expected a number > 0, found integer 0");
  CHECK(errors.diags.list()[3].suggestion == "to keep a layer as it is, list it in model.freeze");
  CHECK(build(model + "lr_scale: [stage1]\n").diags.size() == 1);
  // A dotted name written as a path (an override model.lr_scale.stage1.block2=0.3)
  // makes a map: the one key it meant is offered; a word, a number.
  auto nested = build(model + "lr_scale: {stage1: {block2: 0.3}, head: abc}\n");
  REQUIRE(nested.diags.size() == 2);
  CHECK(nested.diags.list()[0].suggestion ==
        "a name with a dot in it is one key: lr_scale: {stage1.block2: 0.3} (on the command "
        "line, model.lr_scale='{stage1.block2: 0.3}')");
  CHECK(nested.diags.list()[1].suggestion == "e.g. head: 0.1 (its learning rate x 0.1)");
  CHECK(build(model + "lr_scale: {stage1.block2: 0.3}\n").diags.empty());
  // Factors float32 turns into 0 or infinity: the layer would never train, or diverge.
  auto beyond = build(model + "lr_scale: {stage1: 1e-300, head: 1e300}\n");
  REQUIRE(beyond.diags.size() == 2);
  CHECK(beyond.diags.list()[0].message ==
        "expected a factor from 1e-30 to 1e+30, found number 1e-300");
  CHECK(beyond.diags.list()[1].key_path == "model.lr_scale.head");
  CHECK(build(model + "lr_scale: {stage1: 1e-30, head: 1e30}\n").diags.empty());
}

TEST_CASE("layer attributes computed in float32 are refused beyond its range") {
  for (const char* layer : {"{type: leaky_relu, slope: 1e39}", "{type: batchnorm, eps: 1e300}",
                            "{type: layernorm, eps: 1e300}", "{type: batchnorm, eps: 1e-300}"}) {
    INFO(layer);
    auto b = build(std::string("layers:\n  - ") + layer +
                   "\n  - {type: flatten}\n  - {type: linear, out_features: 10}\n");
    REQUIRE(b.diags.size() == 1);
    CHECK(b.diags.list()[0].mark.line == 2);
  }
  CHECK(build("layers:\n  - {type: leaky_relu, slope: 1e30}\n  - {type: flatten}\n"
              "  - {type: linear, out_features: 10}\n")
            .diags.empty());
}

TEST_CASE("recompute marks named layers and blocks, or every N-th") {
  auto b = build(R"(
blocks:
  res: {params: {c: 4}, layers: [{name: conv, type: conv2d, out_channels: $c, kernel: 3, padding: 1}, {type: relu}]}
layers:
  - {block: res, name: stage1, repeat: 2}
  - {type: flatten, name: flat}
  - {type: linear, out_features: 10}
recompute: [stage1]
)");
  REQUIRE(b.diags.empty());
  // A block instance is a checkpointed segment: its inner layers are
  // recomputed, its output (the next segment's stored input) is not.
  std::map<std::string, std::string> last_of_instance;
  for (const auto& n : b.graph.nodes)
    if (n.name.rfind("stage1.", 0) == 0)
      last_of_instance[n.name.substr(0, n.name.rfind('.'))] = n.name;
  REQUIRE(last_of_instance.size() == 2);
  for (const auto& n : b.graph.nodes) {
    INFO(n.name);
    const bool in_stage1 = n.name.rfind("stage1.", 0) == 0;
    const bool instance_output =
        in_stage1 && last_of_instance.at(n.name.substr(0, n.name.rfind('.'))) == n.name;
    CHECK(n.recompute == (in_stage1 && !instance_output));
  }

  // every: 1 would keep every output and recompute nothing: refused.
  const auto one = build(
      "layers:\n  - {type: flatten}\n  - {type: linear, out_features: 10}\n"
      "recompute: {every: 1}\n");
  REQUIRE(one.diags.size() == 1);
  CHECK(one.diags.list()[0].key_path == "model.recompute.every");
  CHECK(one.diags.list()[0].message.find(">= 2") != std::string::npos);

  auto every = build(
      "layers:\n  - {type: flatten}\n  - {type: linear, out_features: 16}\n"
      "  - {type: relu}\n  - {type: linear, out_features: 10}\nrecompute: {every: 2}\n");
  REQUIRE(every.diags.empty());
  CHECK(every.graph.nodes[0].recompute);
  CHECK_FALSE(every.graph.nodes[1].recompute);
  CHECK(every.graph.nodes[2].recompute);
  CHECK_FALSE(every.graph.nodes[3].recompute);
  CHECK_FALSE(every.graph.nodes[4].recompute);  // the loss

  auto typo = build(
      "layers:\n  - {type: flatten, name: flat}\n  - {type: linear, out_features: 10}\n"
      "recompute: [falt]\n");
  REQUIRE(typo.diags.size() == 1);
  CHECK(typo.diags.list()[0].mark.line == 4);
  CHECK(typo.diags.list()[0].suggestion == "did you mean 'flat'?");
}

TEST_CASE("nested blocks whose repeats multiply past the layer limit are one error") {
  auto b = build(R"(
blocks:
  outer: {layers: [{block: inner, repeat: 400}]}
  inner: {layers: [{type: relu}]}
layers:
  - {type: flatten}
  - {block: outer, repeat: 400}
  - {type: linear, out_features: 10}
)");
  REQUIRE(b.diags.size() == 1);  // reported once, not for every layer past the limit
  const auto& d = b.diags.list()[0];
  CHECK(d.key_path == "model.blocks.inner.layers[0]");
  CHECK(d.message.find("the model expands to more than 100000 layers") != std::string::npos);
  CHECK(d.suggestion == "lower the `repeat:` of the block instances");

  // A plain list that long has no repeats to lower.
  std::string flat = "layers:\n  - {type: flatten}\n";
  for (int i = 0; i < 100000; ++i) flat += "  - {type: relu}\n";
  auto plain = build(flat);
  REQUIRE(plain.diags.size() == 1);
  CHECK(plain.diags.list()[0].message.find("nested blocks") == std::string::npos);
  CHECK(plain.diags.list()[0].suggestion ==
        "a model of more layers than this is beyond what trainer compiles");
  // Repeats that made most of them, the limit met past the block: the repeats.
  std::string repeated = "blocks:\n  b: {layers: [";
  for (int i = 0; i < 100; ++i) repeated += std::string(i ? ", " : "") + "{type: relu}";
  repeated += "]}\nlayers:\n  - {type: flatten}\n  - {block: b, repeat: 999}\n";
  for (int i = 0; i < 200; ++i) repeated += "  - {type: relu}\n";
  auto blocks = build(repeated);
  REQUIRE(blocks.diags.size() == 1);
  CHECK(blocks.diags.list()[0].suggestion == "lower the `repeat:` of the block instances");
}

TEST_CASE("past a layer that fails, later layers' references are checked too") {
  auto b = build(R"(
blocks:
  res: {layers: [{type: relu, name: r}, {type: add, inputs: [r, inptu]}]}
layers:
  - {type: flatten}
  - {type: linear, out_features: 16, inputs: [flaten]}
  - {type: relu}
  - {block: res, name: stage}
  - {type: linear, out_features: 10, inputs: [relu9]}
  - {type: linear, out_features: 10, inputs: [relu2]}
  - {block: nope}
  - {type: linear, out_features: 10, inputs: [relu9]}
)");
  std::vector<std::string> keys;
  for (const auto& d : b.diags.list()) keys.push_back(d.key_path + ": " + d.message);
  // A name an unnamed layer may take (relu2: the relu before it and one more)
  // is not reported: its layer's name depends on what failed. Past a block
  // that is none, no name can be known.
  CHECK(keys == std::vector<std::string>{
                    "model.layers[1].inputs: no earlier layer named 'flaten' in this scope",
                    "model.layers[4].inputs: no earlier layer named 'relu9' in this scope",
                    "model.layers[6].block: no block named 'nope' in model.blocks",
                });
  // A layer type misspelt: the names after it are not known either (linear1
  // would be the misspelt layer's).
  auto typo = build(R"(
layers:
  - {type: flatten}
  - {type: lineer, out_features: 16}
  - {type: relu, inputs: linear1}
)");
  REQUIRE(typo.diags.size() == 1);
  CHECK(typo.diags.list()[0].key_path == "model.layers[1].type");
  // A name given by a block parameter is read with the parameter's value.
  auto param = build(R"(
blocks:
  mlp:
    params: {n: hidden}
    layers:
      - {type: linear, out_features: 8, inputs: [nothing]}
      - {type: relu, name: $n}
      - {type: linear, out_features: 8, inputs: [hidden]}
layers:
  - {type: flatten}
  - {block: mlp, name: m}
  - {type: linear, out_features: 10}
)");
  REQUIRE(param.diags.size() == 1);
  CHECK(param.diags.list()[0].message == "no earlier layer named 'nothing' in this scope");
}
