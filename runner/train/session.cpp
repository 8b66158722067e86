// Preparing a session: data sources, pipelines, batch plan and the graph. Also
// registers the model check that `trainer validate` runs.
#include "runner/train/session.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "data/class_names.h"
#include "data/loader.h"
#include "data/registry.h"
#include "data/sources.h"
#include "data/split.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/layer_renames.h"
#include "runner/checkpoint/weights.h"
#include "runner/config/data_items.h"
#include "runner/config/fields.h"
#include "runner/config/overrides.h"
#include "runner/config/scalar.h"
#include "runner/config/validate_hooks.h"
#include "runner/graph/builder.h"
#include "runner/graph/formats.h"
#include "runner/graph/fusion.h"
#include "runner/graph/precision.h"
#include "runner/train/batch_fit.h"
#include "runner/train/devices.h"
#include "runner/train/memory_report.h"
#include "runner/train/session_checks.h"

namespace trainer::train {
namespace {

std::vector<data::TransformSpec> specs_of(const std::vector<config::TypedItem>& items) {
  std::vector<data::TransformSpec> out;
  for (const auto& item : items) out.emplace_back(item.type, item.attrs);
  return out;
}

// The eval transforms, each `normalize` without mean/std given the statistics
// the training pipeline computed for its normalize of the same rank: they are
// the training set's, computed once, whatever the eval list crops around them.
std::vector<data::TransformSpec> eval_specs(const std::vector<config::TypedItem>& items,
                                            const data::Pipeline& train_pipe) {
  std::vector<const Attrs*> computed;
  for (const auto& [type, attrs] : train_pipe.resolved())
    if (type == "normalize") computed.push_back(&attrs);
  std::vector<data::TransformSpec> out = specs_of(items);
  std::size_t rank = 0;
  for (auto& [type, attrs] : out) {
    if (type != "normalize") continue;
    if (!attrs.has("mean") && !attrs.has("std") && rank < computed.size()) attrs = *computed[rank];
    ++rank;
  }
  return out;
}

// The key of `def`'s path fields whose file `message` names: "data.train.images"
// (or "data.train.files[1]"), with its mark. Empty when it names none, or
// files of several keys: the error is then about the source as a whole.
std::pair<std::string, config::Mark> key_of_named_file(const config::Config& config,
                                                       const data::SourceDef& def,
                                                       const config::TypedItem& item,
                                                       const std::string& key,
                                                       const std::string& message) {
  struct Named {
    std::string key, path;
  };
  std::vector<Named> named;
  for (const auto& field : def.path_fields) {
    if (!item.attrs.has(field)) continue;
    const FieldValue& value = item.attrs.values().at(field);
    if (const auto* one = std::get_if<std::string>(&value)) {
      if (!one->empty() && message.find(*one) != std::string::npos)
        named.push_back({key + "." + field, *one});
    } else if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
      for (std::size_t i = 0; i < list->size(); ++i)
        if (!(*list)[i].empty() && message.find((*list)[i]) != std::string::npos)
          named.push_back({key + "." + field + "[" + std::to_string(i) + "]", (*list)[i]});
    }
  }
  // A path found only inside a longer named one ("a.csv" in "a.csv.bak") is not named.
  std::erase_if(named, [&](const Named& n) {
    return std::any_of(named.begin(), named.end(), [&](const Named& other) {
      return other.path.size() > n.path.size() && other.path.find(n.path) != std::string::npos;
    });
  });
  if (named.empty()) return {};
  for (const Named& n : named)
    if (n.key != named.front().key) return {};
  return {named.front().key, mark_of(config, named.front().key)};
}

// A source's error about one of its settings, as a config error at that key
// (at the source when the setting is not written), the message after `prefix`.
[[noreturn]] void throw_at_field(const config::Config& config, const std::string& key,
                                 const data::SourceFieldError& e, const std::string& prefix) {
  const std::string field_key = key + "." + e.field();
  config::Diagnostics d;
  const std::string nearest = config::nearest(e.given(), e.choices());
  d.add(written_mark_of(config, field_key), field_key, prefix + e.what(),
        nearest.empty() ? std::string() : "did you mean '" + nearest + "'?");
  throw config::ConfigError(d);
}

// For a data file that does not exist: the package that holds the shipped
// configs' dataset, or, for a path that resolved into the folder it was
// read from (most likely written relative), which folder that is; "" otherwise.
std::string missing_file_hint(const std::string& message, const config::Mark& written_at) {
  if (message.find("does not exist") == std::string::npos) return {};
  if (message.find("/usr/share/datasets/fashion-mnist/") != std::string::npos)
    return "install the dataset: apt-get install dataset-fashion-mnist";
  if (written_at.is_default() || written_at.file.empty()) return {};
  const bool command_line = written_at.file == config::kCommandLine;
  std::error_code ec;
  const std::filesystem::path folder =
      std::filesystem::absolute(command_line ? std::filesystem::path(".")
                                             : std::filesystem::path(written_at.file).parent_path(),
                                ec);
  const std::string prefix = "'" + folder.lexically_normal().string();
  if (ec || message.find(prefix) == std::string::npos) return {};
  return command_line
             ? "a relative path on the command line is read from the working directory"
             : "a relative path is read from the folder of the file that writes it (" +
                   folder.lexically_normal().string() + "), not from the working directory";
}

// Opens the source `item` (the config's `key`, "data.train"). An error about
// the file of one of its keys points at that key's value; any other at the source.
std::shared_ptr<data::Dataset> open_source(const config::Config& config,
                                           const config::TypedItem& item, const std::string& key) {
  for (const auto& def : data::source_defs()) {
    if (def.name != item.type) continue;
    try {
      return def.open(item.attrs);
    } catch (const data::SourceFieldError& e) {
      throw_at_field(config, key, e, "cannot open the " + item.type + " source: ");
    } catch (const std::exception& e) {
      const std::string message =
          std::string("cannot open the ") + item.type + " source: " + e.what();
      auto [file_key, mark] = key_of_named_file(config, def, item, key, e.what());
      config::Diagnostics d;
      if (file_key.empty())
        d.add(item.mark, key, message);
      else
        d.add(mark, file_key, message, missing_file_hint(message, mark));
      throw config::ConfigError(d);
    }
  }
  config::Diagnostics d;
  d.add(item.mark, key + ".type", "unknown data source '" + item.type + "'");
  throw config::ConfigError(d);
}

// The most dimensions a sample may have: the batch is one of a tensor's.
// cuDNN's descriptors are 4-D, for the image layers alone.
constexpr std::size_t kMaxSampleRank = kMaxTensorRank - 1;

// Samples with more dimensions than that are refused at the source's `key`
// (data.train, data.eval), naming its files and the sample shape: the model
// could be built, but no backend could run it.
void check_sample_rank(const config::TypedItem& item, const std::string& key,
                       const data::Dataset& dataset) {
  const Shape shape = dataset.sample_shape();
  if (shape.size() <= kMaxSampleRank) return;
  config::Diagnostics d;
  d.add(item.mark, key,
        "the samples of " + dataset.describe() + " have shape " + to_string(shape) + ", " +
            std::to_string(shape.size()) + " dimensions, but a sample has at most " +
            std::to_string(kMaxSampleRank) + " (" + std::to_string(kMaxSampleRank + 1) +
            " with the batch: the most the backends' tensors have)",
        "save the samples with " + std::to_string(kMaxSampleRank) +
            " dimensions or fewer: drop extents of 1 (numpy: x.squeeze(axis)), or flatten each "
            "sample (numpy: x.reshape(len(x), -1))");
  throw config::ConfigError(d);
}

// Opens the source `item` (the config's `key`) and checks what every model
// needs of its samples.
std::shared_ptr<data::Dataset> open_checked_source(const config::Config& config,
                                                   const config::TypedItem& item,
                                                   const std::string& key) {
  std::shared_ptr<data::Dataset> dataset = open_source(config, item, key);
  check_sample_rank(item, key, *dataset);
  return dataset;
}

}  // namespace

