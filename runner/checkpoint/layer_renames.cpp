// Matching a model's layers to a weights file's layers of other names
// (layer_renames.h).
#include "runner/checkpoint/layer_renames.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

namespace trainer::checkpoint {
namespace {

// A layer's tensors: each one's last name part and shape, sorted.
using Contents = std::vector<std::pair<std::string, Shape>>;

// "stage1.conv1.weight" -> {"stage1.conv1", "weight"}; a name without a dot
// is a layer of its own, "".
std::pair<std::string, std::string> split_name(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {"", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

// Layers in the order their first tensor comes, with their contents sorted.
std::vector<std::pair<std::string, Contents>> layers_of(
    const std::vector<std::pair<std::string, Shape>>& tensors) {
  std::vector<std::pair<std::string, Contents>> layers;
  std::map<std::string, std::size_t> index;
  for (const auto& [name, shape] : tensors) {
    auto [layer, part] = split_name(name);
    if (part == "num_batches_tracked") continue;
    const auto [at, added] = index.emplace(layer, layers.size());
    if (added) layers.push_back({layer, {}});
    layers[at->second].second.push_back({part, shape});
  }
  for (auto& layer : layers) std::sort(layer.second.begin(), layer.second.end());
  return layers;
}

// Natural order: runs of digits compare as numbers ("layer2" < "layer10").
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      // Without leading zeros, the longer run is the larger number.
      const std::string_view da = std::string_view(a).substr(i, ei - i);
      const std::string_view db = std::string_view(b).substr(j, ej - j);
      const std::string_view ta = da.substr(std::min(da.find_first_not_of('0'), da.size()));
      const std::string_view tb = db.substr(std::min(db.find_first_not_of('0'), db.size()));
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      if (ta != tb) return ta < tb;
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

std::vector<LayerRename> layer_renames(const std::vector<TensorShape>& model,
                                       const Safetensors& file) {
  std::vector<std::pair<std::string, Shape>> model_tensors, file_tensors;
  for (const auto& t : model) model_tensors.push_back({t.name, t.shape});
  for (const auto& t : file.tensors) file_tensors.push_back({t.name, Shape(t.shape)});
  const auto model_layers = layers_of(model_tensors);
  auto file_layers = layers_of(file_tensors);
  std::stable_sort(file_layers.begin(), file_layers.end(),
                   [](const auto& a, const auto& b) { return natural_less(a.first, b.first); });
  std::vector<bool> used(file_layers.size(), false);
  std::vector<std::size_t> match(model_layers.size(), file_layers.size());
  // Its own name first, then the first unused layer of the same contents.
  for (std::size_t m = 0; m < model_layers.size(); ++m)
    for (std::size_t f = 0; f < file_layers.size(); ++f)
      if (!used[f] && file_layers[f] == model_layers[m]) {
        used[f] = true;
        match[m] = f;
        break;
      }
  for (std::size_t m = 0; m < model_layers.size(); ++m) {
    if (match[m] != file_layers.size()) continue;
    for (std::size_t f = 0; f < file_layers.size() && match[m] == file_layers.size(); ++f)
      if (!used[f] && file_layers[f].second == model_layers[m].second) {
        used[f] = true;
        match[m] = f;
      }
    if (match[m] == file_layers.size()) return {};
  }
  std::vector<LayerRename> renames;
  for (std::size_t m = 0; m < model_layers.size(); ++m)
    if (file_layers[match[m]].first != model_layers[m].first)
      renames.push_back({file_layers[match[m]].first, model_layers[m].first});
  return renames;
}

std::string layer_rename_advice(const std::vector<LayerRename>& renames) {
  constexpr std::size_t kShown = 8;
  std::string pairs;
  for (std::size_t i = 0; i < renames.size() && i < kShown; ++i)
    pairs += std::string(i ? ", " : "") + "'" + renames[i].file_layer + "': '" +
             renames[i].model_layer + "'";
  const bool all = renames.size() <= kShown;
  return "the file holds this model's weights under other layer names (matched by their "
         "tensors' shapes, in order): rename them when writing the file, e.g. names = {" +
         pairs + (all ? "" : ", ...") +
         "}; {names.get(k.rpartition('.')[0], k.rpartition('.')[0]) + '.' + "
         "k.rpartition('.')[2]: v for k, v in weights.items()}" +
         (all ? ""
              : " (" + std::to_string(renames.size()) +
                    " layers to rename; trainer plan lists the model's names in order)");
}

}  // namespace trainer::checkpoint
