// Whether this CPU computes bf16 (oneDNN's bf16 kernels need AVX-512): the
// bf16 parts of the CPU tests skip, with a warning saying so, where it does not.
#pragma once

#include <catch2/catch.hpp>

#include "ops/kernel.h"

inline bool cpu_computes_bf16() {
  const bool yes = trainer::cpu_backend().supports_compute(trainer::DType::bf16);
  if (!yes) WARN("this CPU does not compute bf16 (oneDNN runs below AVX-512): bf16 part skipped");
  return yes;
}