config::Mark mark_of(const config::Config& config, const std::string& path) {
  const config::Node* node = &config.resolved;
  std::stringstream parts(path);
  std::string part;
  config::Mark mark = node->mark();
  while (node && std::getline(parts, part, '.')) {
    const auto bracket = part.find('[');
    node = node->find(part.substr(0, bracket));
    if (node && bracket != std::string::npos) {  // "files[1]": item 1 of the list
      const std::size_t index = std::stoul(part.substr(bracket + 1));
      node = node->is_sequence() && index < node->items().size() ? &node->items()[index] : nullptr;
    }
    if (!node) break;
    mark = node->mark();
  }
  if (mark.file.empty()) mark.file = config.source_file;
  return mark;
}

config::Mark written_mark_of(const config::Config& config, const std::string& key_path) {
  for (std::string path = key_path;;) {
    const config::Mark mark = mark_of(config, path);
    if (!mark.is_default()) return mark;
    const std::size_t dot = path.rfind('.');
    if (dot == std::string::npos) return {config.source_file, 1, 1};
    path.resize(dot);
  }
}

BatchPlan plan_batches(const config::Config& config, config::Diagnostics& diags) {
  const auto& t = config.train;
  BatchPlan b;
  b.global = t.batch_size;
  // CPU ranks: devices.world_size. GPUs: one rank per listed GPU, or more when
  // a launcher started the job on several nodes (each with the listed GPUs):
  // dist::rank_config puts the job's rank count into devices.world_size.
  const std::int64_t gpus =
      config.devices.cpu ? 0 : static_cast<std::int64_t>(config.devices.gpus.size());
  b.world = std::max<std::int64_t>({1, config.devices.world_size, gpus});
  const std::int64_t per_rank = b.global / b.world;
  if (b.global % b.world != 0) {
    // A default batch is reported where the ranks are written.
    const bool written = !mark_of(config, "train.batch_size").is_default();
    diags.add(written ? mark_of(config, "train.batch_size")
                      : written_mark_of(config, gpus > 1 ? "devices.gpus" : "devices.world_size"),
              "train.batch_size",
              std::string(written ? "the global batch " : "the default train.batch_size ") +
                  std::to_string(b.global) + " does not divide over " + std::to_string(b.world) +
                  " ranks",
              "set train.batch_size to a multiple of " + std::to_string(b.world));
    return b;
  }
  if (t.micro_batch_auto && t.accumulation > 0)
    diags.add(mark_of(config, "train.accumulation"), "train.accumulation",
              "micro_batch_size: auto chooses the accumulation itself",
              "remove train.accumulation, or set micro_batch_size to a number");

  if (t.micro_batch_size > 0 && t.accumulation > 0) {
    if (t.micro_batch_size * t.accumulation != per_rank)
      diags.add(mark_of(config, "train.micro_batch_size"), "train.micro_batch_size",
                "micro_batch_size " + std::to_string(t.micro_batch_size) + " x accumulation " +
                    std::to_string(t.accumulation) + " x world " + std::to_string(b.world) +
                    " must equal batch_size " + std::to_string(b.global),
                "set only one of micro_batch_size and accumulation; the other is derived");
    b.micro = t.micro_batch_size;
    b.accumulation = t.accumulation;
  } else if (t.micro_batch_size > 0) {
    if (per_rank % t.micro_batch_size != 0)
      diags.add(mark_of(config, "train.micro_batch_size"), "train.micro_batch_size",
                "micro_batch_size " + std::to_string(t.micro_batch_size) +
                    " does not divide the per-rank batch " + std::to_string(per_rank),
                "use a divisor of " + std::to_string(per_rank));
    b.micro = t.micro_batch_size;
    b.accumulation = std::max<std::int64_t>(1, per_rank / t.micro_batch_size);
  } else if (t.accumulation > 0) {
    if (per_rank % t.accumulation != 0)
      diags.add(mark_of(config, "train.accumulation"), "train.accumulation",
                "accumulation " + std::to_string(t.accumulation) +
                    " does not divide the per-rank batch " + std::to_string(per_rank),
                "use a divisor of " + std::to_string(per_rank));
    b.accumulation = t.accumulation;
    b.micro = std::max<std::int64_t>(1, per_rank / t.accumulation);
  } else {
    b.micro = per_rank;
    b.accumulation = 1;
  }
  return b;
}

