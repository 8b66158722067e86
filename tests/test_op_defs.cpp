// labels: cpu
// The op registry: every op of the contract is registered with a sane
// definition, signature rules compute the documented shapes, parameters and
// FLOPs, and bad inputs raise ShapeError messages that say what was expected.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <set>

#include "ops/op.h"
#include "tests/op_check.h"

using namespace trainer;
using trainer::testing::make_attrs;

namespace {

OpSignature sig(const std::string& op, const std::vector<Shape>& in,
                const std::map<std::string, FieldValue>& attrs = {}) {
  const OpDef* def = op_registry().find(op);
  REQUIRE(def != nullptr);
  return def->signature(in, make_attrs(*def, attrs));
}

std::string shape_error(const std::string& op, const std::vector<Shape>& in,
                        const std::map<std::string, FieldValue>& attrs = {}) {
  try {
    sig(op, in, attrs);
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("every op of the contract is registered once with a consistent definition") {
  const std::set<std::string> expected = {
      "linear",     "conv2d",    "batchnorm",      "layernorm",     "relu",
      "leaky_relu", "gelu",      "silu",           "sigmoid",       "tanh",
      "maxpool2d",  "avgpool2d", "global_avgpool", "flatten",       "reshape",
      "dropout",    "add",       "concat",         "cross_entropy", "mse"};
  const auto names = op_registry().names();
  CHECK(std::set<std::string>(names.begin(), names.end()) == expected);
  for (const auto& d : op_registry().all()) {
    INFO(d.name);
    CHECK(!d.doc.empty());
    CHECK(d.signature);
    CHECK(d.min_inputs >= 1);
    CHECK((d.max_inputs == -1 || d.max_inputs >= d.min_inputs));
    for (const auto& f : d.attrs) CHECK((f.required || !f.default_yaml.empty()));
  }
  CHECK(op_registry().find("cross_entropy")->is_loss);
  CHECK(op_registry().find("dropout")->stochastic);
  CHECK(op_registry().find("cross_entropy")->non_differentiable_inputs == std::vector<int>{1});
}

TEST_CASE("conv2d signature: output size, params and FLOPs") {
  auto s = sig("conv2d", {{8, 6, 11, 13}},
               {{"out_channels", std::int64_t{4}},
                {"kernel", std::vector<std::int64_t>{3, 2}},
                {"stride", std::int64_t{2}},
                {"padding", std::vector<std::int64_t>{1, 0}},
                {"dilation", std::vector<std::int64_t>{2, 1}},
                {"groups", std::int64_t{2}}});
  // H: (11 + 2 - 2*2 - 1) / 2 + 1 = 5; W: (13 - 1 - 1) / 2 + 1 = 6.
  CHECK(s.output == Shape{8, 4, 5, 6});
  REQUIRE(s.params.size() == 2);
  CHECK(s.params[0].name == "weight");
  CHECK(s.params[0].shape == Shape{4, 3, 3, 2});
  CHECK(s.params[0].init == "kaiming_uniform");
  CHECK(s.params[1].shape == Shape{4});
  CHECK(s.forward_flops == 2.0 * 8 * 4 * 5 * 6 * 3 * 3 * 2);
  auto nb = sig("conv2d", {{1, 1, 5, 5}},
                {{"out_channels", std::int64_t{2}}, {"kernel", std::int64_t{3}}, {"bias", false}});
  CHECK(nb.output == Shape{1, 2, 3, 3});
  CHECK(nb.params.size() == 1);
}

TEST_CASE("signatures of the other ops") {
  CHECK(sig("linear", {{5, 7}}, {{"out_features", std::int64_t{3}}}).params[0].shape ==
        Shape{3, 7});
  auto bn = sig("batchnorm", {{4, 3, 5, 5}});
  REQUIRE(bn.params.size() == 4);
  CHECK(bn.params[2].name == "running_mean");
  CHECK_FALSE(bn.params[2].trainable);
  CHECK(bn.params[3].init == "ones");
  CHECK(sig("maxpool2d", {{2, 3, 7, 7}}, {{"kernel", std::int64_t{2}}}).output ==
        Shape{2, 3, 3, 3});
  CHECK(
      sig("avgpool2d", {{2, 3, 7, 7}},
          {{"kernel", std::int64_t{3}}, {"stride", std::int64_t{2}}, {"padding", std::int64_t{1}}})
          .output == Shape{2, 3, 4, 4});
  CHECK(sig("global_avgpool", {{2, 3, 7, 7}}).output == Shape{2, 3});
  CHECK(sig("flatten", {{2, 3, 7, 7}}).output == Shape{2, 147});
  CHECK(sig("reshape", {{2, 784}}, {{"shape", std::vector<std::int64_t>{1, -1, 28}}}).output ==
        Shape{2, 1, 28, 28});
  CHECK(sig("concat", {{2, 3, 4}, {2, 5, 4}}).output == Shape{2, 8, 4});
  CHECK(sig("concat", {{2, 3, 4}, {2, 3, 1}}, {{"axis", std::int64_t{-1}}}).output ==
        Shape{2, 3, 5});
  CHECK(sig("add", {{2, 3}, {2, 3}, {2, 3}}).output == Shape{2, 3});
  CHECK(sig("cross_entropy", {{6, 10}, {6}}).output == Shape{1});
  CHECK(sig("layernorm", {{6, 4, 10}}).params[0].shape == Shape{10});
}

TEST_CASE("bad inputs raise ShapeError saying what the op needs") {
  CHECK(shape_error("conv2d", {{128, 784}},
                    {{"out_channels", std::int64_t{4}}, {"kernel", std::int64_t{3}}})
            .find("conv2d needs input [N, C, H, W], got [128, 784]") == 0);
  // One-channel images without their channel axis (an NPY x of [N, H, W]).
  CHECK(shape_error("maxpool2d", {{128, 28, 28}}, {{"kernel", std::int64_t{2}}}) ==
        "maxpool2d needs input [N, C, H, W], got [128, 28, 28]: one-channel images need their "
        "channel axis: add a reshape layer (shape: [1, 28, 28]) before it");
  CHECK(shape_error("linear", {{128, 1, 28, 28}}, {{"out_features", std::int64_t{10}}}) ==
        "linear needs a 2-d input [N, features], got [128, 1, 28, 28]: add a flatten layer "
        "before it");
  CHECK_THAT(shape_error("conv2d", {{1, 6, 8, 8}},
                         {{"out_channels", std::int64_t{4}},
                          {"kernel", std::int64_t{3}},
                          {"groups", std::int64_t{4}}}),
             Catch::Contains("groups (4) must divide"));
  CHECK_THAT(shape_error("conv2d", {{1, 1, 2, 8}},
                         {{"out_channels", std::int64_t{4}}, {"kernel", std::int64_t{3}}}),
             Catch::Contains("too small"));
  CHECK_THAT(shape_error("conv2d", {{1, 1, 8, 8}},
                         {{"out_channels", std::int64_t{4}},
                          {"kernel", std::vector<std::int64_t>{3, 3, 3}}}),
             Catch::Contains("list of two"));
  CHECK_THAT(shape_error("add", {{2, 3}, {2, 4}}), Catch::Contains("[2, 3] and [2, 4]"));
  CHECK_THAT(shape_error("concat", {{2, 3, 4}, {2, 3, 5}}), Catch::Contains("every other"));
  CHECK_THAT(shape_error("concat", {{2, 3}, {2, 3}}, {{"axis", std::int64_t{0}}}),
             Catch::Contains("batch axis"));
  CHECK_THAT(shape_error("reshape", {{2, 10}}, {{"shape", std::vector<std::int64_t>{3, -1}}}),
             Catch::Contains("cannot infer"));
  CHECK_THAT(shape_error("reshape", {{2, 10}}, {{"shape", std::vector<std::int64_t>{3, 4}}}),
             Catch::Contains("needs 12 values per sample"));
  // A product past 2^63: no wrapped count (that once divided by zero).
  CHECK_THAT(
      shape_error("reshape", {{2, 10}},
                  {{"shape", std::vector<std::int64_t>{std::int64_t{1} << 32, std::int64_t{1} << 32,
                                                       std::int64_t{1} << 32, -1}}}),
      Catch::Contains("more values per sample than can be counted"));
  CHECK_THAT(shape_error("cross_entropy", {{6, 10}, {5}}), Catch::Contains("labels [N] = [6]"));
  CHECK_THAT(shape_error("mse", {{6, 10}, {6, 9}}), Catch::Contains("same shape"));
  CHECK_THAT(shape_error("batchnorm", {{6, 10, 3}}), Catch::Contains("[N, C] or [N, C, H, W]"));
  CHECK_THAT(shape_error("maxpool2d", {{1, 1, 8, 8}},
                         {{"kernel", std::int64_t{2}}, {"padding", std::int64_t{2}}}),
             Catch::Contains("at most half"));
}

TEST_CASE("docs/ops.md names every registered op and attribute") {
  std::ifstream in("docs/ops.md");
  REQUIRE(in.good());  // tests run from the repository root
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& d : op_registry().all()) {
    const auto section = text.find("### `" + d.name + "`");
    INFO(d.name);
    REQUIRE(section != std::string::npos);
    const auto end = text.find("### ", section + 4);
    const std::string body = text.substr(section, end - section);
    for (const auto& f : d.attrs) {
      INFO(f.name);
      CHECK(body.find("`" + f.name + "`") != std::string::npos);
      if (!f.required) CHECK(body.find("default `" + f.default_yaml + "`") != std::string::npos);
    }
  }
}
