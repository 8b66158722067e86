// Model section -> graph IR: block expansion, name resolution, attribute
// validation and shape inference.
#include "runner/graph/builder.h"

#include <algorithm>
#include <map>
#include <set>

#include "ops/op.h"
#include "runner/config/diagnostics.h"
#include "runner/config/fields.h"
#include "runner/config/model_blocks.h"
#include "runner/config/registry.h"
#include "runner/config/scalar.h"

namespace trainer::graph {
namespace {

// Tensors beyond this many elements are refused when the model is built, so
// that element and byte counts (and their sums in the memory plan) stay far
// from 64-bit overflow.
constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 40;

bool within_element_limit(const Shape& shape) {
  std::int64_t elements = 1;
  for (std::int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(elements, d, &elements) || elements > kMaxTensorElements)
      return false;
  return true;
}

// "" when the op's output has dimensions a tensor may have and it and the
// parameters are within the limit; else which is not.
std::string oversized_tensor(const OpSignature& sig) {
  if (sig.output.size() > kMaxTensorRank)
    return "output " + to_string(sig.output) + " has " + std::to_string(sig.output.size()) +
           " dimensions, more than the " + std::to_string(kMaxTensorRank) +
           " a tensor may have (the batch and " + std::to_string(kMaxTensorRank - 1) + " more)";
  if (!within_element_limit(sig.output)) return "output " + to_string(sig.output) + " is too large";
  for (const auto& p : sig.params)
    if (!within_element_limit(p.shape))
      return "parameter '" + p.name + "' " + to_string(p.shape) + " is too large";
  return "";
}

using config::Diagnostics;
using config::join;
using config::Mark;
using config::Node;

constexpr const char* kInputName = "input";
// The loss's node, under which the manifest records its kernel.
constexpr const char* kLossName = "loss";

// Keys a layer may have besides its op's attributes.
const std::vector<std::string> kLayerKeys = {"type", "name", "inputs"};
// The most layers a model may expand to (nested blocks multiply their
// repeats): far beyond any network trained here, and small enough that the
// graph, its plan and their memory stay bounded.
constexpr std::size_t kMaxLayers = 100000;

std::vector<std::string> keys_of(const Node& map) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < map.size(); ++i) out.push_back(map.key_at(i));
  return out;
}

// The parameter a scalar "$p" / "${p}" names, or "" when it names none.
std::string parameter_reference(const Node& node) {
  if (!node.is_scalar() || node.quoted()) return {};
  return config::block_parameter_name(node.text());
}

// Replaces every scalar "$p" / "${p}" by the value of block parameter p. The
// value keeps its own mark (where the instance, or the block's `params:`,
// wrote it), so a bad value is reported where it was written. A reference to
// an undeclared parameter is left as is and added to `undeclared`.
Node substitute(const Node& node, const std::map<std::string, Node>& params,
                std::vector<const Node*>* undeclared = nullptr) {
  if (const std::string name = parameter_reference(node); !name.empty()) {
    auto it = params.find(name);
    if (it != params.end()) return it->second;
    if (undeclared) undeclared->push_back(&node);
    return node;
  }
  if (node.is_sequence()) {
    Node out = Node::sequence(node.mark());
    for (const auto& item : node.items()) out.push_back(substitute(item, params, undeclared));
    return out;
  }
  if (node.is_map()) {
    Node out = Node::map(node.mark());
    for (std::size_t i = 0; i < node.size(); ++i)
      out.set(node.key_at(i), substitute(node.value_at(i), params, undeclared),
              node.key_mark_at(i));
    return out;
  }
  return node;
}

// The op of a layer's `type:`; null, with an error at the key, when it
// names none (or a loss).
const OpDef* find_layer_op(const Node& layer, const std::string& path, Diagnostics& diags) {
  const Node* type = layer.find("type");
  if (!type || !type->is_scalar()) {
    diags.add(layer.mark(), path, "a layer needs `type:` (an op) or `block:` (a block name)");
    return nullptr;
  }
  const OpDef* op = op_registry().find(type->text());
  if (!op || op->is_loss) {
    std::vector<std::string> names;
    for (const auto& d : op_registry().all())
      if (!d.is_loss) names.push_back(d.name);
    const std::string near = config::nearest(type->text(), names);
    const std::string known = config::join(names);
    diags.add(type->mark(), path + ".type",
              op ? "'" + type->text() + "' is a loss: declare it as `model.loss`"
                 : "unknown layer type '" + type->text() + "'",
              near.empty() ? "known types: " + known : "did you mean '" + near + "'?");
    return nullptr;
  }
  return op;
}

void report_unknown_key(Diagnostics& diags, const Mark& mark, const std::string& path,
                        const std::string& key, const std::vector<std::string>& allowed) {
  const std::string near = config::nearest(key, allowed);
  diags.add(mark, path, "unknown key '" + key + "'",
            !near.empty()     ? "did you mean '" + near + "'?"
            : allowed.empty() ? std::string("nothing is valid here")
                              : "valid keys: " + join(allowed));
}

// The keys `model:` takes; any other is reported.
void check_model_keys(const Node& model, Diagnostics& diags) {
  static const std::vector<std::string> allowed = {
      "layers", "blocks", "loss", "recompute", "freeze", "lr_scale", "init_from", "init_strict"};
  for (std::size_t i = 0; i < model.size(); ++i) {
    const std::string& key = model.key_at(i);
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      report_unknown_key(diags, model.key_mark_at(i), "model." + key, key, allowed);
  }
}