namespace {

// Why the file at `path` cannot be read: "" when it can; ": no such file";
// the system's reason (": Permission denied"), also for a folder on the way;
// or ": not a file" (a FIFO, a device).
std::string why_unreadable(const std::filesystem::path& path) {
  std::error_code looked;
  const std::filesystem::file_status status = std::filesystem::status(path, looked);
  if (!std::filesystem::exists(status))
    return looked && looked != std::errc::no_such_file_or_directory ? ": " + looked.message()
                                                                    : ": no such file";
  if (!std::filesystem::is_regular_file(status)) return ": not a file";
  errno = 0;
  if (std::ifstream(path).good()) return "";
  const int error = errno;
  return error != 0 ? ": " + std::string(std::strerror(error)) : ": cannot open it";
}

}  // namespace

std::string init_from_path(const config::Config& config) {
  const config::Node& model = config.model.node;
  const config::Node* from = model.is_map() ? model.find("init_from") : nullptr;
  if (!from) return "";
  config::Diagnostics diags;
  if (!from->is_scalar() || from->text().empty()) {
    diags.add(from->mark(), "model.init_from", "expected a path to a .safetensors file");
    diags.throw_if_any();
  }
  // Absolute since the config was read (config::resolve_path).
  const std::filesystem::path path = from->text();
  const bool from_yaml = !from->mark().file.empty() && from->mark().file[0] != '<';
  const std::string yaml_folder =
      from_yaml ? std::filesystem::absolute(from->mark().file).parent_path().string() + "/" : "";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    // A run or a checkpoint folder, as other tools take them: the weights file in it.
    std::string weights;
    for (const char* inside : {"model.safetensors", "checkpoints/last/model.safetensors"})
      if (weights.empty() && std::filesystem::is_regular_file(path / inside, ec))
        weights = (path / inside).string();
    diags.add(from->mark(), "model.init_from",
              "'" + path.string() + "' is a folder; init_from takes a .safetensors file",
              weights.empty() ? "name the weights file, such as a run's "
                                "checkpoints/last/model.safetensors"
                              : "did you mean '" + weights + "'?");
  } else if (const std::string why = why_unreadable(path); !why.empty()) {
    // A checkpoint of another run that its retention pruned since: its
    // step folder gone from a checkpoints folder that is there.
    const std::filesystem::path step = path.parent_path();
    const bool pruned = step.filename().string().starts_with("step-") &&
                        step.parent_path().filename() == "checkpoints" &&
                        !std::filesystem::exists(step, ec) &&
                        std::filesystem::is_directory(step.parent_path(), ec);
    diags.add(from->mark(), "model.init_from", "cannot read '" + path.string() + "'" + why,
              from_yaml && path.string().starts_with(yaml_folder)
                  ? "a relative path is taken from the folder of the YAML file that names it"
              : pruned ? "a checkpoint of another run, which its checkpoint.keep_last / "
                         "keep_best may have pruned since; a run that started from it records "
                         "the file's SHA-256 in its manifest.json (init_from.sha256): put a file "
                         "with that checksum back there, or name another checkpoint's weights"
                       : "");
  }
  diags.throw_if_any();
  return path.string();
}

