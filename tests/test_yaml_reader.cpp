// labels: cpu
// parse_yaml: positions, duplicate keys, aliases (and the limit on what they
// copy), merge keys (`<<: *base`), scalars of any length and the core tags.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>

#include "runner/config/load.h"
#include "runner/config/scalar.h"
#include "runner/config/yaml_reader.h"

using namespace trainer::config;

namespace {

Node parse_clean(const std::string& text) {
  Diagnostics d;
  Node n = parse_yaml(text, "t.yaml", d);
  INFO((d.empty() ? std::string() : format(d.list().front())));
  REQUIRE(d.empty());
  return n;
}

std::string messages(const Diagnostics& d) {
  std::string all;
  for (const auto& one : d.list()) all += format(one) + "\n";
  return all;
}

}  // namespace

TEST_CASE("every value and key keeps its line and column") {
  const Node n = parse_clean("a: 1\nb:\n  c: [x, y]\n");
  REQUIRE(n.find("b") != nullptr);
  const Node& c = *n.find("b")->find("c");
  CHECK(c.mark().line == 3);
  CHECK(c.items()[1].mark().column == 10);
  CHECK(n.key_mark_at(1).line == 2);
}

TEST_CASE("a key given twice is reported at the second, naming the first") {
  Diagnostics d;
  const Node n = parse_yaml("lr: 1\nlr: 2\n", "t.yaml", d);
  REQUIRE(d.size() == 1);
  CHECK(d.list()[0].mark.line == 2);
  CHECK_THAT(d.list()[0].message,
             Catch::Contains("duplicate key 'lr'") && Catch::Contains("first given at t.yaml:1:1"));
  CHECK(n.find("lr")->text() == "1");
}

TEST_CASE("an alias copies the anchored value and points at its own use") {
  const Node n = parse_clean("a: &v {x: 1}\nb: *v\n");
  REQUIRE(n.find("b")->is_map());
  CHECK(n.find("b")->find("x")->text() == "1");
  CHECK(n.find("b")->mark().line == 2);
}

TEST_CASE("a merge key copies the keys the map does not set itself") {
  const Node n = parse_clean(
      "base: &base {type: idx, images: a.gz, labels: b.gz}\n"
      "eval:\n"
      "  <<: *base\n"
      "  images: c.gz\n");
  const Node& eval = *n.find("eval");
  CHECK(eval.find("<<") == nullptr);
  CHECK(eval.size() == 3);
  CHECK(eval.find("type")->text() == "idx");
  CHECK(eval.find("labels")->text() == "b.gz");
  CHECK(eval.find("images")->text() == "c.gz");
  // A merged value points at where it was written; the map's own at its line.
  CHECK(eval.find("labels")->mark().line == 1);
  CHECK(eval.find("images")->mark().line == 4);
}

TEST_CASE("keys before the merge key win too, and in a list of maps the first wins") {
  const Node n = parse_clean(
      "a: &a {x: 1, y: 1}\n"
      "b: &b {y: 2, z: 2}\n"
      "c: {x: 0, <<: [*a, *b]}\n");
  const Node& c = *n.find("c");
  CHECK(c.find("x")->text() == "0");
  CHECK(c.find("y")->text() == "1");
  CHECK(c.find("z")->text() == "2");
}

TEST_CASE("a quoted '<<' is an ordinary key") {
  const Node n = parse_clean("a: {'<<': 1}\n");
  REQUIRE(n.find("a")->find("<<") != nullptr);
}

TEST_CASE("a merge key that is not a map, or given twice, is reported where it is") {
  Diagnostics scalar;
  parse_yaml("a:\n  <<: 3\n", "t.yaml", scalar);
  REQUIRE(scalar.size() == 1);
  CHECK(scalar.list()[0].mark.line == 2);
  CHECK_THAT(messages(scalar),
             Catch::Contains("takes a map or a list of maps") && Catch::Contains("found '3'"));

  Diagnostics list_of_scalars;
  parse_yaml("a: {<<: [1, 2]}\n", "t.yaml", list_of_scalars);
  CHECK_THAT(messages(list_of_scalars), Catch::Contains("takes a map or a list of maps"));

  Diagnostics twice;
  parse_yaml("m: &m {x: 1}\na:\n  <<: *m\n  <<: *m\n", "t.yaml", twice);
  REQUIRE(twice.size() == 1);
  CHECK(twice.list()[0].mark.line == 4);
  CHECK_THAT(messages(twice),
             Catch::Contains("duplicate merge key") && Catch::Contains("<<: [*a, *b]"));
}

TEST_CASE("a map's own key given twice after a merge is still a duplicate") {
  Diagnostics d;
  parse_yaml("m: &m {x: 1}\na:\n  <<: *m\n  x: 2\n  x: 3\n", "t.yaml", d);
  REQUIRE(d.size() == 1);
  CHECK(d.list()[0].mark.line == 5);
}