// The loss op `spec` names; null, with an error at its type, when it names none.
const OpDef* find_loss_op(const Node& spec, Diagnostics& diags) {
  const Node* type = spec.is_map() ? spec.find("type") : nullptr;
  const OpDef* op = type ? op_registry().find(type->text()) : nullptr;
  if (op && op->is_loss) return op;
  std::vector<std::string> losses;
  for (const auto& d : op_registry().all())
    if (d.is_loss) losses.push_back(d.name);
  const std::string near = type ? config::nearest(type->text(), losses) : "";
  diags.add(type ? type->mark() : spec.mark(), "model.loss.type",
            type ? "unknown loss '" + type->text() + "'" : "expected {type: <loss>}",
            near.empty() ? "losses: " + join(losses) : "did you mean '" + near + "'?");
  return nullptr;
}

// A block instance's own keys: config::kBlockInstanceKeys and the parameters of the
// block `definition` declares. Returns false (each unknown key reported)
// when it has others.
bool check_instance_keys(const Node& instance, const Node& definition, const std::string& path,
                         Diagnostics& diags) {
  std::vector<std::string> allowed;
  if (const Node* p = definition.is_map() ? definition.find("params") : nullptr; p && p->is_map())
    allowed = keys_of(*p);
  allowed.insert(allowed.end(), config::kBlockInstanceKeys.begin(),
                 config::kBlockInstanceKeys.end());
  const Node* layers = definition.is_map() ? definition.find("layers") : nullptr;
  bool known = true;
  for (std::size_t i = 0; i < instance.size(); ++i) {
    const std::string& key = instance.key_at(i);
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    known = false;
    if (layers && config::refers_to_parameter(*layers, key)) {
      diags.add(instance.key_mark_at(i), path + "." + key,
                "unknown key '" + key + "': the block's layers use $" + key +
                    ", but the block does not declare it as a parameter",
                "declare it with a default under the block's params: {" + key + ": ...}");
      continue;
    }
    report_unknown_key(diags, instance.key_mark_at(i), path + "." + key, key, allowed);
  }
  return known;
}

// A layer's type and attributes, read without its input (no shape is
// known): an unknown type, key or bad value is reported. Block instances are
// left to their expansion.
void check_layer_fields(const Node& layer, const std::string& path, Diagnostics& diags) {
  if (!layer.is_map()) {
    diags.add(layer.mark(), path, "expected a layer map like {type: linear, ...}");
    return;
  }
  if (layer.find("block")) return;
  if (const OpDef* op = find_layer_op(layer, path, diags))
    config::read_fields(layer, op->attrs, path, diags, kLayerKeys);
}

class Builder {
 public:
  Builder(const Node& model, const ModelInput& input, Diagnostics& diags)
      : model_(model), input_(input), diags_(diags) {}

  Graph build() {
    if (!model_.is_map()) {
      diags_.add(model_.mark(), "model", "expected a map with `layers:`");
      return std::move(graph_);
    }
    check_model_keys(model_, diags_);
    if (const Node* blocks = model_.find("blocks")) {
      if (!blocks->is_map())
        diags_.add(blocks->mark(), "model.blocks", "expected a map of block name to definition");
      else
        blocks_ = blocks;
    }

    Shape input_shape = {input_.batch};
    input_shape.insert(input_shape.end(), input_.sample_shape.begin(), input_.sample_shape.end());
    graph_.input = graph_.add_value({kInputName, input_shape, DType::f32, ValueKind::input, -1});
    if (input_.num_classes > 0) {
      graph_.labels =
          graph_.add_value({"labels", {input_.batch}, DType::i64, ValueKind::labels, -1});
    } else {
      Shape target = {input_.batch};
      target.insert(target.end(), input_.target_shape.begin(), input_.target_shape.end());
      graph_.labels = graph_.add_value({"targets", target, DType::f32, ValueKind::labels, -1});
    }

    const Node* layers = model_.find("layers");
    if (!layers || !layers->is_sequence() || layers->items().empty()) {
      diags_.add(layers ? layers->mark() : model_.mark(), "model.layers",
                 "expected a non-empty list of layers");
      return std::move(graph_);
    }
    Scope top;
    top.top_level = true;
    top.values[kInputName] = graph_.input;
    const ValueId last = expand_layers(*layers, "model.layers", "", top, {}, 0);
    if (last == kNoValue) return std::move(graph_);
    graph_.logits = last;
    add_loss(last);
    for (const auto& [name, value] : top.values)
      if (name != kInputName) top_names_.push_back(name);
    if (const Node* recompute = model_.find("recompute")) mark_recompute(*recompute);
    if (const Node* freeze = model_.find("freeze")) mark_frozen(*freeze);
    if (const Node* lr_scale = model_.find("lr_scale")) mark_lr_scale(*lr_scale);
    if (diags_.empty()) check_something_trains(*layers);
    return std::move(graph_);
  }

 private:
  struct Scope {
    std::map<std::string, ValueId> values;  // local layer name -> its output
    std::map<std::string, int> type_counts;
    std::set<std::string> later;  // the `name:`s of the list's layers not expanded yet
    bool top_level = false;       // model.layers, where the loss's node is named `loss`
  };

  void unknown_key(const Mark& mark, const std::string& path, const std::string& key,
                   const std::vector<std::string>& allowed) {
    report_unknown_key(diags_, mark, path, key, allowed);
  }

