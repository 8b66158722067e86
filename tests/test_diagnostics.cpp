// The "did you mean" search, and a diagnostic's text: a value or key echoed
// in it however long stays a line of a few hundred bytes.
// labels: cpu
#include <catch2/catch.hpp>

#include <string>

#include "runner/config/diagnostics.h"

using trainer::config::Diagnostic;
using trainer::config::format;
using trainer::config::nearest;

TEST_CASE("nearest suggests the closest name") {
  CHECK(nearest("optimzer", {"optimizer", "output", "model"}) == "optimizer");
  CHECK(nearest("lr", {"lr", "momentum"}) == "lr");
  CHECK(nearest("zzzzzzzz", {"optimizer", "model"}).empty());
}

TEST_CASE("nearest takes a word cut short for the one name it begins") {
  CHECK(nearest("eval.acc", {"eval.loss", "eval.accuracy", "eval.top5"}) == "eval.accuracy");
  CHECK(nearest("out_feat", {"out_features", "bias", "init"}) == "out_features");
  // Too short, or the beginning of several names: no guess.
  CHECK(nearest("ev", {"eval.accuracy"}).empty());
  CHECK(nearest("eval.", {"eval.loss", "eval.accuracy", "eval.top5"}).empty());
}

TEST_CASE("a line of a diagnostic too long to read is cut, saying its length") {
  Diagnostic d;
  d.mark.file = "c.yaml";
  d.mark.line = 3;
  d.mark.column = 7;
  d.key_path = "optimizer.lr";
  // A UTF-8 character (2 bytes) across the cut at byte 200 of the line: left out whole.
  const std::string value = std::string(173, 'a') + "\xC3\xA9" + std::string(1'000'000, 'b');
  d.message = "expected a number, found '" + value + "'\nsecond line kept";
  d.suggestion = "a short suggestion";
  const std::string text = format(d);
  INFO(text.substr(0, 400));
  CHECK(text.size() < 600);
  CHECK(text.rfind("c.yaml:3:7: error: optimizer.lr: expected a number, found 'aaa", 0) == 0);
  CHECK(text.find("... (" + std::to_string(27 + value.size()) +
                  " bytes in all)\nsecond line kept\n"
                  "    a short suggestion") != std::string::npos);
  CHECK(text.find("\xC3\n") == std::string::npos);
  CHECK(text.find("\xC3.") == std::string::npos);
  // A long key too; a message of many short lines is left whole.
  d.key_path = std::string(10'000, 'k');
  d.message = "";
  for (int i = 0; i < 500; ++i) d.message += "tensor " + std::to_string(i) + " differs\n";
  const std::string listed = format(d);
  CHECK(listed.find("... (10000 bytes in all): tensor 0 differs\n") != std::string::npos);
  CHECK(listed.find("tensor 499 differs\n") != std::string::npos);
}
