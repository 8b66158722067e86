// Registry-driven validation of the fixed sections, then the special keys
// (model, data items, sweep) and the cross-field rules.
#include "runner/config/bind.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "ops/op.h"
#include "runner/config/compose.h"
#include "runner/config/data_items.h"
#include "runner/config/emit.h"
#include "runner/config/fields.h"
#include "runner/config/model_blocks.h"
#include "runner/config/registry.h"
#include "runner/config/scalar.h"
#include "runner/config/unused_layers.h"

namespace trainer::config {
namespace {

std::vector<std::string> special_names(const SectionDef& section) {
  std::vector<std::string> out = child_sections(section.path);
  for (const auto& k : section.special_keys) out.push_back(k.name);
  return out;
}

// Validates one section map (null: absent) and its sub-sections, binding values
// and filling defaults in place.
void bind_section(const SectionDef& section, Node& node, Config& config, Diagnostics& diags) {
  if (node.is_null()) {
    const Mark mark = node.mark();
    node = Node::map(mark);
  }
  Node checked = node;
  std::vector<std::function<void(Config&)>> keyword_binds;
  for (const auto& field : section.fields) {
    if (field.keyword.empty()) continue;
    const Node* value = node.find(field.spec.name);
    if (!value || !value->is_scalar()) continue;
    if (value->text() == field.keyword) {
      checked.erase(field.spec.name);
      keyword_binds.push_back(field.bind_keyword);
      continue;
    }
    // A value that is neither: the error says the word is accepted too.
    const std::string key = join_key(section.path, field.spec.name);
    Diagnostics own;
    FieldValue parsed;
    if (parse_field(*value, field.spec, key, own, parsed)) continue;
    const std::string near = nearest(value->text(), {field.keyword});
    for (Diagnostic d : own.list()) {
      if (d.message.rfind("expected ", 0) == 0)
        d.message = "expected " + field.keyword + " or " + d.message.substr(9);
      if (d.suggestion.empty() && !near.empty()) d.suggestion = "did you mean '" + near + "'?";
      diags.add(std::move(d));
    }
    checked.erase(field.spec.name);
  }
  // A key of another section ("lr" at the top level) is pointed there.
  const auto key_elsewhere = [&section](const std::string& key) {
    const std::string full = config_key_named(key);
    return full == join_key(section.path, key) ? std::string() : full;
  };
  const Attrs attrs = read_fields(checked, field_specs(section), section.path, diags,
                                  special_names(section), key_elsewhere);
  for (const auto& field : section.fields)
    if (attrs.has(field.spec.name)) field.bind(config, attrs.values().at(field.spec.name));
  for (const auto& bind : keyword_binds) bind(config);
  if (!node.is_map()) return;  // reported by read_fields
  fill_defaults(node, field_specs(section));

  for (const auto& child : child_sections(section.path)) {
    const SectionDef* def = find_section(section.path.empty() ? child : section.path + "." + child);
    Node* child_node = node.find(child);
    if (!child_node)
      child_node = &node.set(child, Node::map({kDefaultFile, 0, 0}), {kDefaultFile, 0, 0});
    bind_section(*def, *child_node, config, diags);
  }
}

// The defaulted attributes of each `{type: <op>, ...}` item of a layer list
// (the top level's or a block's), as a section's fields are filled, so that
// the resolved config shows the values the graph builder uses. Block
// instances and unknown types are left to the builder, which reports them.
void fill_layer_defaults(Node* layers) {
  if (!layers || !layers->is_sequence()) return;
  for (Node& layer : layers->items()) {
    if (!layer.is_map() || layer.find("block")) continue;
    const Node* type = layer.find("type");
    const OpDef* op = type && type->is_scalar() ? op_registry().find(type->text()) : nullptr;
    if (op && !op->is_loss) fill_defaults(layer, op->attrs);
  }
}

// The loss the run uses: kDefaultLoss when none is given, with its defaulted
// attributes (a loss given by its name alone becomes {type: name}). A loss
// that was not written carries the model's mark: the builder reports a
// problem with it there, as before.
void fill_loss_default(Node& model) {
  expand_loss_shorthand(model);
  Node* loss = model.find("loss");
  if (!loss) {
    Node filled = Node::map(model.mark());
    filled.set("type", Node::scalar(kDefaultLoss, model.mark()), model.mark());
    loss = &model.set("loss", std::move(filled), {kDefaultFile, 0, 0});
  } else if (loss->is_map() && !loss->find("type")) {
    // Settings of the default loss without its type (model.loss.label_smoothing=0.1).
    loss->set("type", Node::scalar(kDefaultLoss, {kDefaultFile, 0, 0}), {kDefaultFile, 0, 0});
  }
  const Node* type = loss->is_map() ? loss->find("type") : nullptr;
  const OpDef* op = type && type->is_scalar() ? op_registry().find(type->text()) : nullptr;
  if (op && op->is_loss) fill_defaults(*loss, op->attrs);
}

void fill_model_defaults(Node& model) {
  fill_layer_defaults(model.find("layers"));
  if (Node* blocks = model.find("blocks"); blocks && blocks->is_map())
    for (std::size_t i = 0; i < blocks->size(); ++i)
      if (Node& block = blocks->value_at(i); block.is_map())
        fill_layer_defaults(block.find("layers"));
  fill_loss_default(model);
}

void bind_model(Node& root, Config& config, Diagnostics& diags) {
  Node* model = root.find("model");
  if (!model) {
    diags.add(root.mark(), "model", "missing required section 'model' (a map with `layers:`)",
              "add one, e.g. model: {layers: [{type: flatten}, {type: linear, out_features: 10}]}");
    return;
  }
  if (!model->is_map()) {
    diags.add(model->mark(), "model", "expected a map with `layers:`, found " + describe(*model));
    return;
  }
  // The model's plain settings are typed fields like any other; the rest of
  // the section (layers, blocks, loss, recompute) is the graph builder's.
  static const std::vector<FieldSpec> plain = {
      field("init_from", FieldType::string, "A .safetensors file to start from"),
      field("init_strict", FieldType::boolean, "Every init_from tensor must match").def("true"),
  };
  for (const FieldSpec& spec : plain)
    if (const Node* value = model->find(spec.name))
      parse_field(*value, spec, "model." + spec.name, diags);
  const Node* layers = model->find("layers");
  if (!layers)
    diags.add(model->mark(), "model.layers", "missing required key 'layers' (a list of layers)");
  else if (!layers->is_sequence() || layers->items().empty())
    diags.add(layers->mark(), "model.layers",
              "expected a non-empty list of layers, found " + describe(*layers));
  check_model_blocks(*model, config, diags);
  warn_unused_layers(*model, config);
  fill_model_defaults(*model);
  // Absolute, as data paths are: a run's config.yaml (in another folder than
  // the file that named it) names the same file.
  if (Node* from = model->find("init_from"); from && from->is_scalar() && !from->text().empty())
    *from = Node::scalar(resolve_path(from->text(), from->mark().file), from->mark(), true);
  config.model.node = *model;
}

// Where a key missing from `map` is reported: the map, or the config file's
// top level when the file does not write the map (a section filled in with
// its defaults, whose mark names no file).
Mark missing_key_mark(const Node& map, const Node& root) {
  return map.mark().is_default() ? root.mark() : map.mark();
}

// How to add the training source, to the data section or with one.
std::string add_train_source(bool data_written) {
  const std::string source = "{type: idx, images: train-images.gz, labels: train-labels.gz}";
  return data_written ? "add one, e.g. train: " + source
                      : "add a data section with one, e.g. data: {train: " + source + "}";
}

void bind_data_items(Node& root, Config& config, Diagnostics& diags) {
  Node* data = root.find("data");
  if (!data || !data->is_map()) return;  // reported by the data section itself
  if (Node* train = data->find("train"))
    config.data.train = read_source_item(*train, "data.train", diags);
  else
    diags.add(missing_key_mark(*data, root), "data.train",
              "missing required key 'train' (the training source {type: <source>, ...})",
              add_train_source(!data->mark().is_default()));
  // `eval:` with no value: no evaluation source, also where a base config or
  // the file names one (the resolved config then has none).
  if (Node* eval = data->find("eval"); eval && eval->is_null())
    data->erase("eval");
  else if (eval)
    config.data.eval = read_source_item(*eval, "data.eval", diags);

  if (Node* transforms = data->find("transforms"))
    config.data.transforms = read_transform_list(*transforms, "data.transforms", diags);
  // Derived: the entries of `transforms` that act on eval samples.
  std::vector<TypedItem> derived;
  Node list = Node::sequence({kDerivedFile, 0, 0});
  const Node* transforms = data->find("transforms");
  for (std::size_t i = 0; i < config.data.transforms.size(); ++i) {
    const TypedItem& item = config.data.transforms[i];
    if (!acts_on_eval_samples(item.type)) continue;
    derived.push_back(item);
    for (const auto& node : transforms->items())
      if (node.mark() == item.mark) list.push_back(node);
  }
  // One derived before (a tree bound again after overrides, or a list that
  // mark_derived_values found to be the derived one) is derived again.
  if (Node* given = data->find("eval_transforms"); given && !given->mark().is_derived()) {
    config.data.eval_transforms = read_transform_list(*given, "data.eval_transforms", diags);
    for (std::size_t i = 0; i < config.data.eval_transforms.size(); ++i) {
      const TypedItem& item = config.data.eval_transforms[i];
      if (acts_on_eval_samples(item.type)) continue;
      config.warnings.push_back(
          {item.mark, "data.eval_transforms[" + std::to_string(i) + "]",
           item.type + " is random and acts only on training batches: here it does nothing",
           "remove it (in data.transforms it augments the training batches)"});
    }
    return;
  }
  config.data.eval_transforms = std::move(derived);
  data->erase("eval_transforms");  // set() would keep a given key's mark
  data->set("eval_transforms", std::move(list), {kDerivedFile, 0, 0});
}

// The value at a dotted path of the tree ("optimizer.type"), or null.
const Node* find_dotted(const Node& root, const std::string& path) {
  const Node* node = &root;
  std::size_t start = 0;
  while (node && start <= path.size()) {
    const std::size_t dot = std::min(path.find('.', start), path.size());
    node = node->find(path.substr(start, dot - start));
    start = dot + 1;
  }
  return node;
}

Mark mark_of(const Node& root, const std::string& section, const std::string& key) {
  if (const Node* n = find_dotted(root, section + "." + key)) return n->mark();
  if (const Node* s = root.find(section)) return s->mark();
  return root.mark();
}

bool folder_name_char(char ch) {
  return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
}

// `name` with every other character made '_', cut to `max_bytes`, without
// leading or trailing '.' and '_'; "experiment" when nothing is left.
std::string suggested_name(const std::string& name, std::size_t max_bytes) {
  std::string fixed;
  for (char ch : name) fixed += folder_name_char(ch) ? ch : '_';
  const std::size_t first = fixed.find_first_not_of("._");
  if (first == std::string::npos) return "experiment";
  fixed = fixed.substr(first, max_bytes);
  return fixed.substr(0, fixed.find_last_not_of("._") + 1);
}

// `name` is one folder under output.dir: a single path component.
void check_name(const Node& root, const Config& c, Diagnostics& diags) {
  const Node* name = root.find("name");
  if (!name || name->mark().is_default() || classify(*name) != ScalarKind::string) return;
  const std::string where = ": run directories are <output.dir>/<name>/<timestamp>";
  if (c.name.size() > kMaxNameBytes) {
    diags.add(name->mark(), "name",
              "expected a folder name of at most " + std::to_string(kMaxNameBytes) +
                  " bytes, found one of " + std::to_string(c.name.size()) + where,
              "use a shorter name, e.g. name: " + suggested_name(c.name, 40));
    return;
  }
  const bool plain_chars =
      !c.name.empty() && std::all_of(c.name.begin(), c.name.end(), folder_name_char);
  if (plain_chars && c.name != "." && c.name != "..") return;
  diags.add(name->mark(), "name",
            "expected a single folder name (letters, digits, '-', '_', '.'; not '.' or '..'), "
            "found " +
                describe(*name) + where,
            "use e.g. name: " + suggested_name(c.name, kMaxNameBytes));
}

// output.dir is made with the run directories below it: each of its folder
// names within the 255 bytes file systems allow, the whole within PATH_MAX
// with room for <name>/<timestamp>/checkpoints/... below it.
void check_output_dir(const Node& root, const Config& c, Diagnostics& diags) {
  constexpr std::size_t kMaxComponentBytes = 255;
  constexpr std::size_t kMaxDirBytes = 4096 - 512;
  const Mark at = mark_of(root, "output", "dir");
  if (c.output.dir.size() > kMaxDirBytes) {
    diags.add(at, "output.dir",
              "the path is " + std::to_string(c.output.dir.size()) + " bytes, more than the " +
                  std::to_string(kMaxDirBytes) +
                  " that leave room for the run directories below it",
              "use a shorter path");
    return;
  }
  for (const auto& part : std::filesystem::path(c.output.dir)) {
    if (part.native().size() <= kMaxComponentBytes) continue;
    diags.add(at, "output.dir",
              "its folder name '" + part.native().substr(0, 40) + "...' is " +
                  std::to_string(part.native().size()) + " bytes, more than the " +
                  std::to_string(kMaxComponentBytes) + " a file system allows",
              "use shorter folder names");
    return;
  }
}

// A batch of synthetic samples must be countable: batch x sample elements
// (and the bytes they take) within 64-bit arithmetic.
void check_batch_elements(const Node& root, const Config& c, Diagnostics& diags) {
  constexpr std::int64_t kMaxBatchElements = std::int64_t{1} << 60;
  for (const auto* item : {&c.data.train, &c.data.eval}) {
    if (!*item) continue;
    const auto sample = declared_sample_elements(**item);
    if (!sample || *sample > kMaxSampleElements) continue;  // reported at the shape
    if (c.train.batch_size <= kMaxBatchElements / *sample) continue;
    diags.add(mark_of(root, "train", "batch_size"), "train.batch_size",
              "a batch of " + std::to_string(c.train.batch_size) + " samples of " +
                  std::to_string(*sample) + " elements each holds more than 2^60 elements, " +
                  "the most a batch may hold",
              "use a smaller batch_size");
    return;
  }
}

void check_cross_fields(const Node& root, const Config& c, Diagnostics& diags) {
  check_name(root, c, diags);
  check_output_dir(root, c, diags);
  check_batch_elements(root, c, diags);
  if (c.train.epochs == 0 && c.train.max_steps == 0)
    diags.add(mark_of(root, "train", "epochs"), "train.epochs",
              "nothing to train: set train.epochs > 0 or train.max_steps > 0");
  // Where `key` of the schedule is written, else where its type is.
  const auto schedule_mark = [&](const std::string& key) {
    const Mark written = mark_of(root, "schedule", key);
    return written.is_default() ? mark_of(root, "schedule", "type") : written;
  };
  if (c.schedule.type == "range_test" && !(c.schedule.max_lr > c.optimizer.lr)) {
    diags.add(schedule_mark("max_lr"), "schedule.max_lr",
              "a range_test schedule grows the rate from optimizer.lr (" +
                  format_number(c.optimizer.lr) + ") to max_lr, which must be larger",
              "set schedule.max_lr above optimizer.lr: a range test usually spans several decades, "
              "e.g. optimizer.lr: 1e-7 and max_lr: 10 (as `trainer lr-find` does)");
  }
  if (c.schedule.type == "multistep" && c.schedule.milestones.empty())
    diags.add(schedule_mark("milestones"), "schedule.milestones",
              "a multistep schedule needs milestones (a list of increasing steps)",
              "e.g. schedule: {type: multistep, milestones: [3000, 6000]}, each a step at which "
              "the rate is multiplied by schedule.gamma");
  if (!std::is_sorted(c.schedule.milestones.begin(), c.schedule.milestones.end()) ||
      std::adjacent_find(c.schedule.milestones.begin(), c.schedule.milestones.end()) !=
          c.schedule.milestones.end())
    diags.add(mark_of(root, "schedule", "milestones"), "schedule.milestones",
              "milestones must be strictly increasing");
  if (c.data.split > 0 && c.data.eval)
    diags.add(mark_of(root, "data", "split"), "data.split",
              "it holds part of data.train out for evaluation only when there is no "
              "data.eval; data.eval is set, so the split would be ignored",
              "remove data.split, or data.eval");
  // The dynamic scale starts at init_scale and never goes below min_scale.
  const auto& scale = c.precision.loss_scale;
  if (c.precision.mode == "fp16" && scale.static_scale == 0 && scale.min_scale > scale.init_scale) {
    const Mark written = mark_of(root, "precision.loss_scale", "min_scale");
    const bool min_written = !written.is_default();
    diags.add(min_written ? written : mark_of(root, "precision.loss_scale", "init_scale"),
              min_written ? "precision.loss_scale.min_scale" : "precision.loss_scale.init_scale",
              "min_scale " + format_number(scale.min_scale) + " is above init_scale " +
                  format_number(scale.init_scale) +
                  ": the scale would start below its floor, and its first overflow would raise it",
              min_written ? "set min_scale to at most init_scale"
                          : "set init_scale to at least min_scale (" +
                                format_number(scale.min_scale) + ", its default)");
  }
  const std::set<std::int64_t> unique(c.devices.gpus.begin(), c.devices.gpus.end());
  if (unique.size() != c.devices.gpus.size())
    diags.add(mark_of(root, "devices", "gpus"), "devices.gpus", "a GPU index is listed twice");
  if (!c.devices.gpus.empty() && c.devices.world_size > 1)
    diags.add(mark_of(root, "devices", "world_size"), "devices.world_size",
              "world_size counts CPU ranks; with GPUs there is one rank per listed GPU");
}

// Fields given a value of their own while the field they depend on
// (FieldSpec::applies_when, applies_while_positive) rules them out: accepted,
// and reported as warnings.
void collect_inert_settings(const Node& root, Config& config) {
  for (const SectionDef& section : config_sections()) {
    for (const ConfigField& field : section.fields) {
      const FieldSpec& spec = field.spec;
      if (spec.applies_when.empty() && spec.applies_while_positive.empty()) continue;
      const std::string key = join_key(section.path, spec.name);
      const Node* given = find_dotted(root, key);
      if (!given || given->mark().is_default()) continue;
      Diagnostics ignored;
      FieldValue value, fallback;
      if (!parse_field(*given, spec, key, ignored, value) ||
          !parse_field(default_node(spec), spec, key, ignored, fallback) || value == fallback)
        continue;
      // Each condition the setting fails: the first is the message, and the
      // suggestion mends all of them (nesterov under adam with momentum 0).
      std::vector<std::pair<std::string, std::string>> failed;  // {why, what to set}
      if (!spec.applies_when.empty()) {
        const std::string control = spec.applies_when.find('.') == std::string::npos
                                        ? join_key(section.path, spec.applies_when)
                                        : spec.applies_when;
        const Node* setting = find_dotted(root, control);
        const auto& values = spec.applies_values;
        if (setting && setting->is_scalar() &&
            std::find(values.begin(), values.end(), setting->text()) == values.end()) {
          std::string listed;
          for (const auto& v : values) listed += (listed.empty() ? "" : " or ") + v;
          failed.emplace_back(control + ": " + setting->text() + " (it applies to " + listed + ")",
                              control + ": " + values.front());
        }
      }
      if (!spec.applies_while_positive.empty()) {
        const std::string control = join_key(section.path, spec.applies_while_positive);
        const Node* setting = find_dotted(root, control);
        if (setting && setting->is_scalar() && as_number(*setting) == 0.0)
          failed.emplace_back(
              control + ": " + setting->text() + " (it acts only when " + control + " is above 0)",
              control + " above 0");
      }
      if (failed.empty()) continue;
      std::string mend;
      for (const auto& [why, set] : failed) mend += (mend.empty() ? "" : " and ") + set;
      config.warnings.push_back({given->mark(), key, "has no effect with " + failed.front().first,
                                 "remove it, or set " + mend});
    }
  }
  // keep_best by a train.* metric ranks the checkpoints whose step ends a
  // logging window: every_steps off that beat gives it none to rank.
  const auto& checkpoint = config.checkpoint;
  if (checkpoint.keep_best > 0 && checkpoint.metric.rfind("train.", 0) == 0 &&
      checkpoint.every_steps > 0 && config.train.log_every > 0 &&
      checkpoint.every_steps % config.train.log_every != 0) {
    const Node* log_every = find_dotted(root, "train.log_every");
    const bool defaulted = !log_every || log_every->mark().is_default();
    config.warnings.push_back(
        {mark_of(root, "checkpoint", "every_steps"), "checkpoint.every_steps",
         std::to_string(checkpoint.every_steps) + " is not a multiple of train.log_every (" +
             std::to_string(config.train.log_every) + (defaulted ? ", its default" : "") +
             "): its checkpoints at other steps record no " + checkpoint.metric +
             ", so keep_best cannot rank them",
         "make checkpoint.every_steps a multiple of train.log_every"});
  }
  // Workers beyond the batches the loader's ring builds at once would wait:
  // data.prefetch ahead of the step, and the one the step hands back.
  const std::int64_t building = config.data.prefetch + 1;
  if (config.data.workers > building) {
    const Node* prefetch = find_dotted(root, "data.prefetch");
    const bool prefetch_given = prefetch && !prefetch->mark().is_default();
    const std::string workers = std::to_string(config.data.workers);
    const std::string batches = std::to_string(config.data.prefetch);
    const std::string setting =
        prefetch_given ? batches + " with data.workers: " + workers
                       : workers + " with data.prefetch: " + batches + " (its default)";
    config.warnings.push_back(
        {mark_of(root, "data", prefetch_given ? "prefetch" : "workers"),
         prefetch_given ? "data.prefetch" : "data.workers",
         setting + ": no more than " + std::to_string(building) +
             " batches are built at once (data.prefetch ahead of the step, and the one it hands "
             "back; fewer when an epoch has fewer batches), so " +
             std::to_string(config.data.workers - building) + " of the workers would only wait",
         "set data.prefetch: " + std::to_string(config.data.workers - 1) +
             " (each batch it adds is held in memory), or data.workers: " +
             std::to_string(building)});
  }
  // Settings of the evaluation, with no evaluation set.
  if (config.data.eval || config.data.split > 0) return;
  for (const char* key : {"train.eval_every", "train.eval_batches", "data.eval_transforms"}) {
    const Node* given = find_dotted(root, key);
    // 0, as a resolved config writes the default: nothing to say.
    if (!given || given->mark().is_default() || (given->is_scalar() && as_number(*given) == 0.0))
      continue;
    config.warnings.push_back({given->mark(), key,
                               "has no effect: there is no evaluation set (no data.eval, and "
                               "data.split is 0)",
                               "add data.eval (or data.split: 0.1 to hold out part of "
                               "data.train), or remove it"});
  }
}

}  // namespace

void mark_derived_values(Node& root) {
  Node* data = root.find("data");
  Node* given = data && data->is_map() ? data->find("eval_transforms") : nullptr;
  const Node* transforms = data ? data->find("transforms") : nullptr;
  if (!given || given->mark().is_derived() || !transforms || !transforms->is_sequence()) return;
  Node derived = Node::sequence(given->mark());
  for (const Node& item : transforms->items()) {
    const Node* type = item.is_map() ? item.find("type") : nullptr;
    if (type && type->is_scalar() && acts_on_eval_samples(type->text())) derived.push_back(item);
  }
  if (to_yaml(*given) != to_yaml(derived)) return;
  Node list = *given;
  list.set_mark({kDerivedFile, 0, 0});
  data->erase("eval_transforms");
  data->set("eval_transforms", std::move(list), {kDerivedFile, 0, 0});
}

Config bind_config(Node& root, Diagnostics& diags) {
  Config config;
  if (const Node* devices = root.find("devices"); devices && devices->is_scalar()) {
    diags.add(devices->mark(), "devices",
              "expected 'cpu' or a list of GPU indices like [0, 1], found " + describe(*devices));
    root.erase("devices");
  }
  // devices: [cpu] reads naturally, but a list holds GPU indices.
  if (Node* devices = root.find("devices"); devices && devices->is_map()) {
    if (const Node* gpus = devices->find("gpus"); gpus && gpus->is_sequence()) {
      for (const Node& item : gpus->items())
        if (item.is_scalar() && item.text() == "cpu") {
          diags.add(item.mark(), "devices",
                    "'cpu' in a list of GPU indices: for the CPU write devices: cpu (no "
                    "brackets); for GPUs, their indices: devices: [0, 1]");
          root.erase("devices");
          break;
        }
    }
  }
  bind_section(*find_section(""), root, config, diags);  // recurses into every section
  bind_model(root, config, diags);
  bind_data_items(root, config, diags);
  if (const Node* sweep = root.find("sweep")) config.sweep = *sweep;
  check_cross_fields(root, config, diags);
  collect_inert_settings(root, config);
  return config;
}

}  // namespace trainer::config
