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

// `name` with every run of digits as '#': "layer2.0.bn1" -> "layer#.#.bn#".
std::string digits_masked(const std::string& name) {
  std::string masked;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(name[i])) != 0;
    if (!digit)
      masked += name[i];
    else if (masked.empty() || masked.back() != '#')
      masked += '#';
  }
  return masked;
}

// "stage1.block2.bn1" -> "bn1".
std::string last_part(const std::string& layer) {
  return layer.substr(layer.rfind('.') == std::string::npos ? 0 : layer.rfind('.') + 1);
}

}  // namespace

LayerRenames layer_renames(const std::vector<TensorShape>& model, const Safetensors& file) {
  std::vector<std::pair<std::string, Shape>> model_tensors, file_tensors;
  for (const auto& t : model) model_tensors.push_back({t.name, t.shape});
  for (const auto& t : file.tensors) file_tensors.push_back({t.name, Shape(t.shape)});
  const auto model_layers = layers_of(model_tensors);
  auto file_layers = layers_of(file_tensors);
  std::stable_sort(file_layers.begin(), file_layers.end(),
                   [](const auto& a, const auto& b) { return natural_less(a.first, b.first); });
  const std::size_t none = file_layers.size();
  std::vector<bool> used(file_layers.size(), false);
  std::vector<std::size_t> match(model_layers.size(), none);
  std::vector<bool> guessed(model_layers.size(), false);
  // Each model layer without a file layer yet takes the first unused one (in
  // the file's natural order) that `fits`. Where several fit and their names
  // differ other than in numbers (a Sequential's or ModuleList's indices,
  // which follow the order layers run in), the pairing is a guess.
  const auto pair_by = [&](const auto& fits) {
    for (std::size_t m = 0; m < model_layers.size(); ++m) {
      if (match[m] != none) continue;
      std::vector<std::size_t> fitting;
      for (std::size_t f = 0; f < file_layers.size(); ++f)
        if (!used[f] && fits(model_layers[m], file_layers[f])) fitting.push_back(f);
      if (fitting.empty()) continue;
      match[m] = fitting.front();
      used[fitting.front()] = true;
      const std::string pattern = digits_masked(file_layers[fitting.front()].first);
      guessed[m] = std::any_of(fitting.begin(), fitting.end(), [&](std::size_t f) {
        return digits_masked(file_layers[f].first) != pattern;
      });
    }
  };
  // Its own name first; then, inside blocks, the same last part of the name
  // ("bn1" in "stage2.bn1" and "layer2.0.bn1": a top-level "bn1" is the
  // stem's, whatever the model calls it); then the same tensors alone.
  pair_by([](const auto& m, const auto& f) { return m == f; });
  pair_by([](const auto& m, const auto& f) {
    const bool nested = m.first.find('.') != std::string::npos &&
                        f.first.find('.') != std::string::npos;
    return nested && m.second == f.second && last_part(m.first) == last_part(f.first);
  });
  pair_by([](const auto& m, const auto& f) { return m.second == f.second; });
  LayerRenames found;
  for (std::size_t m = 0; m < model_layers.size(); ++m) {
    if (match[m] == none) return {};
    if (file_layers[match[m]].first != model_layers[m].first)
      found.renames.push_back({file_layers[match[m]].first, model_layers[m].first});
    if (guessed[m]) found.paired_by_name_order.push_back(model_layers[m].first);
  }
  if (found.renames.empty()) return {};
  for (std::size_t f = 0; f < file_layers.size(); ++f)
    if (!used[f]) found.other_file_layers.push_back(file_layers[f].first);
  return found;
}

std::string layer_rename_advice(const LayerRenames& found) {
  const auto listed = [](const std::vector<std::string>& names) {
    std::string text;
    for (std::size_t i = 0; i < names.size(); ++i)
      text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
    return text;
  };
  std::string pairs;
  for (std::size_t i = 0; i < found.renames.size(); ++i)
    pairs += std::string(i ? ", " : "") + "'" + found.renames[i].file_layer + "': '" +
             found.renames[i].model_layer + "'";
  std::string advice =
      "the file holds this model's weights under other layer names (matched by their "
      "tensors' shapes, in order): rename them when writing the file, e.g. names = {" +
      pairs +
      "}; {names.get(k.rpartition('.')[0], k.rpartition('.')[0]) + '.' + "
      "k.rpartition('.')[2]: v for k, v in weights.items()}";
  if (!found.paired_by_name_order.empty())
    advice += "; " + listed(found.paired_by_name_order) +
              (found.paired_by_name_order.size() == 1 ? " has" : " have") +
              " tensors of the same shapes as other layers, paired in the order of the "
              "file's names, which need not be the order they run in: check those pairs";
  if (!found.other_file_layers.empty())
    advice += "; the file's " + listed(found.other_file_layers) +
              (found.other_file_layers.size() == 1 ? " is" : " are") +
              " no layer of this model: load the rest with model.init_strict: false";
  return advice;
}

}  // namespace trainer::checkpoint
