// What the host offers, for `trainer doctor` and the run manifest: the CPU's
// model name and the vector/matrix ISA extensions that matter for training.
#pragma once

#include <string>

namespace trainer::train {

std::string cpu_model();  // "AMD EPYC 9654 96-Core Processor", or "unknown"
std::string cpu_isa();    // "avx2 avx512f avx512bw avx512_vnni avx512_bf16"

}  // namespace trainer::train
