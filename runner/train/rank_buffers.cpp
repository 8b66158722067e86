// Averaging per-rank buffers (plain batchnorm's running statistics) over the ranks.
#include "runner/train/rank_buffers.h"

#include <stdexcept>

namespace trainer::train {

std::vector<TensorRef> rank_local_buffers(const graph::Program& program) {
  std::vector<TensorRef> buffers;
  const graph::Graph& graph = program.graph();
  for (const graph::ParamStorage& p : program.params()) {
    if (p.param->trainable || p.param->frozen) continue;
    const Attrs& attrs = graph.nodes[static_cast<std::size_t>(p.param->node)].attrs;
    if (attrs.has("sync") && attrs.get_bool("sync")) continue;
    buffers.push_back(p.value);
    if (p.ema) buffers.push_back(p.ema);
  }
  return buffers;
}

void average_over_ranks(Backend& backend, const std::vector<TensorRef>& buffers,
                        Collective& collective) {
  const int world = collective.world();
  if (world <= 1 || buffers.empty()) return;
  std::vector<float> values;
  std::vector<double> sums;
  for (const TensorRef& t : buffers) {
    if (t.dtype != DType::f32) throw std::logic_error("a per-rank buffer is not float32");
    values.resize(static_cast<std::size_t>(t.numel()));
    backend.copy_to_host(values.data(), t.data, t.bytes());
    sums.insert(sums.end(), values.begin(), values.end());
  }
  // Summed in double in rank order: every rank gets the same bits, and W
  // equal floats sum (and divide) exactly, so agreeing values stay as they are.
  collective.all_reduce_statistics(sums);
  std::size_t at = 0;
  for (const TensorRef& t : buffers) {
    values.resize(static_cast<std::size_t>(t.numel()));
    for (float& v : values) v = static_cast<float>(sums[at++] / world);
    backend.copy_to_device(t.data, values.data(), t.bytes());
  }
}

}  // namespace trainer::train
