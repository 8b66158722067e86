// Comparing two training runs of the same samples split differently (micro-
// batches, ranks): their per-step training losses and final weights agree to
// float rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "runner/checkpoint/safetensors.h"
#include "test_resume_fixtures.h"

namespace trainer::testing {

inline std::vector<float> floats_of(const checkpoint::StoredTensor& t) {
  std::vector<float> values(t.bytes.size() / sizeof(float));
  std::memcpy(values.data(), t.bytes.data(), values.size() * sizeof(float));
  return values;
}

// The training losses of every train record, in order.
inline std::vector<double> train_losses(const std::string& run_dir) {
  std::vector<double> losses;
  for (const auto& record : metrics_records(run_dir, "train"))
    losses.push_back(record["loss"].get<double>());
  return losses;
}

// The runs' losses at every step and their final weights agree to float
// rounding (the micro-batches sum in another order).
inline void check_same_training(const std::string& a, const std::string& b) {
  INFO(a << " vs " << b);
  const std::vector<double> la = train_losses(a), lb = train_losses(b);
  REQUIRE(la.size() == lb.size());
  for (std::size_t i = 0; i < la.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(la[i] - lb[i]) <= 1e-5 * std::abs(la[i]));
  }
  const auto wa = checkpoint::read_safetensors(a + "/checkpoints/last/model.safetensors");
  const auto wb = checkpoint::read_safetensors(b + "/checkpoints/last/model.safetensors");
  REQUIRE(wa.tensors.size() == wb.tensors.size());
  for (std::size_t t = 0; t < wa.tensors.size(); ++t) {
    INFO(wa.tensors[t].name);
    const std::vector<float> va = floats_of(wa.tensors[t]), vb = floats_of(wb.tensors[t]);
    REQUIRE(va.size() == vb.size());
    double largest = 0, worst = 0;
    for (std::size_t i = 0; i < va.size(); ++i) {
      largest = std::max(largest, std::abs(static_cast<double>(va[i])));
      worst = std::max(worst, std::abs(static_cast<double>(va[i]) - vb[i]));
    }
    CHECK(worst <= 1e-5 * largest);
  }
}

// Trains run `name` under tmp from tmp/tiny.yaml with the overrides of every
// list in `parts`, in order, and requires it to succeed; returns its directory.
inline std::string train_tiny(const TempDir& tmp, const std::string& name,
                              std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> overrides;
  for (const auto& part : parts) overrides.insert(overrides.end(), part.begin(), part.end());
  const std::string dir = tmp / name;
  const int code = run_to_end(run_args(tmp / "tiny.yaml", dir, overrides), tmp / (name + ".log"));
  INFO(read_text(tmp / (name + ".log")));
  REQUIRE(code == 0);
  return dir;
}

}  // namespace trainer::testing
