// IEEE half precision (fp16) emulated in float32 storage: values rounded to the
// nearest fp16 (ties to even), with fp16's range: beyond 65504 they become
// infinite, as they would in real fp16 storage. Used where the CPU has no fp16
// kernels, so that `precision: fp16` exercises the same overflows (and loss
// scaling) it would on a GPU.
#pragma once

#include <cstddef>

namespace trainer::cpu {

// The fp16 value nearest to `v`, as a float (inf beyond fp16's range, NaN kept).
float round_to_half(float v);

// Rounds `n` floats in place.
void round_to_half(float* data, std::size_t n);

}  // namespace trainer::cpu