bool init_strict(const config::Config& config) {
  const config::Node& model = config.model.node;
  const config::Node* strict = model.is_map() ? model.find("init_strict") : nullptr;
  // Typed as a bool by the field checks: false, False or FALSE.
  return !strict || config::as_bool(*strict).value_or(true);
}

namespace {

// What to do when the file holds some of the model's tensors with their
// names and shapes in another type than float32 (F16, BF16: a half-precision
// export); "" when it holds none so.
std::string other_type_advice(const Session& s, const checkpoint::Safetensors& file) {
  std::size_t count = 0;
  std::string type;
  for (const auto& p : s.graph.params)
    if (const auto* t = file.find(p.name); t && t->shape == p.shape && t->dtype != "F32") {
      ++count;
      type = t->dtype;
    }
  if (count == 0) return "";
  return " (" + std::to_string(count) + " of the model's " + std::to_string(s.graph.params.size()) +
         " tensors are there with their names and shapes but stored as " + type +
         ": this reader loads F32 tensors; convert the file, e.g. with PyTorch: {name: "
         "t.float() for name, t in weights.items()})";
}

// What to do with a file that does not fit the model when its tensors are
// recognisably this model's, laid out or named another way: a checkpoint's
// state file, linear weights stored [in, out], names under a prefix
// (DataParallel's "module."), layers named otherwise (an nn.Sequential's "0",
// "2"); "" when none of these.
std::string fit_advice(const Session& s, const checkpoint::Safetensors& file) {
  if (file.metadata.count("trainer_state") > 0)
    return "this is a checkpoint's state file (optimizer state and the loop's): give the "
           "model.safetensors beside it";
  std::size_t transposed = 0;
  for (const auto& p : s.graph.params)
    if (const auto* t = file.find(p.name); t && p.shape.size() == 2 && t->shape != p.shape &&
                                           t->shape == Shape{p.shape[1], p.shape[0]})
      ++transposed;
  if (transposed > 0)
    return std::to_string(transposed) +
           " weight(s) are stored transposed, [in, out]: linear weights here are [out, in], as "
           "PyTorch's are; transpose them when writing the file (e.g. w.T.copy())";
  // One prefix before every name the model has (a wrapper's).
  std::string prefix;
  std::size_t prefixed = 0;
  for (const auto& p : s.graph.params)
    for (const auto& t : file.tensors) {
      if (t.name.size() <= p.name.size() || !t.name.ends_with("." + p.name)) continue;
      const std::string before = t.name.substr(0, t.name.size() - p.name.size());
      if (prefix.empty()) prefix = before;
      if (before == prefix) ++prefixed;
      break;
    }
  if (!prefix.empty() && prefixed == s.graph.params.size())
    return "every name in the file starts with '" + prefix +
           "' (a wrapper's, as DataParallel's 'module.'): write it without, e.g. "
           "{k.removeprefix('" +
           prefix + "'): v for k, v in weights.items()}";
  // Layers named otherwise (an nn.Sequential's "0", "2").
  std::vector<checkpoint::TensorShape> params;
  for (const auto& p : s.graph.params) params.push_back({p.name, p.shape});
  if (const auto found = checkpoint::layer_renames(params, file); !found.renames.empty())
    return checkpoint::layer_rename_advice(found);
  return "";
}

// model.init_strict: false loads the tensors that fit; one that loads none
// (the file of another model), or that leaves a frozen layer at its random
// initial weights, is a mistake.
void check_partial_init(const Session& s, const checkpoint::Safetensors& file,
                        const std::string& path, const config::Mark& mark,
                        config::Diagnostics& diags) {
  std::size_t loads = 0;
  std::vector<std::string> frozen_left;
  for (const auto& p : s.graph.params) {
    // No extra tensor of the file counts here ("\x01" prefixes no name).
    if (checkpoint::mismatches_of(file, {{p.name, p.shape}}, "\x01").empty())
      ++loads;
    else if (p.frozen)
      frozen_left.push_back(p.name);
  }
  const std::string stored_as = other_type_advice(s, file);
  const auto listed = [](const std::vector<std::string>& names) {
    std::string text;
    for (std::size_t i = 0; i < names.size() && i < 4; ++i) text += (i ? ", " : "") + names[i];
    return names.size() > 4 ? text + ", ..." : text;
  };
  if (loads == 0 && !s.graph.params.empty()) {
    std::vector<std::string> model_names, file_names;
    for (const auto& p : s.graph.params) model_names.push_back(p.name);
    for (const auto& t : file.tensors) file_names.push_back(t.name);
    diags.add(mark, "model.init_from",
              path + ": none of the model's " + std::to_string(s.graph.params.size()) +
                  " tensors is in the file with its name, shape and type, so it would load nothing "
                  "(the file holds " +
                  (file_names.empty() ? std::string("no tensors") : listed(file_names)) +
                  "; the model has " + listed(model_names) + ")" + stored_as,
              "give a file of this model's weights, or remove model.init_from");
  } else if (!frozen_left.empty()) {
    diags.add(mark, "model.init_from",
              path + ": " + listed(frozen_left) +
                  ", which model.freeze keeps from training, are not in it with the model's "
                  "shapes: they would stay at their random initial values" +
                  stored_as,
              "load them from the file, or leave their layers out of model.freeze");
  }
}

}  // namespace