  // Expands a list of layers in `scope`; returns the value of the last layer, or
  // kNoValue when an error stops shape inference.
  ValueId expand_layers(const Node& list, const std::string& path, const std::string& prefix,
                        Scope& scope, const std::map<std::string, Node>& params, int depth) {
    if (depth > 16) {
      diags_.add(list.mark(), path, "blocks nest more than 16 deep (a block that uses itself?)");
      return kNoValue;
    }
    ValueId previous = scope.values.at(kInputName);
    for (const Node& item : list.items())
      if (const Node* name = item.is_map() ? item.find("name") : nullptr; name && name->is_scalar())
        scope.later.insert(name->text());
    for (std::size_t i = 0; i < list.items().size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      if (const Node* name = list.items()[i].is_map() ? list.items()[i].find("name") : nullptr;
          name && name->is_scalar())
        scope.later.erase(name->text());
      std::vector<const Node*> undeclared;
      const Node layer = substitute(list.items()[i], params, &undeclared);
      if (!undeclared.empty()) {
        report_undeclared(undeclared, path, params);
        return kNoValue;
      }
      if (!layer.is_map()) {
        diags_.add(layer.mark(), item_path, "expected a layer map like {type: linear, ...}");
        return kNoValue;
      }
      const ValueId out =
          layer.find("block")
              ? expand_block_instance(layer, item_path, prefix, scope, previous, depth)
              : add_layer(layer, item_path, prefix, scope, previous);
      if (out == kNoValue) {
        // No shapes past an error, but the later layers' own fields and the
        // names they refer to are checked still: every mistake reported at once.
        for (std::size_t j = i + 1; j < list.items().size(); ++j) {
          std::vector<const Node*> unknown_parameters;  // reported when the block is fixed
          const Node later = substitute(list.items()[j], params, &unknown_parameters);
          if (!unknown_parameters.empty()) continue;
          const std::string later_path = path + "[" + std::to_string(j) + "]";
          check_layer_fields(later, later_path, diags_);
          check_later_references(list, j, later, later_path, scope, params);
        }
        return kNoValue;
      }
      previous = out;
    }
    return previous;
  }

  // `block: NAME` of the layer at `path` names no block of model.blocks.
  void report_unknown_block(const Node& block_name, const std::string& path) {
    const std::vector<std::string> names = blocks_ ? keys_of(*blocks_) : std::vector<std::string>{};
    const std::string near = config::nearest(block_name.text(), names);
    diags_.add(block_name.mark(), path + ".block",
               "no block named '" + block_name.text() + "' in model.blocks",
               near.empty() ? (names.empty() ? "define it under model.blocks"
                                             : "defined blocks: " + join(names))
                            : "did you mean '" + near + "'?");
  }

  // Past a layer that failed: whether `layer` (item `index` of `list`) reads
  // layers and names a block that can be there. The names layers before it
  // may have are taken generously (every automatic name their types could
  // give), so that only a name no layer could have is reported; when an
  // earlier layer's name cannot be known (a type or block that is not one,
  // a parameter that is not declared), no input is.
  void check_later_references(const Node& list, std::size_t index, const Node& layer,
                              const std::string& path, const Scope& scope,
                              const std::map<std::string, Node>& params) {
    if (!layer.is_map()) return;
    if (const Node* block = layer.find("block");
        block && block->is_scalar() && !(blocks_ && blocks_->find(block->text())))
      report_unknown_block(*block, path);
    const Node* inputs = layer.find("inputs");
    if (!inputs || !(inputs->is_scalar() || inputs->is_sequence())) return;
    std::set<std::string> possible;
    for (const auto& [name, value] : scope.values) possible.insert(name);
    std::map<std::string, int> counts = scope.type_counts;
    for (std::size_t k = 0; k < index; ++k) {
      std::vector<const Node*> undeclared;
      const Node earlier = substitute(list.items()[k], params, &undeclared);
      if (!undeclared.empty() || !earlier.is_map()) return;
      if (const Node* name = earlier.find("name"); name && name->is_scalar())
        possible.insert(name->text());
      const Node* block = earlier.find("block");
      const Node* type = block ? block : earlier.find("type");
      if (!type || !type->is_scalar()) return;
      const bool known = block ? blocks_ && blocks_->find(type->text())
                               : op_registry().find(type->text()) != nullptr;
      if (!known) return;
      ++counts[type->text()];
    }
    for (const auto& [type, count] : counts)
      for (int n = 1; n <= count + 1; ++n) possible.insert(type + std::to_string(n));
    const std::vector<Node> names =
        inputs->is_scalar() ? std::vector<Node>{*inputs} : inputs->items();
    for (const Node& name : names) {
      if (!name.is_scalar() || possible.count(name.text())) continue;
      const std::string near =
          config::nearest(name.text(), std::vector<std::string>(possible.begin(), possible.end()));
      diags_.add(name.mark(), path + ".inputs",
                 "no earlier layer named '" + name.text() + "' in this scope",
                 near.empty() ? "" : "did you mean '" + near + "'?");
    }
  }

  // `$name` references in a block's layers that name none of its parameters.
  void report_undeclared(const std::vector<const Node*>& refs, const std::string& layers_path,
                         const std::map<std::string, Node>& params) {
    if (layers_path.rfind("model.blocks.", 0) != 0) {
      for (const Node* ref : refs)
        diags_.add(ref->mark(), layers_path,
                   "'" + ref->text() + "' names a block parameter, but this is not inside a block",
                   "write the value itself, or quote it for a string starting with '$'");
      return;
    }
    // layers_path is "model.blocks.<block>.layers".
    const std::string block_path = layers_path.substr(0, layers_path.rfind('.'));
    const std::string block = block_path.substr(block_path.rfind('.') + 1);
    std::vector<std::string> names;
    for (const auto& [name, value] : params) names.push_back(name);
    for (const Node* ref : refs) {
      const std::string name = parameter_reference(*ref);
      const std::string near = config::nearest(name, names);
      diags_.add(
          ref->mark(), layers_path,
          "'" + ref->text() + "' names no parameter of block '" + block + "'",
          !near.empty() ? "did you mean '$" + near + "'?"
          : names.empty()
              ? "the block declares no parameters; declare them under " + block_path + ".params"
              : "its parameters: " + join(names) + " (declared under " + block_path + ".params)");
    }
  }

