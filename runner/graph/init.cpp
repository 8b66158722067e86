// Initializers on a counter-based generator (splitmix64), so values are the
// same on every machine and standard library. A bias's fan-in is its layer's
// weight's (builder.cpp), so uniform_fan_in gives both PyTorch's default bounds.
#include "runner/graph/init.h"

#include <cmath>
#include <stdexcept>

#include "ops/step_values.h"

namespace trainer::graph {

std::uint64_t hash_name(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

namespace {

// Uniform in (0, 1).
double uniform(std::uint64_t stream, std::uint64_t i) {
  return (static_cast<double>(splitmix64(stream ^ splitmix64(i)) >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

void initialize_param(const Param& param, std::uint64_t seed, std::vector<float>& out) {
  const std::size_t n = static_cast<std::size_t>(numel(param.shape));
  out.assign(n, 0.0f);
  const std::uint64_t stream = splitmix64(seed ^ hash_name(param.name));
  const std::string& init = param.init;
  if (init == "zeros") return;
  if (init == "ones") {
    out.assign(n, 1.0f);
    return;
  }
  const double relu_gain = std::sqrt(2.0);
  double std_dev = 0, bound = 0;
  if (init == "kaiming_normal")
    std_dev = relu_gain / std::sqrt(param.fan_in);
  else if (init == "kaiming_uniform")
    bound = relu_gain * std::sqrt(3.0 / param.fan_in);
  else if (init == "xavier_normal")
    std_dev = std::sqrt(2.0 / (param.fan_in + param.fan_out));
  else if (init == "xavier_uniform")
    bound = std::sqrt(6.0 / (param.fan_in + param.fan_out));
  else if (init == "uniform_fan_in")  // PyTorch's nn.Linear / nn.Conv2d default
    bound = 1.0 / std::sqrt(param.fan_in);
  else
    throw std::invalid_argument("unknown initializer '" + init + "' for " + param.name);
  for (std::size_t i = 0; i < n; ++i) {
    if (bound > 0) {
      out[i] = static_cast<float>((2.0 * uniform(stream, 2 * i) - 1.0) * bound);
    } else {  // Box-Muller
      const double u1 = uniform(stream, 2 * i), u2 = uniform(stream, 2 * i + 1);
      out[i] =
          static_cast<float>(std_dev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    }
  }
}

}  // namespace trainer::graph
