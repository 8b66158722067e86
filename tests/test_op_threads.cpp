// labels: cpu
// Small primitives run on the calling thread alone (PrimitiveCall::run_serially):
// their results are right and the thread limit the user set is restored after them.
#include <catch2/catch.hpp>

#include "ops/cpu/onednn.h"
#include "tests/op_check.h"

using namespace trainer;
using namespace trainer::testing;

TEST_CASE("serial small primitives give the same results and restore the thread limit") {
  const int before = cpu::cpu_threads();
  REQUIRE(cpu::set_cpu_threads(2));
  OpRun relu(cpu_backend(), {"relu", {}, {{3, 5, 7}}});  // far below the serial threshold
  const auto y = relu.forward();
  CHECK(cpu::cpu_threads() == 2);
  for (std::size_t k = 0; k < y.f.size(); ++k) CHECK(y.f[k] == std::max(0.0f, relu.inputs[0].f[k]));
  OpRun linear(cpu_backend(), {"linear", {{"out_features", std::int64_t{3}}}, {{4, 5}}});
  const auto z = linear.forward();
  CHECK(cpu::cpu_threads() == 2);
  check_close(z.f, linear_reference(linear.inputs[0], linear.params[0], linear.params[1].f), 1e-5,
              1e-5, "linear y");
  check_gradients(linear);
  CHECK(cpu::cpu_threads() == 2);
  cpu::set_cpu_threads(before);
}