  std::string local_name(const Node& layer, const std::string& type, Scope& scope,
                         const std::string& path) {
    const int count = ++scope.type_counts[type];
    if (const Node* name = layer.find("name")) {
      const std::string& text = name->text();
      if (!name->is_scalar() || text.empty() || text.find('.') != std::string::npos ||
          text.find('\0') != std::string::npos || text == kInputName ||
          (scope.top_level && text == kLossName)) {
        diags_.add(name->mark(), path + ".name",
                   "expected a layer name without dots (and not 'input' or 'loss', which name "
                   "the batch and the loss), found " +
                       config::describe(*name));
        return {};
      }
      if (scope.values.count(text)) {
        diags_.add(name->mark(), path + ".name", "duplicate layer name '" + text + "'");
        return {};
      }
      return text;
    }
    // An automatic name an earlier layer took for itself: two layers of one
    // name would share their parameters' names in every checkpoint.
    const std::string automatic = type + std::to_string(count);
    if (type.find('.') != std::string::npos) {
      diags_.add(layer.mark(), path,
                 "this instance of block '" + type + "' needs a `name:`: its automatic name '" +
                     automatic +
                     "' would hold a dot, which separates the parts of a "
                     "parameter's name",
                 "give it a `name:` without dots, or rename the block");
      return {};
    }
    if (scope.values.count(automatic)) {
      diags_.add(
          layer.mark(), path,
          "this layer's automatic name '" + automatic + "' is taken: an earlier layer is named so",
          "give this layer a `name:`, or rename the earlier one");
      return {};
    }
    return automatic;
  }

  // Resolves `inputs:` (default: the previous layer) to values.
  bool resolve_inputs(const Node& layer, const std::string& path, const Scope& scope,
                      ValueId previous, std::vector<ValueId>& out) {
    const Node* inputs = layer.find("inputs");
    if (!inputs) {
      out = {previous};
      return true;
    }
    std::vector<Node> names;
    if (inputs->is_scalar())
      names.push_back(*inputs);
    else if (inputs->is_sequence())
      names = inputs->items();
    else {
      diags_.add(inputs->mark(), path + ".inputs", "expected a list of layer names");
      return false;
    }
    std::vector<std::string> known;
    for (const auto& [name, id] : scope.values) known.push_back(name);
    for (const auto& n : names) {
      if (!n.is_scalar()) {
        diags_.add(n.mark(), path + ".inputs",
                   "expected a layer name, found " + config::describe(n));
        return false;
      }
      auto it = scope.values.find(n.text());
      if (it == scope.values.end() && scope.later.count(n.text())) {
        diags_.add(n.mark(), path + ".inputs",
                   "'" + n.text() + "' comes after this layer: a layer reads earlier layers only",
                   "move '" + n.text() + "' before this layer");
        return false;
      }
      if (it == scope.values.end()) {
        const std::string near = config::nearest(n.text(), known);
        diags_.add(
            n.mark(), path + ".inputs", "no earlier layer named '" + n.text() + "' in this scope",
            near.empty() ? "earlier layers: " + join(known) : "did you mean '" + near + "'?");
        return false;
      }
      out.push_back(it->second);
    }
    return true;
  }

  ValueId add_layer(const Node& layer, const std::string& path, const std::string& prefix,
                    Scope& scope, ValueId previous) {
    const OpDef* op = find_layer_op(layer, path, diags_);
    if (!op) return kNoValue;
    const std::string name = local_name(layer, op->name, scope, path);
    if (name.empty()) return kNoValue;
    std::vector<ValueId> inputs;
    if (!resolve_inputs(layer, path, scope, previous, inputs)) return kNoValue;
    const std::size_t errors_before = diags_.size();
    Attrs attrs = config::read_fields(layer, op->attrs, path, diags_, kLayerKeys);
    if (diags_.size() != errors_before) return kNoValue;
    const ValueId out = add_node(*op, prefix + name, std::move(attrs), inputs, layer.mark(), path);
    if (out != kNoValue) scope.values[name] = out;
    return out;
  }

