// labels: cpu
// Kernels that convert plain tensors to oneDNN's blocked layouts inside.
// conv2d through the layout-converting path: channel counts where oneDNN picks
// blocked layouts (nChw16c/nChw8c and blocked weights), converted to and from the
// graph's plain NCHW inside the kernel, on odd sizes, stride, dilation, groups,
// with and without bias; forward against the direct loop, gradients against
// finite differences, wanted/unwanted gradients, and the eval-only kernel.
// batchnorm on images (nChw16c/nChw8c): gradients, unwanted input gradient.
#include <catch2/catch.hpp>

#include "tests/op_check.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

const std::vector<ConvCase> cases = {
    {{2, 16, 9, 7}, 32, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
    {{3, 1, 11, 9}, 16, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false},    // 1-channel input (the stem)
    {{2, 32, 9, 10}, 16, 2, {3, 2}, {2, 1}, {1, 0}, {1, 1}, true},    // groups, stride, asym kernel
    {{1, 16, 13, 11}, 24, 1, {3, 3}, {2, 2}, {2, 1}, {2, 2}, false},  // dilation, channels not /16
    {{2, 17, 6, 5}, 32, 1, {1, 1}, {2, 2}, {0, 0}, {1, 1}, true},     // 1x1 stride 2, odd channels
};

std::string info(const ConvCase& c) {
  return "x " + to_string(c.x) + " out " + std::to_string(c.out) + " groups " +
         std::to_string(c.groups);
}

std::vector<double> reference(OpRun& run, const ConvCase& c) {
  const std::vector<float> b = c.bias ? run.params[1].f : std::vector<float>{};
  return conv2d_reference(run.inputs[0], run.params[0], b, run.signature().output, c.stride[0],
                          c.stride[1], c.padding[0], c.padding[1], c.dilation[0], c.dilation[1],
                          c.groups);
}

// The kernel's description lists the layouts as "[abcd,...]": anything else is blocked.
bool uses_blocked_layout(const std::string& impl) {
  return impl.find("16b") != std::string::npos || impl.find("8b") != std::string::npos ||
         impl.find("16a") != std::string::npos || impl.find("8a") != std::string::npos;
}

}  // namespace

TEST_CASE("conv2d in blocked layouts: forward matches the direct loop") {
  int blocked = 0;
  for (const auto& c : cases) {
    INFO(info(c));
    OpRun run(cpu_backend(), conv_case(c));
    INFO(run.kernel().implementation());
    blocked += uses_blocked_layout(run.kernel().implementation());
    check_close(run.forward().f, reference(run, c), 1e-4, 1e-4, "conv2d y");
  }
  // On x86-64 oneDNN has blocked convolutions from SSE4.1 on: the conversions ran.
  CHECK(blocked >= 3);
}

TEST_CASE("conv2d in blocked layouts: gradients match finite differences") {
  for (const auto& c : cases) {
    INFO(info(c));
    OpRun run(cpu_backend(), conv_case(c));
    GradCheckOptions o;
    o.samples_per_tensor = 16;
    check_gradients(run, o);
  }
}

TEST_CASE("conv2d in blocked layouts: unwanted gradients are skipped, wanted ones unchanged") {
  for (const auto& c : cases) {
    INFO(info(c));
    OpRun run(cpu_backend(), conv_case(c));
    run.forward();
    HostTensor r = HostTensor::zeros(run.signature().output);
    std::mt19937_64 rng(11);
    fill_uniform(r.f, rng, -1.0f, 1.0f);
    const auto all = run.backward(r);
    run.forward();
    const auto params_only = run.backward(r, true, 7, -1, {false});
    CHECK(params_only.inputs[0].f.empty());
    for (std::size_t k = 0; k < all.params.size(); ++k)
      check_close(params_only.params[k].f, all.params[k].f, 1e-6, 1e-6,
                  "param gradient without the input gradient");
  }
}

TEST_CASE("conv2d in blocked layouts: the eval-only kernel matches the direct loop") {
  for (const auto& c : cases) {
    INFO(info(c));
    OpRun run(cpu_backend(), conv_case(c), 1, false);
    CHECK(run.kernel().saved_bytes().empty());
    check_close(run.forward(false).f, reference(run, c), 1e-4, 1e-4, "conv2d y (eval)");
  }
}

TEST_CASE("batchnorm in a blocked layout: gradients match finite differences") {
  for (const Shape& x : std::vector<Shape>{{3, 32, 5, 7}, {2, 17, 3, 3}}) {
    INFO("batchnorm x " << to_string(x));
    OpRun run(cpu_backend(), {"batchnorm", {{"momentum", 0.1}, {"eps", 1e-3}}, {x}});
    INFO(run.kernel().implementation());
    CHECK(uses_blocked_layout(run.kernel().implementation()));
    CHECK(run.kernel().saved_bytes().size() == 3);  // mean, variance, the converted input
    GradCheckOptions o;
    o.samples_per_tensor = 16;
    check_gradients(run, o);
    // Without the input gradient the parameter gradients stay the same.
    run.forward();
    HostTensor r = HostTensor::zeros(run.signature().output);
    std::mt19937_64 rng(3);
    fill_uniform(r.f, rng, -1.0f, 1.0f);
    const auto all = run.backward(r);
    run.forward();
    const auto params_only = run.backward(r, true, 7, -1, {false});
    CHECK(params_only.inputs[0].f.empty());
    for (std::size_t k = 0; k < 2; ++k)
      check_close(params_only.params[k].f, all.params[k].f, 1e-6, 1e-6, "scale/shift gradient");
  }
}
