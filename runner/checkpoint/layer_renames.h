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

struct LayerRenames {
  std::vector<LayerRename> renames;  // in the model's order
  // The model's layers paired with one of several file layers of the same
  // shapes whose names differ other than in numbers (an nn.Sequential's
  // indices follow the order layers run in; "up" and "down" need not).
  std::vector<std::string> paired_by_name_order;
  std::vector<std::string> other_file_layers;  // the file's layers no layer of the model took
};

// For each of the model's layers in order (a layer: the tensors whose names
// share what comes before their last dot), the file's layer that holds tensors
// of the same last parts ("weight", "bias", "running_mean") and shapes: the
// one of its own name when there is one, else the first unused one in the
// file's natural order ("2" before "10") whose name ends the same ("bn1"),
// else the first unused one. Empty renames when some layer of the model has
// no such layer in the file, or when none has another name. PyTorch's
// num_batches_tracked is passed over.
LayerRenames layer_renames(const std::vector<TensorShape>& model, const Safetensors& file);

// What to do about `found` (renames not empty): every pair, the Python that
// renames a state_dict's keys with them, and what to check.
std::string layer_rename_advice(const LayerRenames& found);

}  // namespace trainer::checkpoint