  ValueId add_node(const OpDef& op, const std::string& name, Attrs attrs,
                   const std::vector<ValueId>& inputs, const Mark& mark, const std::string& path) {
    if (graph_.nodes.size() >= kMaxLayers) {
      const bool in_block = blocks_expanded_;
      if (!too_many_layers_)
        diags_.add(mark, path,
                   "the model expands to more than " + std::to_string(kMaxLayers) +
                       " layers here (at '" + name + "')" +
                       (in_block ? ": nested blocks multiply their repeats" : ""),
                   in_block ? "lower the `repeat:` of the block instances"
                            : "a model of more layers than this is beyond what trainer compiles");
      too_many_layers_ = true;
      return kNoValue;
    }
    const int n = static_cast<int>(inputs.size());
    if (n < op.min_inputs || (op.max_inputs >= 0 && n > op.max_inputs)) {
      const std::string want =
          op.max_inputs < 0 ? "at least " + std::to_string(op.min_inputs)
          : op.min_inputs == op.max_inputs
              ? std::to_string(op.min_inputs)
              : std::to_string(op.min_inputs) + " to " + std::to_string(op.max_inputs);
      diags_.add(mark, path,
                 "layer '" + name + "' (" + op.name + ") takes " + want + " input(s), got " +
                     std::to_string(n));
      return kNoValue;
    }
    std::vector<Shape> shapes;
    for (ValueId v : inputs) shapes.push_back(graph_.values[v].shape);
    OpSignature sig;
    try {
      sig = op.signature(shapes, attrs);
    } catch (const ShapeError& e) {
      std::string got;
      for (const auto& s : shapes) got += (got.empty() ? "" : ", ") + to_string(s);
      diags_.add(mark, path, "layer '" + name + "' (" + op.name + "): " + e.what(),
                 "input shape" + std::string(shapes.size() > 1 ? "s: " : ": ") + got);
      return kNoValue;
    }
    if (const std::string too_large = oversized_tensor(sig); !too_large.empty()) {
      diags_.add(mark, path, "layer '" + name + "' (" + op.name + "): " + too_large,
                 sig.output.size() > kMaxTensorRank
                     ? "give it " + std::to_string(kMaxTensorRank - 1) +
                           " sample dimensions or fewer (drop extents of 1)"
                     : "a tensor may hold at most 2^40 elements (4 TiB of float32); check the "
                       "layer's sizes");
      return kNoValue;
    }
    // Names without dots in scopes without repeats cannot meet; should two
    // ever do, their parameters would share a checkpoint's key.
    if (!node_names_.insert(name).second) {
      diags_.add(mark, path, "two layers of the model are both named '" + name + "'",
                 "give one of them another `name:`");
      return kNoValue;
    }
    graph::Node node;
    node.name = name;
    node.op = &op;
    node.attrs = std::move(attrs);
    node.inputs = inputs;
    node.forward_flops = sig.forward_flops;
    node.mark = mark;
    const int index = static_cast<int>(graph_.nodes.size());
    for (const auto& decl : sig.params) {
      Param p;
      p.name = name + "." + decl.name;
      p.shape = decl.shape;
      p.init = decl.init;
      p.trainable = decl.trainable;
      p.weight_decay = decl.trainable && decl.shape.size() >= 2;
      p.node = index;
      const double receptive = decl.shape.size() > 2
                                   ? static_cast<double>(numel(decl.shape)) /
                                         static_cast<double>(decl.shape[0] * decl.shape[1])
                                   : 1.0;
      p.fan_out = decl.shape.empty() ? 1.0 : static_cast<double>(decl.shape[0]) * receptive;
      p.fan_in =
          decl.shape.size() >= 2 ? static_cast<double>(decl.shape[1]) * receptive : p.fan_out;
      // A bias draws with its layer's weight's fans, as PyTorch bounds it.
      if (decl.shape.size() < 2 && !node.params.empty()) {
        const Param& weight = graph_.params[static_cast<std::size_t>(node.params.front())];
        if (weight.shape.size() >= 2) {
          p.fan_in = weight.fan_in;
          p.fan_out = weight.fan_out;
        }
      }
      node.params.push_back(static_cast<int>(graph_.params.size()));
      graph_.params.push_back(std::move(p));
    }
    node.output = graph_.add_value({name, sig.output, DType::f32, ValueKind::activation, index});
    graph_.nodes.push_back(std::move(node));
    return graph_.nodes.back().output;
  }

  ValueId expand_block_instance(const Node& inst, const std::string& path,
                                const std::string& prefix, Scope& scope, ValueId previous,
                                int depth) {
    const Node* block_name = inst.find("block");
    if (!block_name->is_scalar()) {
      diags_.add(block_name->mark(), path + ".block",
                 "expected the name of a block, found " + config::describe(*block_name));
      return kNoValue;
    }
    const Node* def = blocks_ ? blocks_->find(block_name->text()) : nullptr;
    if (!def) {
      report_unknown_block(*block_name, path);
      return kNoValue;
    }
    blocks_expanded_ = true;  // their repeats may be what makes the model too large
    const std::string def_path = "model.blocks." + block_name->text();
    const Node* def_layers = def->is_map() ? def->find("layers") : nullptr;
    if (!def_layers || !def_layers->is_sequence()) {
      diags_.add(def->mark(), def_path, "a block needs `layers:` (a list) and may have `params:`");
      return kNoValue;
    }
    // Parameter defaults from the definition, then the instance's values.
    std::map<std::string, Node> params;
    std::vector<std::string> param_names;
    if (const Node* p = def->find("params"); p && p->is_map()) {
      for (std::size_t i = 0; i < p->size(); ++i) {
        params[p->key_at(i)] = p->value_at(i);
        param_names.push_back(p->key_at(i));
      }
    }
    if (!check_instance_keys(inst, *def, path, diags_)) return kNoValue;
    for (std::size_t i = 0; i < inst.size(); ++i) {
      const std::string& key = inst.key_at(i);
      if (std::find(config::kBlockInstanceKeys.begin(), config::kBlockInstanceKeys.end(), key) ==
          config::kBlockInstanceKeys.end())
        params[key] = inst.value_at(i);
    }
    std::int64_t repeat = 1;
    if (const Node* r = inst.find("repeat")) {
      // Checked like any integer field: 2.5, 1e1 and "3" are not repetition counts.
      static const FieldSpec spec = field("repeat", FieldType::integer, "")
                                        .at_least(1)
                                        .at_most(static_cast<double>(config::kMaxBlockRepeat));
      FieldValue value;
      if (!config::parse_field(*r, spec, path + ".repeat", diags_, value)) return kNoValue;
      repeat = std::get<std::int64_t>(value);
    }
    const std::string name = local_name(inst, block_name->text(), scope, path);
    if (name.empty()) return kNoValue;
    std::vector<ValueId> inputs;
    if (!resolve_inputs(inst, path, scope, previous, inputs)) return kNoValue;
    if (inputs.size() != 1) {
      diags_.add(inst.mark(), path + ".inputs", "a block instance takes exactly one input");
      return kNoValue;
    }
    ValueId value = inputs[0];
    for (std::int64_t r = 0; r < repeat; ++r) {
      std::map<std::string, Node> rep_params = params;
      const Node* first = inst.find("first");
      if (r == 0 && first && !first->is_map()) {
        diags_.add(first->mark(), path + ".first",
                   "expected a map of the block's parameters for its first repetition, found " +
                       config::describe(*first),
                   "e.g. first: {stride: 2}");
        return kNoValue;
      }
      if (r == 0 && first) {
        for (std::size_t i = 0; i < first->size(); ++i) {
          if (param_names.empty()) {
            diags_.add(first->key_mark_at(i), path + ".first." + first->key_at(i),
                       "unknown key '" + first->key_at(i) + "': block '" + block_name->text() +
                           "' has no parameters for `first:` to set",
                       "declare them under " + def_path + ".params");
            return kNoValue;
          }
          if (!params.count(first->key_at(i))) {
            unknown_key(first->key_mark_at(i), path + ".first." + first->key_at(i),
                        first->key_at(i), param_names);
            return kNoValue;
          }
          rep_params[first->key_at(i)] = first->value_at(i);
        }
      }
      const std::string inner_prefix =
          prefix + name + "." + (repeat > 1 ? "block" + std::to_string(r + 1) + "." : "");
      Scope inner;
      inner.values[kInputName] = value;
      value = expand_layers(*def_layers, def_path + ".layers", inner_prefix, inner, rep_params,
                            depth + 1);
      if (value == kNoValue) return kNoValue;
    }
    scope.values[name] = value;
    return value;
  }

