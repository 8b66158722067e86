// A model's weights found in a file under other layer names: a PyTorch
// nn.Sequential exports "0.weight", "2.weight" where the model has
// "linear1.weight", "linear2.weight". Matching each of the model's layers to
// a layer of the file holding tensors of the same kinds and shapes gives the
// renaming that makes the file load.
#pragma once

#include <string>
#include <vector>

#include "runner/checkpoint/safetensors.h"
#include "runner/checkpoint/weights.h"

namespace trainer::checkpoint {

struct LayerRename {
  std::string file_layer;   // "0", "features.3"
  std::string model_layer;  // "linear1", "stage1.block1.conv1"
};

// For each of the model's layers in order (a layer: the tensors whose names
// share what comes before their last dot), the file's layer that holds tensors
// of the same last parts ("weight", "bias", "running_mean") and shapes: the
// one of its own name when there is one, else the first unused in the file's
// natural order ("2" before "10"). The layers whose names differ, in the
// model's order; empty when some layer of the model has no such layer in the
// file, or when none differs. PyTorch's num_batches_tracked is passed over.
std::vector<LayerRename> layer_renames(const std::vector<TensorShape>& model,
                                       const Safetensors& file);

// What to do about `renames` (not empty): the pairs (the first 8) and the
// Python that renames a state_dict's keys.
std::string layer_rename_advice(const std::vector<LayerRename>& renames);

}  // namespace trainer::checkpoint
