// The field registry: every field of the fixed config sections (config.h)
// declared once, with its FieldSpec (type, default, constraint, doc) and the
// binder that stores the parsed value in the typed Config. Parsing, defaults,
// `print-config`, the JSON Schema and the reference are all generated from it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/field.h"
#include "runner/config/config.h"

namespace trainer::config {

using Binder = std::function<void(Config&, const FieldValue&)>;

struct ConfigField {
  FieldSpec spec;
  Binder bind;
  // A word accepted instead of the typed value (`micro_batch_size: auto`), or empty.
  std::string keyword;
  std::function<void(Config&)> bind_keyword;
};

// A key of a section that is not a plain field: a sub-tree validated by its own
// rules (model, data sources and transforms, sweep, extends).
struct SpecialKey {
  std::string name;
  std::string doc;
};

struct SectionDef {
  std::string path;  // "" for the top level, "optimizer", "precision.loss_scale"
  std::string doc;
  std::vector<ConfigField> fields;
  std::vector<SpecialKey> special_keys;
  // A field that may stand for the whole section: `precision: bf16` means
  // `precision: {mode: bf16}`. Empty: no shorthand.
  std::string shorthand;
};

// The loss of a model without `loss:` (what print-config fills in and the
// graph builder trains with).
inline constexpr const char* kDefaultLoss = "cross_entropy";

// The most repetitions one block instance may ask for (`repeat:`).
inline constexpr std::int64_t kMaxBlockRepeat = 10000;

// Every section, parents before children, in the order the reference lists them.
const std::vector<SectionDef>& config_sections();
const SectionDef* find_section(const std::string& path);

// The FieldSpecs of a section (for read_fields and the schema).
std::vector<FieldSpec> field_specs(const SectionDef& section);
// The names of the direct sub-sections of `path` ("precision" -> {"loss_scale"}).
std::vector<std::string> child_sections(const std::string& path);
// The last component of a section path ("precision.loss_scale" -> "loss_scale").
std::string section_name(const std::string& path);

// The full key of the setting `name` means, as a user coming from another
// tool may write it: a key path as it is ("optimizer.lr"), a field's own name
// when exactly one section has it ("epochs" -> "train.epochs"), either in
// another tool's word ("max_epochs", "learning_rate"; see ours_for) or with
// dashes ("batch-size"); "" otherwise.
std::string config_key_named(const std::string& name);

}  // namespace trainer::config