  void add_loss(ValueId prediction) {
    const Node spec = loss_spec(model_);
    const OpDef* op = find_loss_op(spec, diags_);
    if (!op) return;
    const Node* type = spec.find("type");
    if (input_.num_classes > 0 && op->name == "mse") {
      diags_.add(type->mark(), "model.loss.type",
                 "mse needs regression targets, but the data has class labels (integers)",
                 "use cross_entropy for classes; for numeric targets store them as floats (an "
                 "NPY y of float32: y.astype('float32'); a CSV: regression: true)");
      return;
    }
    const std::size_t errors_before = diags_.size();
    Attrs attrs = config::read_fields(spec, op->attrs, "model.loss", diags_, {"type"});
    if (diags_.size() != errors_before) return;
    const Shape& logits = graph_.values[prediction].shape;
    if (op->name == "cross_entropy" && logits.size() != 2) {
      diags_.add(graph_.nodes.back().mark, "model.layers",
                 "the last layer gives " + to_string(logits) +
                     ", but cross_entropy takes logits [N, classes]",
                 input_.num_classes > 0
                     ? "end the model with a flatten (or global_avgpool) and a linear layer of " +
                           std::to_string(input_.num_classes) + " outputs"
                     : "end the model with a flatten (or global_avgpool) and a linear layer");
      return;
    }
    if (input_.num_classes > 0 && logits.size() == 2 && logits[1] != input_.num_classes) {
      const std::string outputs = std::to_string(logits[1]);
      const std::string classes = std::to_string(input_.num_classes);
      // A training set whose largest classes happen to be missing makes
      // fewer classes than the model was written for.
      const bool set_may_lack_classes = input_.classes_inferred && logits[1] > input_.num_classes;
      diags_.add(graph_.nodes.back().mark, "model.layers",
                 "the last layer gives " + outputs + " outputs but the data has " + classes +
                     " classes" +
                     (set_may_lack_classes ? " (read off its largest label, as data.train has no "
                                             "`classes:`)"
                                           : ""),
                 "set the last layer's size to " + classes +
                     (set_may_lack_classes ? ", or data.train.classes: " + outputs +
                                                 " if the training set lacks some of the classes"
                                           : ""));
      return;
    }
    graph_.loss = add_node(*op, kLossName, std::move(attrs), {prediction, graph_.labels},
                           spec.mark(), "model.loss");
  }

  // The loss depends on a parameter that trains: otherwise a step has no
  // gradient to follow (and nothing to update).
  void check_something_trains(const Node& layers) {
    std::vector<bool> live_value(graph_.values.size(), false);
    std::vector<bool> live_node(graph_.nodes.size(), false);
    live_value[static_cast<std::size_t>(graph_.loss)] = true;
    for (std::size_t i = graph_.nodes.size(); i-- > 0;) {
      if (!live_value[static_cast<std::size_t>(graph_.nodes[i].output)]) continue;
      live_node[i] = true;
      for (ValueId in : graph_.nodes[i].inputs) live_value[static_cast<std::size_t>(in)] = true;
    }
    std::vector<std::string> unused, frozen;  // layers whose weights would train but do not
    for (const Param& p : graph_.params) {
      const std::string& layer = graph_.nodes[static_cast<std::size_t>(p.node)].name;
      if (p.trainable && live_node[static_cast<std::size_t>(p.node)]) return;
      std::vector<std::string>& list = p.frozen ? frozen : unused;
      if ((p.trainable || p.frozen) && (list.empty() || list.back() != layer))
        list.push_back(layer);
    }
    if (unused.empty() && frozen.empty()) {
      diags_.add(layers.mark(), "model.layers",
                 "the model has no trainable parameters: nothing would train",
                 "add a layer with weights (linear, conv2d, batchnorm, layernorm)");
      return;
    }
    std::vector<std::string> why;
    if (!frozen.empty()) why.push_back("model.freeze holds " + join(frozen));
    if (!unused.empty())
      why.push_back("no later layer reads " + join(unused) + ", so the loss does not depend on " +
                    (unused.size() == 1 ? "it" : "them"));
    diags_.add(
        layers.mark(), "model.layers",
        "no parameter that trains reaches the loss, so nothing would train: " + join(why, "; "),
        frozen.empty() ? "make the loss depend on a layer with weights through `inputs:`"
                       : "leave a layer the loss depends on out of model.freeze");
  }