std::string weights_fit_advice(const Session& s, const checkpoint::Safetensors& file) {
  if (const std::string stored_as = other_type_advice(s, file); !stored_as.empty())
    return "convert the file to F32" + stored_as;
  return fit_advice(s, file);
}

void check_init_from(const Session& s, config::Diagnostics& diags) {
  if (s.init_from_file.empty()) return;
  const std::string path = init_from_path(s.config);
  const config::Mark mark = s.config.model.node.find("init_from")->mark();
  std::vector<checkpoint::TensorShape> params;
  for (const auto& p : s.graph.params) params.push_back({p.name, p.shape});
  try {
    // A checkpoint's file: against its checksum first.
    checkpoint::check_listed_checksum(s.init_from_file);
    // Its values are checked too, a piece at a time.
    const checkpoint::SafetensorsFile opened(s.init_from_file);
    const checkpoint::Safetensors& file = opened.contents();
    const auto mismatches = checkpoint::mismatches_of(file, params, "");
    if (init_strict(s.config) && !mismatches.empty()) {
      std::string list;
      for (const auto& m : mismatches) list += "\n  " + m;
      const std::string advice = weights_fit_advice(s, file);
      diags.add(mark, "model.init_from",
                path + ": " + std::to_string(mismatches.size()) +
                    " tensor(s) do not match the model:" + list,
                !advice.empty() ? advice
                                : "set model.init_strict: false to load only the tensors that "
                                  "fit (the others keep their random initial values)");
      return;
    }
    if (!init_strict(s.config)) check_partial_init(s, file, path, mark, diags);
    checkpoint::check_finite(opened, params, path);
  } catch (const checkpoint::CheckpointNotFinite& e) {
    diags.add(mark, "model.init_from", e.what(),
              "start from weights saved before the run diverged (an earlier checkpoint's "
              "model.safetensors)");
  } catch (const checkpoint::CheckpointError& e) {  // damaged, or not safetensors
    diags.add(mark, "model.init_from", e.what());
  }
}

