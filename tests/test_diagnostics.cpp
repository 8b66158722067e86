// labels: cpu
#include <catch2/catch.hpp>
#include "runner/config/diagnostics.h"
using trainer::config::nearest;
TEST_CASE("nearest suggests the closest name") {
  CHECK(nearest("optimzer", {"optimizer", "output", "model"}) == "optimizer");
  CHECK(nearest("lr", {"lr", "momentum"}) == "lr");
  CHECK(nearest("zzzzzzzz", {"optimizer", "model"}).empty());
}