  // `recompute: [name, ...]` (layers or block instances of the top level) or
  // `recompute: {every: N}` (keep every N-th layer's output, recompute the rest).
  void mark_recompute(const Node& spec) {
    const int model_nodes =
        static_cast<int>(graph_.nodes.size()) - (graph_.loss != kNoValue ? 1 : 0);
    if (spec.is_map()) {
      // every: 1 keeps every output and recomputes nothing: refused, not ignored.
      const FieldSpec every = field("every", FieldType::integer, "").req().at_least(2);
      const std::size_t before = diags_.size();
      const Attrs attrs = config::read_fields(spec, {every}, "model.recompute", diags_);
      if (diags_.size() != before) return;
      const std::int64_t n = attrs.get_int("every");
      for (int i = 0; i < model_nodes; ++i) graph_.nodes[i].recompute = (i + 1) % n != 0;
      return;
    }
    if (!spec.is_sequence()) {
      diags_.add(spec.mark(), "model.recompute",
                 "expected a list of layer or block names, or {every: N}");
      return;
    }
    for (const Node& item : spec.items()) {
      if (!item.is_scalar()) {
        diags_.add(item.mark(), "model.recompute",
                   "expected the name of a layer or block, found " + config::describe(item));
        continue;
      }
      const std::string& name = item.text();
      const std::vector<int> named = nodes_named(name);
      if (named.empty()) unknown_name(item.mark(), "model.recompute", name);
      // A block instance is a checkpointed segment: its layers are recomputed
      // from its stored input, and its output (the next segment's input) is kept.
      std::map<std::string, int> instance_output;
      for (int i : named) {
        const std::string& node = graph_.nodes[i].name;
        graph_.nodes[i].recompute = true;
        if (node != name) instance_output[node.substr(0, node.rfind('.'))] = i;
      }
      for (const auto& [instance, output] : instance_output) graph_.nodes[output].recompute = false;
    }
  }

  // The model's nodes (not the loss) that a layer or block-instance name
  // covers: the layer itself, or every layer inside the instance.
  std::vector<int> nodes_named(const std::string& name) const {
    std::vector<int> named;
    const int model_nodes =
        static_cast<int>(graph_.nodes.size()) - (graph_.loss != kNoValue ? 1 : 0);
    for (int i = 0; i < model_nodes; ++i) {
      const std::string& node = graph_.nodes[i].name;
      if (node == name || node.rfind(name + ".", 0) == 0) named.push_back(i);
    }
    return named;
  }

  // A name that covers no layer: the error, with the nearest top-level name.
  void unknown_name(const Mark& mark, const std::string& key, const std::string& name) {
    const std::string near = config::nearest(name, top_names_);
    diags_.add(
        mark, key, "no layer or block named '" + name + "'",
        near.empty() ? "top-level names: " + join(top_names_) : "did you mean '" + near + "'?");
  }

  // `freeze: [name, ...]`: the parameters of these layers or block instances
  // are not trained (no gradient, no optimizer state, never updated), as
  // PyTorch's requires_grad_(False); a frozen batchnorm still updates its
  // running statistics in training.
  void mark_frozen(const Node& spec) {
    if (!spec.is_sequence()) {
      diags_.add(spec.mark(), "model.freeze", "expected a list of layer or block names",
                 "e.g. freeze: [stem, stage1] (with init_from: the weights to fine-tune)");
      return;
    }
    for (const Node& item : spec.items()) {
      if (!item.is_scalar()) {
        diags_.add(item.mark(), "model.freeze",
                   "expected the name of a layer or block, found " + config::describe(item));
        continue;
      }
      const std::string& name = item.text();
      const std::vector<int> named = nodes_named(name);
      bool has_params = false;
      for (int n : named) {
        for (int p : graph_.nodes[n].params) {
          if (!graph_.params[p].trainable) continue;
          graph_.params[p].trainable = false;
          graph_.params[p].frozen = true;
          has_params = true;
        }
      }
      if (named.empty()) {
        unknown_name(item.mark(), "model.freeze", name);
      } else if (!has_params) {
        diags_.add(item.mark(), "model.freeze",
                   "'" + name +
                       "' has no trainable parameters to freeze (or another entry froze "
                       "them already)",
                   "name layers with weights (linear, conv2d, batchnorm, layernorm) or blocks");
      }
    }
    const bool any_trainable = std::any_of(graph_.params.begin(), graph_.params.end(),
                                           [](const Param& p) { return p.trainable; });
    if (!any_trainable)
      diags_.add(spec.mark(), "model.freeze", "every parameter is frozen: nothing would train",
                 "leave at least one layer out of model.freeze (usually the last)");
  }