namespace {

const config::TypedItem& training_source(const config::Config& config) {
  if (!config.data.train) {
    config::Diagnostics diags;
    diags.add(mark_of(config, "data"), "data.train", "no training data source",
              "add data.train: {type: idx, images: ..., labels: ...}");
    diags.throw_if_any();
  }
  return *config.data.train;
}

// A classification loss needs class labels: a source of regression targets
// (an NPY y of floats, a CSV with regression: true) would otherwise meet it as
// a shape error in the model.
void check_loss_takes_targets(const config::Config& config, const Session& s,
                              config::Diagnostics& diags) {
  const config::Node* loss = config.model.node.is_map() ? config.model.node.find("loss") : nullptr;
  const config::Node* type = loss && loss->is_map() ? loss->find("type") : nullptr;
  if (!type || type->text() != "cross_entropy" || s.num_classes > 0) return;
  diags.add(mark_of(config, "model.loss.type"), "model.loss.type",
            "cross_entropy needs class labels, but data.train (" + s.train_data->describe() +
                ") gives regression targets " + to_string(s.train_data->target_shape()),
            "store the labels as integers (an NPY y of int64, int32 or uint8; a CSV without "
            "regression: true), or train for the targets: model.loss: {type: mse}");
}

// Image folders name their classes: an evaluation folder's labels follow the
// training folder's names, whatever classes either lacks.
void match_eval_classes_by_name(const config::Config& config, Session& s) {
  const auto train_names = s.train_data->class_names();
  const auto eval_names = s.eval_data->class_names();
  if (train_names.empty() || eval_names.empty() || eval_names == train_names) return;
  try {
    s.eval_data = data::relabel_by_class_names(s.eval_data, train_names);
  } catch (const data::SourceFieldError& e) {
    throw_at_field(config, "data.eval", e, "");
  }
}

// data.split holds out round(split x samples) for evaluation: at least one,
// and not all of them.
void check_split_leaves_both_parts(const config::Config& config, std::int64_t samples) {
  const double split = config.data.split;
  const auto held_out = static_cast<std::int64_t>(std::llround(split * double(samples)));
  if (held_out >= 1 && held_out < samples) return;
  const double one_sample = 1.0 / double(samples);
  const std::string suggestion =
      samples < 2 ? "a split needs at least 2 samples; give data.eval a source of its own"
      : held_out < 1
          ? "hold out at least one sample: data.split=" + config::format_number(one_sample) +
                " (1/" + std::to_string(samples) + ") or more"
          : "leave at least one for training: data.split=" +
                config::format_number(1.0 - one_sample) + " or less";
  config::Diagnostics d;
  d.add(mark_of(config, "data.split"), "data.split",
        "holding out " + config::format_number(split) + " of the " + std::to_string(samples) +
            " training samples leaves " +
            (held_out < 1 ? "no evaluation sample" : "no training sample"),
        suggestion);
  throw config::ConfigError(d);
}

}  // namespace

SessionData open_session_data(const config::Config& config,
                              const std::vector<std::string>& class_names) {
  Session s;  // the sets alone, for the checks that take a session
  s.train_data = open_checked_source(config, training_source(config), "data.train");
  if (const auto own = s.train_data->class_names();
      !class_names.empty() && !own.empty() && own != class_names) {
    try {
      s.train_data =
          data::relabel_by_class_names(s.train_data, class_names, "the run (its manifest.json)");
    } catch (const data::SourceFieldError& e) {
      throw_at_field(config, "data.train", e, "");
    }
  }
  if (config.data.eval) {
    s.eval_data = open_checked_source(config, *config.data.eval, "data.eval");
    match_eval_classes_by_name(config, s);
  } else if (config.data.split > 0) {
    check_split_leaves_both_parts(config, s.train_data->size());
    auto [train, eval] = data::split_dataset(s.train_data, config.data.split,
                                             static_cast<std::uint64_t>(config.seed));
    s.train_data = train;
    s.eval_data = eval;
  }
  return {std::move(s.train_data), std::move(s.eval_data)};
}

std::int64_t training_classes(const config::Config& config) {
  return open_source(config, training_source(config), "data.train")->num_classes();
}

