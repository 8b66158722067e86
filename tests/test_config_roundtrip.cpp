// labels: cpu
// print-config output loads back to the same resolved tree and Config.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "runner/config/emit.h"
#include "runner/config/load.h"
#include "runner/config/scalar.h"
#include "runner/config/yaml_reader.h"

using namespace trainer::config;

namespace {

const std::string kGood = std::string(TRAINER_TEST_DATA_DIR) + "/configs/good/";

// Same structure and scalar text; quoting only matters where it changes the type.
void require_same(const Node& a, const Node& b, const std::string& path) {
  INFO("at " << path);
  REQUIRE(a.kind() == b.kind());
  if (a.is_scalar()) {
    CHECK(a.text() == b.text());
    return;
  }
  if (a.is_sequence()) {
    REQUIRE(a.items().size() == b.items().size());
    for (std::size_t i = 0; i < a.items().size(); ++i)
      require_same(a.items()[i], b.items()[i], path + "[" + std::to_string(i) + "]");
    return;
  }
  if (a.is_map()) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      REQUIRE(a.key_at(i) == b.key_at(i));
      require_same(a.value_at(i), b.value_at(i), path + "." + a.key_at(i));
    }
  }
}

}  // namespace

TEST_CASE("print-config output loads back to the same configuration") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "trainer_test_config_roundtrip";
  fs::create_directories(dir);
  // A string that needs quoting (name is a folder name, so output.dir carries it).
  const std::vector<std::string> overrides = {"output.dir='round: trip \"q\"'", "optimizer.lr=3e-4",
                                              "devices=[0,1]"};
  for (const char* file : {"mlp.yaml", "child.yaml", "minimal.yaml"}) {
    INFO(file);
    const Config first = load_config(kGood + file, overrides);
    const fs::path printed = dir / file;
    std::ofstream(printed) << to_yaml(first.resolved);
    const Config second = load_config(printed.string());
    require_same(first.resolved, second.resolved, "");
    CHECK(second.output.dir == "round: trip \"q\"");
    CHECK(second.optimizer.lr == first.optimizer.lr);
    CHECK(second.devices.gpus == first.devices.gpus);
    CHECK(second.train.micro_batch_auto == first.train.micro_batch_auto);
    CHECK(second.precision.mode == first.precision.mode);
    CHECK(second.data.eval_transforms.size() == first.data.eval_transforms.size());
  }
  fs::remove_all(dir);
}

TEST_CASE("strings that look like other types stay strings") {
  const Config c = load_config_text(
      "name: 'true'\nmodel: {layers: [{type: flatten}]}\n"
      "data: {train: {type: synthetic, shape: [2]}}\ncheckpoint: {metric: '1.5'}\n",
      "<test>");
  const std::string text = to_yaml(c.resolved);
  const Config again = load_config_text(text, "<printed>");
  CHECK(again.name == "true");
  CHECK(again.checkpoint.metric == "1.5");
}

TEST_CASE("block parameter references stay references when printed") {
  // A run directory's config.yaml is printed; `--resume` reads it back, so a
  // `$channels` must not come back as the quoted string "$channels".
  const Config c =
      load_config(std::string(TRAINER_TEST_DATA_DIR) + "/../../configs/fashion_mnist_resnet.yaml");
  const Config again = load_config_text(to_yaml(c.resolved), "<printed>");
  const Node* blocks = again.resolved.find("model")->find("blocks");
  REQUIRE(blocks);
  const Node* channels =
      blocks->find("residual")->find("layers")->items().at(0).find("out_channels");
  REQUIRE(channels);
  CHECK(channels->text() == "$channels");
  CHECK_FALSE(channels->quoted());
}

TEST_CASE("a ${p} reference is printed as $p, and a quoted \"$p\" string stays quoted") {
  const std::string text = R"(
data:
  train: {type: synthetic, shape: [1, 4, 4], classes: 4, size: 64}
model:
  blocks:
    mlp:
      params: {width: 8}
      layers:
        - type: linear
          out_features: ${width}
        - {type: relu, name: "$hidden"}
  layers:
    - {type: flatten}
    - {block: mlp}
    - {type: linear, out_features: 4}
train: {max_steps: 1, batch_size: 8}
devices: cpu
)";
  const Config c = load_config_text(text, "<written>");
  const std::string printed = to_yaml(c.resolved);
  INFO(printed);
  const Config again = load_config_text(printed, "<printed>");
  const Node& layers = *again.resolved.find("model")->find("blocks")->find("mlp")->find("layers");
  const Node* width = layers.items().at(0).find("out_features");
  REQUIRE(width);
  CHECK(width->text() == "$width");
  CHECK_FALSE(width->quoted());
  const Node* name = layers.items().at(1).find("name");
  REQUIRE(name);
  CHECK(name->text() == "$hidden");
  CHECK(name->quoted());
}