  // `lr_scale: {name: factor, ...}`: the parameters of these layers or block
  // instances train with the learning rate times `factor` (a PyTorch
  // parameter group with its own lr, the schedule applied to it alike).
  // Where names nest (a block and a layer in it), the longer one decides.
  void mark_lr_scale(const Node& spec) {
    if (!spec.is_map()) {
      diags_.add(spec.mark(), "model.lr_scale",
                 "expected a map of layer or block name to learning-rate factor",
                 "e.g. lr_scale: {stem: 0.1, stage1: 0.1}");
      return;
    }
    std::vector<std::size_t> decided_by(graph_.params.size(), 0);  // the deciding name's length
    for (std::size_t e = 0; e < spec.size(); ++e) {
      const std::string& name = spec.key_at(e);
      const std::string key = "model.lr_scale." + name;
      const Node& value = spec.value_at(e);
      const std::optional<double> factor = config::as_number(value);
      if (factor && *factor > 0 && !(*factor >= kFloat32Smallest && *factor <= kFloat32Largest)) {
        // The optimizer multiplies in float32: 0 or infinity otherwise.
        diags_.add(value.mark(), key,
                   "expected a factor from " + config::format_number(kFloat32Smallest) + " to " +
                       config::format_number(kFloat32Largest) + ", found " +
                       config::describe(value),
                   "the optimizer multiplies the rate by the factor in float32: outside the "
                   "range optimizer.lr takes, the layer's rate would come out 0 or infinite");
        continue;
      }
      if (!factor || !(*factor > 0)) {
        // A map: a name with a dot written as a path (model.lr_scale.stage1.block2=0.3).
        const std::string dotted =
            value.is_map() && value.size() == 1 && value.value_at(0).is_scalar()
                ? "{" + name + "." + value.key_at(0) + ": " + value.value_at(0).text() + "}"
                : "";
        diags_.add(value.mark(), key, "expected a number > 0, found " + config::describe(value),
                   !dotted.empty() ? "a name with a dot in it is one key: lr_scale: " + dotted +
                                         " (on the command line, model.lr_scale='" + dotted + "')"
                   : factor ? "to keep a layer as it is, list it in model.freeze"
                            : "e.g. " + name + ": 0.1 (its learning rate x 0.1)");
        continue;
      }
      const std::vector<int> named = nodes_named(name);
      bool trainable = false;
      for (int n : named) {
        for (int p : graph_.nodes[n].params) {
          Param& param = graph_.params[p];
          if (!param.trainable) continue;
          trainable = true;
          if (decided_by[p] > name.size()) continue;  // a longer name decides
          param.lr_scale = *factor;
          decided_by[p] = name.size();
        }
      }
      if (named.empty()) {
        unknown_name(spec.key_mark_at(e), key, name);
      } else if (!trainable) {
        diags_.add(spec.key_mark_at(e), key,
                   "'" + name + "' has no trainable parameters (none, or frozen by model.freeze)",
                   "name layers with weights (linear, conv2d, batchnorm, layernorm) or blocks");
      }
    }
  }

  std::vector<std::string> top_names_;
  bool too_many_layers_ = false;      // reported once
  std::set<std::string> node_names_;  // every node added, by its full name
  const Node& model_;
  const ModelInput& input_;
  Diagnostics& diags_;
  const Node* blocks_ = nullptr;
  bool blocks_expanded_ = false;  // a block instance was expanded
  Graph graph_;
};

}  // namespace

// `model.loss` as a map {type: <loss>, ...}: as written, from the `loss: mse`
// shorthand, or the default loss.
config::Node loss_spec(const config::Node& model) {
  const config::Node* loss = model.find("loss");
  if (loss && !loss->is_scalar()) return *loss;
  config::Node spec = config::Node::map(loss ? loss->mark() : model.mark());
  spec.set("type", loss ? *loss : config::Node::scalar(config::kDefaultLoss, model.mark()));
  return spec;
}

Graph build_graph(const config::Node& model, const ModelInput& input,
                  config::Diagnostics& diagnostics) {
  return Builder(model, input, diagnostics).build();
}

void check_model_fields(const config::Node& model, config::Diagnostics& diagnostics) {
  if (!model.is_map()) return;
  check_model_keys(model, diagnostics);
  const config::Node spec = loss_spec(model);
  if (const OpDef* loss = find_loss_op(spec, diagnostics))
    config::read_fields(spec, loss->attrs, "model.loss", diagnostics, {"type"});
  const config::Node* blocks = model.find("blocks");
  const auto check_list = [&](const config::Node* layers, const std::string& path) {
    if (!layers || !layers->is_sequence()) return;
    for (std::size_t i = 0; i < layers->items().size(); ++i) {
      const config::Node& layer = layers->items()[i];
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      const config::Node* block = layer.is_map() ? layer.find("block") : nullptr;
      const config::Node* definition =
          block && blocks && blocks->is_map() ? blocks->find(block->text()) : nullptr;
      if (definition) check_instance_keys(layer, *definition, item_path, diagnostics);
      std::vector<const config::Node*>
          parameters;  // a block's $references: values known per instance
      substitute(layer, {}, &parameters);
      if (parameters.empty()) check_layer_fields(layer, item_path, diagnostics);
    }
  };
  check_list(model.find("layers"), "model.layers");
  if (const config::Node* blocks = model.find("blocks"); blocks && blocks->is_map())
    for (std::size_t i = 0; i < blocks->size(); ++i)
      if (const config::Node& block = blocks->value_at(i); block.is_map())
        check_list(block.find("layers"), "model.blocks." + blocks->key_at(i) + ".layers");
}

std::int64_t Graph::parameter_count(bool trainable_only) const {
  std::int64_t total = 0;
  for (const auto& p : params)
    if (p.trainable || !trainable_only) total += numel(p.shape);
  return total;
}

std::int64_t Graph::frozen_parameter_count() const {
  std::int64_t total = 0;
  for (const auto& p : params)
    if (p.frozen) total += numel(p.shape);
  return total;
}

}  // namespace trainer::graph