namespace {

Session open_session(const config::Config& config, const std::vector<std::string>& class_names,
                     bool use_init_from, bool trains) {
  Session s;
  s.config = config;
  s.trains = trains;
  config::Diagnostics diags;
  s.batch = plan_batches(config, diags);
  diags.throw_if_any();
  if (use_init_from) {  // before the data: a missing file is found at once
    const std::string path = init_from_path(config);
    std::error_code ec;
    const std::filesystem::path resolved = std::filesystem::canonical(path, ec);
    s.init_from_file = ec ? path : resolved.string();
  }
  SessionData sets = open_session_data(config, class_names);
  s.train_data = std::move(sets.train);
  s.eval_data = std::move(sets.eval);
  // A list's error is reported at the list that holds the transform: the
  // evaluation's own, when written, else the training list it follows.
  std::string list = "data.transforms";
  const std::vector<config::TypedItem>* building = &config.data.transforms;
  try {
    auto train_pipe =
        data::build_pipeline(specs_of(config.data.transforms), true, s.train_data.get());
    s.sample_shape = train_pipe.output_shape(s.train_data->sample_shape());
    const config::Node* data = config.resolved.find("data");
    const config::Node* own = data ? data->find("eval_transforms") : nullptr;
    if (own && !own->mark().is_default()) list = "data.eval_transforms";
    building = &config.data.eval_transforms;
    auto eval_pipe = data::build_pipeline(eval_specs(config.data.eval_transforms, train_pipe),
                                          false, s.train_data.get(), s.eval_data.get());
    s.train_pipeline = std::make_shared<const data::Pipeline>(std::move(train_pipe));
    s.eval_pipeline = std::make_shared<const data::Pipeline>(std::move(eval_pipe));
  } catch (const data::SampleReadError& e) {  // normalize's statistics read data.train
    diags.add(config.data.train->mark, "data.train", kStatisticsReadError + e.what(),
              "repair or remove it; `trainer validate --data` lists every sample that cannot be "
              "read");
    diags.throw_if_any();
  } catch (const data::TransformError& e) {  // at the item, and its key when known
    // An item of the evaluation's list derived from data.transforms (its
    // random transforms left out) is reported at its place there.
    std::size_t index = e.index();
    if (building == &config.data.eval_transforms && list == "data.transforms" &&
        index < building->size()) {
      const config::Mark& at = (*building)[index].mark;
      for (std::size_t i = 0; i < config.data.transforms.size(); ++i)
        if (config.data.transforms[i].mark == at) index = i;
    }
    const std::string key =
        list + "[" + std::to_string(index) + "]" + (e.field().empty() ? "" : "." + e.field());
    // The training samples passed the list: the evaluation's do not.
    const bool eval_samples = building == &config.data.eval_transforms && config.data.eval;
    diags.add(written_mark_of(config, key), key,
              (eval_samples ? "on data.eval's samples: " : "") + std::string(e.what()));
    diags.throw_if_any();
  } catch (const std::runtime_error& e) {
    diags.add(written_mark_of(config, list), list, e.what());
    diags.throw_if_any();
  }
  // The transforms may make a sample larger than any source may declare (a
  // crop with much padding): the same limit, at the list that does it.
  if (config::bounded_elements(s.sample_shape) > config::kMaxSampleElements) {
    diags.add(written_mark_of(config, "data.transforms"), "data.transforms",
              "they make the training samples " + to_string(s.sample_shape) + ", more than " +
                  std::to_string(config::kMaxSampleElements) +
                  " (2^31) elements, the most supported",
              "use a smaller crop size or padding");
    diags.throw_if_any();
  }
  s.num_classes = s.train_data->num_classes();
  if (s.trains) {
    check_batch_fills(config, s, diags);
    check_total_steps(config, s, diags);
  }
  check_inferred_classes(config, s, diags);
  if (config.data.eval) {
    check_eval_matches_train(config, s, diags);
  } else if (s.eval_data) {  // split off the training set: only the transforms can differ
    const config::Mark mark = mark_of(config, "data.eval_transforms");
    try {
      const Shape eval_shape = s.eval_pipeline->output_shape(s.eval_data->sample_shape());
      if (eval_shape != s.sample_shape)
        diags.add(mark, "data.eval_transforms",
                  "the evaluation samples are " + to_string(eval_shape) +
                      " after these transforms, but the training samples are " +
                      to_string(s.sample_shape) + " (the model's input)",
                  "crop or resize them like data.transforms does (random_crop is a centre crop "
                  "on evaluation samples)");
    } catch (const std::runtime_error& e) {
      diags.add(mark, "data.eval_transforms", e.what());
    }
  }
  check_checkpoint_metric(config, s, diags);
  check_loss_takes_targets(config, s, diags);
  diags.throw_if_any();  // all of them at once
  config::Diagnostics warnings;
  if (s.trains) warn_early_stopping_cannot_stop(config, s, warnings);
  if (s.trains) warn_checkpoint_ranking(config, s, warnings);
  if (s.trains) warn_batch_beyond_set(config, s, warnings);
  if (s.trains) warn_schedule_beyond_run(config, s, warnings);
  if (s.trains) warn_normalize_unscaled(config, s, warnings);
  warn_class_naming(config, s, warnings);
  build_model_graph(s);
  if (s.trains) warn_channels_last(config, s, warnings);
  s.warnings = warnings.list();
  return s;
}

// The layers' types, keys and values, as far as they are known without the
// data, are reported with the data's errors (which stop the session before
// the model is built), each once: the builder finds them again.
Session checked_session(const config::Config& config, const std::vector<std::string>& class_names,
                        bool use_init_from, bool trains) {
  config::Diagnostics layers;
  graph::check_model_fields(config.model.node, layers);
  try {
    return open_session(config, class_names, use_init_from, trains);
  } catch (const config::ConfigError& e) {
    config::Diagnostics all;
    std::set<std::string> reported;
    for (const auto* list : {&layers.list(), &e.diagnostics().list()})
      for (const config::Diagnostic& d : *list)
        if (reported.insert(config::format(d)).second) all.add(d);
    throw config::ConfigError(all);
  }
}

}  // namespace

Session prepare_session(const config::Config& config, const std::vector<std::string>& class_names,
                        bool use_init_from) {
  return checked_session(config, class_names, use_init_from, true);
}