TEST_CASE("a config shares settings between data sources with a merge key") {
  // The anchor is set where the value is used first, so no extra key is needed.
  const Config c = load_config_text(
      "data:\n"
      "  train: &source {type: synthetic, shape: [4], classes: 3, size: 64}\n"
      "  eval: {<<: *source, size: 16}\n"
      "model:\n"
      "  layers: [{type: linear, out_features: 3}]\n"
      "  loss: {type: cross_entropy}\n",
      "merge.yaml");
  REQUIRE(c.data.train);
  REQUIRE(c.data.eval);
  CHECK(c.data.eval->type == "synthetic");
  CHECK(c.data.eval->attrs.get_int("size") == 16);
  CHECK(c.data.eval->attrs.get_int("classes") == 3);
  CHECK(c.data.train->attrs.get_int("size") == 64);
}

TEST_CASE("a scalar of 200000 characters is read and classified") {
  const std::string digits(200000, '1');
  CHECK(classify_plain(digits) == ScalarKind::integer);
  CHECK(classify_plain("-" + digits) == ScalarKind::integer);
  CHECK(classify_plain("1." + digits + "e-5") == ScalarKind::number);
  CHECK(classify_plain("." + digits) == ScalarKind::number);
  CHECK(classify_plain(digits + "x") == ScalarKind::string);
  CHECK(classify_plain(std::string(200000, 'x')) == ScalarKind::string);
  const Node n = parse_clean("seed: " + digits + "\nname: " + std::string(200000, 'n') + "\n");
  CHECK(n.find("seed")->text() == digits);
  CHECK(n.find("name")->text().size() == 200000);
  // Loaded as a config, the seed is an integer too large for 64 bits: an error
  // at the value, not a crash.
  try {
    load_config_text("seed: " + digits + "\n", "long.yaml");
    FAIL("a 200000-digit seed was accepted");
  } catch (const ConfigError& e) {
    const auto& list = e.diagnostics().list();
    const bool at_seed = std::any_of(list.begin(), list.end(), [](const Diagnostic& d) {
      return d.key_path == "seed" && d.mark.line == 1 && d.mark.column == 7;
    });
    CHECK(at_seed);
  }
}

TEST_CASE("the forms of integers and numbers") {
  for (const char* integer : {"0", "-1", "+12", "007"})
    CHECK(classify_plain(integer) == ScalarKind::integer);
  for (const char* number :
       {"1.", "1.5", ".5", "-.5", "1e3", "1E+3", "2.5e-3", ".5e1", ".inf", "-.Inf", "+.INF"})
    CHECK(classify_plain(number) == ScalarKind::number);
  for (const char* text : {"-", "+", ".", "1e", "1e+", "e3", ".e3", "1.2.3", "--1", "1x", ".infx",
                           "inf", "0x10", "1_000", " 1", "1 "})
    CHECK(classify_plain(text) == ScalarKind::string);
}

TEST_CASE("aliases of aliases that would expand without end are refused at the alias, at once") {
  // Each line lists the one above ten times: a8 would hold 10^9 scalars.
  std::string bomb = "a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n";
  for (int level = 1; level <= 8; ++level) {
    const std::string before = "*a" + std::to_string(level - 1);
    bomb += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [" + before;
    for (int i = 1; i < 10; ++i) bomb += "," + before;
    bomb += "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  Diagnostics d;
  parse_yaml(bomb, "t.yaml", d);
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 10.0);  // the expansion itself would take minutes and many GB
  REQUIRE(d.size() == 1);
  // Up to a4 the copies number 123440, and the anchored values a0 to a4 kept
  // for their aliases 123455 more; six copies of a4 (111111 nodes each) fit
  // within the 1000000, the seventh (line 6, item 6) does not.
  CHECK(format(d.list()[0]) ==
        "t.yaml:6:34: error: a5[6]: alias *a4 expands to more than 1000000 nodes with the "
        "aliases before it (it copies 111111); a config does not need this: check the anchors\n"
        "    an alias copies the whole value its anchor marks, so lists of aliases of lists of "
        "aliases multiply: alias only the values meant to be repeated");
  // A config holding it is refused with that error.
  try {
    load_config_text(bomb, "bomb.yaml");
    FAIL("the alias bomb was accepted");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("bomb.yaml:6:34: error: a5[6]: alias *a4 expands"));
  }
}

TEST_CASE("anchors, aliases and merge keys well within the limit are all expanded") {
  // A map merged into another, and a list of 100 numbers aliased 1000 times
  // (101000 copied nodes).
  std::string text = "base: &base {type: synthetic, size: 64}\neval: {<<: *base, size: 16}\n";
  text += "list: &list [0";
  for (int i = 1; i < 100; ++i) text += "," + std::to_string(i);
  text += "]\ncopies: [*list";
  for (int i = 1; i < 1000; ++i) text += ", *list";
  text += "]\n";
  const Node n = parse_clean(text);
  CHECK(n.find("eval")->find("type")->text() == "synthetic");
  CHECK(n.find("eval")->find("size")->text() == "16");
  const Node& copies = *n.find("copies");
  REQUIRE(copies.items().size() == 1000);
  CHECK(copies.items()[999].items().size() == 100);
  CHECK(copies.items()[999].items()[99].text() == "99");
}

