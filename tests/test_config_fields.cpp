// labels: cpu
// read_fields / parse_field: the generic FieldSpec validation used by config
// sections, model layers and data items.
#include <catch2/catch.hpp>

#include "runner/config/fields.h"
#include "runner/config/yaml_reader.h"

using namespace trainer;
using namespace trainer::config;

namespace {

Node yaml(const std::string& text) {
  Diagnostics d;
  Node n = parse_yaml(text, "t.yaml", d);
  REQUIRE(d.empty());
  return n;
}

const std::vector<FieldSpec> kSpecs = {
    field("out_features", FieldType::integer, "outputs").req().at_least(1),
    field("stride", FieldType::int_list, "stride").def("[1, 1]").at_least(1).length(2),
    field("rate", FieldType::number, "rate").def("0.5").at_least(0).at_most(1),
    field("bias", FieldType::boolean, "bias").def("true"),
    field("mode", FieldType::enumeration, "mode").def("mean").one_of({"mean", "sum", "none"}),
    field("label", FieldType::string, "label"),
    field("weights", FieldType::number_list, "weights").def("[]"),
    field("names", FieldType::string_list, "names").def("[a]"),
};

}  // namespace

TEST_CASE("valid values are parsed and defaults filled") {
  Diagnostics d;
  const Attrs a = read_fields(yaml("{out_features: 8, stride: 2, weights: [1, 2.5], label: x}"),
                              kSpecs, "layer", d);
  REQUIRE(d.empty());
  CHECK(a.get_int("out_features") == 8);
  CHECK(a.get_ints("stride", 2) == std::vector<std::int64_t>{2, 2});  // scalar broadcast
  CHECK(a.get_number("rate") == Approx(0.5));
  CHECK(a.get_bool("bias"));
  CHECK(a.get_string("mode") == "mean");
  CHECK(a.get_string("label") == "x");
  CHECK(std::get<std::vector<double>>(a.values().at("weights")) == std::vector<double>{1, 2.5});
  CHECK(std::get<std::vector<std::string>>(a.values().at("names")) ==
        std::vector<std::string>{"a"});
}

TEST_CASE("every problem in a map is reported, each at its own position") {
  Diagnostics d;
  const Attrs a = read_fields(yaml("stride: [1, 2, 3]\nrate: 1.5\nbias: yes\nmode: summ\n"
                                   "label: 3\nstrid: 1\nextra_ok: 1\n"),
                              kSpecs, "model.layers[2]", d, {"extra_ok"});
  REQUIRE(d.size() == 7);
  const auto& l = d.list();
  CHECK(format(l[0]) ==
        "t.yaml:1:9: error: model.layers[2].stride: expected a list of 2 "
        "integers, found 3 item(s)");
  CHECK(format(l[1]) ==
        "t.yaml:2:7: error: model.layers[2].rate: expected a number >= 0 and "
        "<= 1, found number 1.5");
  CHECK(format(l[2]) ==
        "t.yaml:3:7: error: model.layers[2].bias: expected a boolean (true or "
        "false), found 'yes'");
  CHECK(format(l[3]) ==
        "t.yaml:4:7: error: model.layers[2].mode: expected one of mean, sum, "
        "none, found 'summ'\n    did you mean 'sum'?");
  CHECK(format(l[4]) ==
        "t.yaml:5:8: error: model.layers[2].label: expected a string, found "
        "integer 3\n    quote it to make it a string: \"3\"");
  CHECK(format(l[5]) ==
        "t.yaml:6:1: error: model.layers[2].strid: unknown key 'strid'\n"
        "    did you mean 'stride'?");
  CHECK(format(l[6]) ==
        "t.yaml:1:1: error: model.layers[2].out_features: missing required key "
        "'out_features' (integer: outputs)");
  // Invalid values are not replaced by defaults.
  CHECK_FALSE(a.has("rate"));
  CHECK_FALSE(a.has("mode"));
  CHECK(a.has("bias") == false);
}

TEST_CASE("list elements are checked one by one with their index") {
  Diagnostics d;
  read_fields(yaml("{out_features: 1, stride: [1, 0]}"), kSpecs, "l", d);
  REQUIRE(d.size() == 1);
  CHECK(format(d.list()[0]) ==
        "t.yaml:1:31: error: l.stride[1]: expected an integer >= 1, "
        "found integer 0");
}

TEST_CASE("a quoted number is a string, and a plain word is not a number") {
  Diagnostics d;
  FieldValue v;
  CHECK_FALSE(parse_field(yaml("'3'"), kSpecs[0], "k", d, v));
  CHECK(parse_field(yaml("'3'"), kSpecs[5], "k", d, v));
  CHECK(std::get<std::string>(v) == "3");
  CHECK(parse_field(yaml("-2.5e-3"), field("x", FieldType::number, ""), "k", d, v));
  CHECK(std::get<double>(v) == Approx(-2.5e-3));
  CHECK_FALSE(parse_field(yaml("1.5"), kSpecs[0], "k", d, v));                   // not an integer
  CHECK_FALSE(parse_field(yaml("99999999999999999999"), kSpecs[0], "k", d, v));  // overflow
}

TEST_CASE("a non-map where settings are expected is reported; defaults still filled") {
  Diagnostics d;
  const Attrs a = read_fields(yaml("[1, 2]"), {kSpecs[2]}, "optimizer", d);
  REQUIRE(d.size() == 1);
  CHECK(format(d.list()[0]) ==
        "t.yaml:1:1: error: optimizer: expected a map of settings, found "
        "a list");
  CHECK(a.get_number("rate") == Approx(0.5));
}

TEST_CASE("fill_defaults adds missing fields to a tree") {
  Node n = yaml("{rate: 0.25}");
  fill_defaults(n, kSpecs);
  CHECK(n.find("rate")->text() == "0.25");
  CHECK(n.find("mode")->text() == "mean");
  CHECK(n.find("stride")->items().size() == 2);
  CHECK(n.find("out_features") == nullptr);  // required: no default
  CHECK(n.find("label") == nullptr);         // optional without default
}

TEST_CASE("a string field that takes integers reads them as their text, and nothing else") {
  const FieldSpec column = field("label", FieldType::string, "column").or_integers();
  const FieldSpec columns = field("features", FieldType::string_list, "columns").or_integers();
  Diagnostics d;
  FieldValue v;
  REQUIRE(parse_field(yaml("2"), column, "k", d, v));
  CHECK(std::get<std::string>(v) == "2");
  REQUIRE(parse_field(yaml("name"), column, "k", d, v));
  CHECK(std::get<std::string>(v) == "name");
  REQUIRE(parse_field(yaml("[0, b, 12, 007, +3]"), columns, "k", d, v));
  CHECK(std::get<std::vector<std::string>>(v) ==
        std::vector<std::string>{"0", "b", "12", "7", "3"});  // as YAML reads the integers
  CHECK(d.empty());
  CHECK_FALSE(parse_field(yaml("1.5"), column, "k", d, v));
  CHECK_FALSE(parse_field(yaml("true"), column, "k", d, v));
  CHECK_FALSE(parse_field(yaml("[0, 1.5]"), columns, "k", d, v));
  REQUIRE(d.size() == 3);
  CHECK(d.list()[0].message == "expected a string or an integer, found number 1.5");
  // Without the flag an integer is no string.
  CHECK_FALSE(parse_field(yaml("2"), kSpecs[5], "k", d, v));
  CHECK(field_type_name(column) == "string or integer");
  CHECK(field_type_name(columns) == "list of strings or integers");
  CHECK(field_type_name(kSpecs[5]) == "string");
}