Session prepare_eval_session(const config::Config& config,
                             const std::vector<std::string>& class_names) {
  return checked_session(config, class_names, false, false);
}

namespace {

// Batchnorm in training normalises each channel over the N x H x W values
// of its micro-batch (of the global batch with sync across ranks): with one
// value per channel there is nothing to normalise and every output would be
// the layer's bias (PyTorch refuses it too). With data.drop_last: false the
// short micro-batch ending each epoch counts as well.
void check_batchnorm_has_values(const Session& s, config::Diagnostics& diags) {
  if (!s.trains) return;  // evaluation uses the running statistics
  const std::int64_t short_rows = s.train_data ? short_batch_rows(s.config, s) : 0;
  for (const graph::Node& node : s.graph.nodes) {
    if (node.op->name != "batchnorm" || (node.attrs.get_bool("sync") && s.batch.world > 1))
      continue;
    const Shape& x = s.graph.values[static_cast<std::size_t>(node.inputs.at(0))].shape;
    const std::int64_t per_row = x.size() == 4 ? x[2] * x[3] : 1;
    const std::string layer = "layer '" + node.name +
                              "' (batchnorm): in training it normalises each channel over the "
                              "N x H x W values of its input";
    if (x.at(0) * per_row == 1) {
      diags.add(node.mark, "model",
                layer + ", and " + to_string(x) +
                    " has one per channel: every output would be the layer's bias",
                "use a micro-batch of 2 or more (train.batch_size, train.micro_batch_size), sync: "
                "true across several ranks, or a layernorm");
    } else if (short_rows == 1 && per_row == 1) {
      const std::int64_t samples = s.train_data->size();
      const std::string shard =
          s.batch.world > 1
              ? "each rank's shard of " +
                    std::to_string(data::Loader::equal_shard_size(samples, s.batch.world, false)) +
                    " samples ends"
              : "the " + std::to_string(samples) + " training samples end";
      diags.add(mark_of(s.config, "data.drop_last"), "data.drop_last",
                "false: " + shard + " each epoch with a micro-batch of 1 sample (of " +
                    std::to_string(s.batch.micro) + "), and " + layer +
                    ", one per channel there: every output of that step would be the layer's bias",
                "set data.drop_last: true, or a micro-batch that leaves 0 or 2 or more samples "
                "over (train.batch_size, train.micro_batch_size)");
    }
  }
}

}  // namespace

void build_model_graph(Session& s) {
  config::Diagnostics diags;
  graph::ModelInput input;
  input.batch = s.batch.micro;
  input.sample_shape = s.sample_shape;
  input.num_classes = s.num_classes;
  input.classes_inferred = s.train_data->classes_inferred();
  input.target_shape = s.train_data->target_shape();
  s.graph = graph::build_graph(s.config.model.node, input, diags);
  diags.throw_if_any();
  check_batchnorm_has_values(s, diags);
  diags.throw_if_any();
  if (s.config.optimizer.weight_decay_params == "all")
    for (graph::Param& p : s.graph.params) p.weight_decay = p.trainable;
  graph::assign_compute_types(s.graph, s.config.precision.mode);
}

graph::TrainingGraph training_graph(const Session& s, const Backend& backend) {
  graph::Graph g = s.graph;
  if (s.config.backend.fuse_activations)
    graph::fuse_activations(
        g, [&](const std::string& op, Epilogue e) { return backend.fuses_activation(op, e); });
  graph::assign_formats(g, backend.activation_formats(), s.config.precision.mode);
  return graph::differentiate(std::move(g));
}

Session with_micro_batch(const Session& s, std::int64_t micro) {
  Session resized = s;
  const std::int64_t per_rank = s.batch.micro * s.batch.accumulation;
  resized.batch.micro = micro;
  resized.batch.accumulation = per_rank / micro;
  build_model_graph(resized);
  return resized;
}

namespace {

// `trainer validate` also opens the data and builds the model graph; on the
// CPU it also plans the batch as `run` does, against train.memory_limit_mib
// or else the memory the machine has free (micro_batch_size: auto included; a
// GPU's plan needs the GPU).
const bool model_check_registered = [] {
  config::add_validation_hook(
      [](const config::Config& config, config::Diagnostics& diags, config::Diagnostics& warnings) {
        try {
          const Session session = prepare_session(config);
          for (const config::Diagnostic& warning : session.warnings) warnings.add(warning);
          check_init_from(session, diags);
          if (config.devices.gpus.empty()) {
            Backend& backend = select_backend(config);
            fit_batch_to_memory(session, backend, memory_capacity(session, backend));
          }
        } catch (const config::ConfigError& e) {
          for (const auto& d : e.diagnostics().list()) diags.add(d);
        }
      });
  return true;
}();

}  // namespace

}  // namespace trainer::train