TEST_CASE("the core tags say how a scalar reads; another tag is an error at it") {
  const Node n = parse_clean("a: !!float 0.1\nb: !!int 3\nc: !!str 0.1\nd: !!bool true\n");
  CHECK(as_number(*n.find("a")) == 0.1);
  CHECK(as_int(*n.find("b")) == 3);
  CHECK(n.find("c")->quoted());  // a string
  CHECK_FALSE(as_number(*n.find("c")).has_value());
  CHECK(as_bool(*n.find("d")) == true);
  Diagnostics d;
  const Node tagged = parse_yaml("lr: !custom 0.1\n", "t.yaml", d);
  // Read as if untagged, so that the field's check finds no second error.
  CHECK(as_number(*tagged.find("lr")) == 0.1);
  REQUIRE(d.size() == 1);
  CHECK(format(d.list()[0]) ==
        "t.yaml:1:5: error: unsupported tag '!custom' on '0.1': a config reads only the core tags "
        "!!str, !!int, !!float, !!bool and !!null\n"
        "    remove the tag: the field's type says how the value is read");
}

TEST_CASE("a second document is an error at the '---' that starts it") {
  for (const auto& [text, line] : std::vector<std::pair<std::string, int>>{
           {"a: 1\n---\nb: 2\n", 2},
           {"# a comment\n---\na: 1\n---\n", 4},  // the first '---' opens the one document
           {"a: 1\n--- # another\n", 2},
           {"a: 1\n---\t\nb: 2\n", 2}}) {
    INFO(text);
    Diagnostics d;
    parse_yaml(text, "t.yaml", d);
    REQUIRE(d.size() == 1);
    CHECK(format(d.list()[0]) == "t.yaml:" + std::to_string(line) +
                                     ":1: error: expected one YAML document, found a second one "
                                     "starting here\n"
                                     "    remove this '---' line and what follows it, or put that "
                                     "in a file of its own");
  }
  // A '...' line ends the first document.
  Diagnostics ended;
  parse_yaml("a: 1\n...\nb: 2\n", "t.yaml", ended);
  REQUIRE(ended.size() == 1);
  CHECK(format(ended.list()[0]) ==
        "t.yaml:2:1: error: expected one YAML document, found a second one after this end of the "
        "first\n    remove this '...' line and what follows it, or put that in a file of its own");
  // No such line: a value that goes on past its end (an override's).
  for (const char* value : {"\"1\"\"6\"", "[a]b"}) {
    INFO(value);
    Diagnostics d;
    parse_yaml(value, "t.yaml", d);
    REQUIRE(d.size() == 1);
    CHECK_THAT(format(d.list()[0]),
               Catch::StartsWith("t.yaml:1:1: error: expected one YAML value, found more after "
                                 "its end\n    a quoted string ends at its closing quote, a list "
                                 "at its ']'"));
  }
}

TEST_CASE("a list or map takes only its own core tag; another is an error at it") {
  const Node n = parse_clean("a: !!seq [1, 2]\nb: !!map {c: 1}\nd: [3]\n");
  CHECK(n.find("a")->is_sequence());
  CHECK(n.find("b")->is_map());
  Diagnostics d;
  parse_yaml("opt: !foo {type: adam}\ntrain: !!seq {batch_size: 8}\nl: !!binary [1]\n", "t.yaml",
             d);
  REQUIRE(d.size() == 3);
  CHECK(format(d.list()[0]) ==
        "t.yaml:1:6: error: unsupported tag '!foo' on a map: a config reads only the core tags "
        "(!!seq on a list, !!map on a map)\n"
        "    remove the tag: the field's type says how the value is read");
  CHECK(d.list()[1].message.find("'tag:yaml.org,2002:seq' on a map") != std::string::npos);
  CHECK(d.list()[2].message.find("'tag:yaml.org,2002:binary' on a list") != std::string::npos);
}

TEST_CASE("anchors nested in anchors count the values they keep, without aliases") {
  // 30 anchors, each around the next, around a list of 100000 items: each
  // level kept a copy of all inside it, 3 million nodes from a 600 KB file.
  std::string nested = "a: ";
  for (int i = 0; i < 30; ++i) nested += "&a" + std::to_string(i) + " [";
  nested += "1";
  for (int i = 1; i < 100000; ++i) nested += ",1";
  nested += std::string(30, ']') + "\n";
  Diagnostics d;
  parse_yaml(nested, "t.yaml", d);
  REQUIRE(d.size() == 1);
  CHECK(d.list()[0].message.find("keeps more than 1000000 nodes with the anchors and aliases "
                                 "before it") != std::string::npos);
}
