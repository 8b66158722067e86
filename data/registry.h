// The data sources and transforms a YAML `data:` section may name. Each is
// declared once with its FieldSpecs (the same mechanism as op attributes and
// config fields), so the config layer validates `{type: idx, images: ...}`
// items generically and the JSON Schema is generated from the same list.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "ops/field.h"

namespace trainer::data {

struct SourceDef {
  std::string name;  // `type:` in YAML: idx, cifar, npy, csv, image_folder, synthetic
  std::string doc;
  std::vector<FieldSpec> fields;
  // Opens the source; paths are already resolved relative to the config file.
  // Throws std::runtime_error with the file, offset and what is wrong.
  std::function<std::shared_ptr<Dataset>(const Attrs& attrs)> open;
  std::vector<std::string> path_fields;  // fields holding file paths (resolved by the config layer)
};

struct TransformDef {
  std::string name;  // scale, normalize, random_crop, random_flip, random_translate, random_erasing
  std::string doc;
  std::vector<FieldSpec> fields;
  bool random = false;    // random transforms run on the training split only...
  std::string eval_form;  // ...unless they have a deterministic form for eval ("centre crop")
};

const std::vector<SourceDef>& source_defs();
const std::vector<TransformDef>& transform_defs();

// The source named `name`, or nullptr.
const SourceDef* find_source(const std::string& name);
// Opens a source by type name; an unknown type throws, listing the known ones.
std::shared_ptr<Dataset> open_source(const std::string& type, const Attrs& attrs);

}  // namespace trainer::data