TEST_CASE("a scalar of 200000 characters is printed and loads back") {
  const std::string plain(200000, 'x');
  const std::string spaced = "a" + std::string(199998, ' ') + "b";
  Node tree = Node::map({"<test>", 1, 1});
  tree.set("plain", Node::scalar(plain, {}, true));
  tree.set("spaced", Node::scalar(spaced, {}, true));
  tree.set("digits", Node::scalar(std::string(200000, '7'), {}, true));
  const std::string text = to_yaml(tree);
  Diagnostics diags;
  const Node again = parse_yaml(text, "<printed>", diags);
  REQUIRE(diags.empty());
  CHECK(again.find("plain")->text() == plain);
  CHECK(again.find("spaced")->text() == spaced);
  CHECK(again.find("digits")->text() == std::string(200000, '7'));
  CHECK(classify(*again.find("digits")) == ScalarKind::string);
}

TEST_CASE("every string is printed so that it loads back as the same string") {
  const std::vector<std::string> tricky = {
      "-",    "- x",  "? x",  ": x",     "#x",   "x #y",   "@x",    "`x",  "!x",
      "&x",   "*x",   "|",    ">",       "%x",   "'x",     "\"x",   "[x",  "{x",
      "x: y", "",     " x",   "x ",      "null", "~",      "true",  "1",   "1e3",
      ".inf", "0x10", "a\rb", "a\tb",    "a\nb", "a\x01z", "a\x7f", "---", "...",
      "-x",   "--",   "x,y",  "a\\b\"c", ".nan", "0o17",   "<<",    "x]",  "x}"};
  for (const std::string& s : tricky) {
    INFO("the string '" << s << "'");
    Node tree = Node::map({"<test>", 1, 1});
    tree.set("value", Node::scalar(s, {}, true));
    Node list = Node::sequence({});
    list.push_back(Node::scalar(s, {}, true));
    list.push_back(Node::scalar("after", {}, true));
    tree.set("list", std::move(list));
    Node keyed = Node::map({});
    keyed.set(s, Node::scalar("v", {}, true));
    tree.set("keys", std::move(keyed));
    const std::string text = to_yaml(tree);
    INFO(text);
    Diagnostics diags;
    const Node again = parse_yaml(text, "<printed>", diags);
    REQUIRE(diags.empty());
    REQUIRE(again.find("value"));
    CHECK(again.find("value")->text() == s);
    CHECK(classify(*again.find("value")) == ScalarKind::string);
    REQUIRE(again.find("list")->items().size() == 2);
    CHECK(again.find("list")->items()[0].text() == s);
    CHECK(classify(again.find("list")->items()[0]) == ScalarKind::string);
    REQUIRE(again.find("keys")->size() == 1);
    CHECK(again.find("keys")->key_at(0) == s);
  }
}

TEST_CASE("a config named '-' is printed quoted and loads back") {
  const Config c = load_config_text(
      "name: '-'\nmodel: {layers: [{type: flatten}]}\n"
      "data: {train: {type: synthetic, shape: [2]}}\noutput: {dir: '- runs #1'}\n",
      "<test>");
  const Config again = load_config_text(to_yaml(c.resolved), "<printed>");
  CHECK(again.name == "-");
  CHECK(again.output.dir == "- runs #1");
}

TEST_CASE("a printed config reads the same in YAML 1.1 tools: their booleans quoted, no octal") {
  // PyYAML reads yes/no/on/off/y/n as booleans, 1_000, 0b101, 017 and
  // 190:20:30 as numbers, 2024-01-01 as a date, and 010 as octal 8; the config
  // reads all but 010 as strings, quoted in its file or not.
  for (const std::string word : {"yes", "No", "ON", "off", "y", "N", "1_000", "0b101", "017",
                                 "190:20:30", "2024-01-01", "1.5_0"})
    for (const bool quoted : {true, false}) {
      INFO(word << (quoted ? " quoted" : " plain"));
      Node tree = Node::map({"<test>", 1, 1});
      tree.set("name", Node::scalar(word, {}, quoted));
      if (!quoted && classify(*tree.find("name")) != ScalarKind::string) continue;
      CHECK(to_yaml(tree) == "name: \"" + word + "\"\n");
    }
  for (const std::string plain : {"abc", "runs/x", "1a", "2024-01"}) {
    Node tree = Node::map({"<test>", 1, 1});
    tree.set("name", Node::scalar(plain, {}, true));
    CHECK(to_yaml(tree) == "name: " + plain + "\n");
  }
  const std::vector<std::pair<std::string, std::string>> integers = {
      {"010", "10"}, {"-007", "-7"}, {"+010", "+10"}, {"00", "0"}, {"0", "0"}, {"100", "100"}};
  for (const auto& [written, printed] : integers) {
    INFO(written);
    Node tree = Node::map({"<test>", 1, 1});
    tree.set("seed", Node::scalar(written, {}, false));
    const std::string text = to_yaml(tree);
    CHECK(text == "seed: " + printed + "\n");
    Diagnostics diags;
    const Node again = parse_yaml(text, "<printed>", diags);
    REQUIRE(diags.empty());
    CHECK(as_int(*again.find("seed")) == as_int(*tree.find("seed")));
  }
}
