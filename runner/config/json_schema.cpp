// JSON Schema generation from the registries.
#include "runner/config/json_schema.h"

#include "data/registry.h"
#include "ops/op.h"
#include "runner/config/fields.h"
#include "runner/config/registry.h"
#include "runner/config/to_json.h"

namespace trainer::config {
namespace {

using json = nlohmann::ordered_json;

json number_schema(const FieldSpec& spec, const char* type) {
  json s = {{"type", type}};
  if (spec.min) s[spec.min_exclusive ? "exclusiveMinimum" : "minimum"] = *spec.min;
  if (spec.max) s["maximum"] = *spec.max;
  // A float32 setting that takes 0 takes nothing between 0 and the smallest magnitude.
  if (spec.float32 && (!spec.min || *spec.min < kFloat32Smallest))
    s["not"] = {{"type", type}, {"exclusiveMinimum", 0}, {"exclusiveMaximum", kFloat32Smallest}};
  return s;
}

// "string", or ["string", "integer"] for a field that takes integers as text.
json text_type(const FieldSpec& spec) {
  return spec.integers_as_text ? json::array({"string", "integer"}) : json("string");
}

json list_schema(json items, const FieldSpec& spec) {
  json s = {{"type", "array"}, {"items", std::move(items)}};
  if (spec.min_items > 0) s["minItems"] = spec.min_items;
  if (spec.max_items) s["maxItems"] = *spec.max_items;
  return s;
}

// The properties of a `{type: X, ...}` item (plus `extra` keys), closed.
json typed_item_schema(const std::string& type, const std::string& doc,
                       const std::vector<FieldSpec>& fields, const json& extra) {
  json props = {{"type", {{"const", type}}}};
  for (auto it = extra.begin(); it != extra.end(); ++it) props[it.key()] = it.value();
  json required = json::array({"type"});
  for (const auto& f : fields) {
    props[f.name] = field_json_schema(f);
    if (f.required) required.push_back(f.name);
  }
  return {{"type", "object"},
          {"description", doc},
          {"properties", props},
          {"required", required},
          {"additionalProperties", false}};
}

json one_of_items(json items) {
  if (items.empty())  // nothing registered: any {type: ...} map
    return {{"type", "object"},
            {"required", {"type"}},
            {"properties", {{"type", {{"type", "string"}}}}}};
  return {{"oneOf", std::move(items)}};
}

json layer_schema() {
  const json common = {
      {"name",
       {{"type", json::array({"string", "integer"})},
        {"description", "Layer name (default: <type><index>)"}}},
      {"inputs",
       {{"description", "Input layer name(s) (default: the previous layer)"},
        {"anyOf", json::array({{{"type", json::array({"string", "integer"})}},
                               {{"type", "array"},
                                {"items", {{"type", json::array({"string", "integer"})}}}}})}}}};
  json items = json::array();
  items.push_back(
      {{"type", "object"},
       {"description", "An instance of a block from model.blocks; other keys are block parameters"},
       {"properties",
        {{"block", {{"type", "string"}}},
         {"name", common["name"]},
         {"inputs", common["inputs"]},
         {"repeat", {{"type", "integer"}, {"minimum", 1}, {"maximum", kMaxBlockRepeat}}},
         {"first", {{"type", "object"}}}}},
       {"required", {"block"}}});
  for (const auto& op : op_registry().all()) {
    if (op.is_loss) continue;
    items.push_back(typed_item_schema(op.name, op.doc, op.attrs, common));
  }
  if (items.size() == 1)  // no op registered yet: any {type: ...} layer
    items.push_back({{"type", "object"}, {"required", {"type"}}});
  return {{"anyOf", items}};
}

json loss_schema() {
  json names = json::array();
  json items = json::array();
  for (const auto& op : op_registry().all()) {
    if (!op.is_loss) continue;
    names.push_back(op.name);
    items.push_back(typed_item_schema(op.name, op.doc, op.attrs, json::object()));
  }
  json alternatives = json::array();
  alternatives.push_back(names.empty() ? json{{"type", "string"}} : json{{"enum", names}});
  alternatives.push_back(one_of_items(items));
  // A map without `type` sets the default loss's attributes.
  if (const OpDef* fallback = op_registry().find(kDefaultLoss)) {
    json untyped =
        typed_item_schema(fallback->name, fallback->doc, fallback->attrs, json::object());
    json required = json::array();
    for (const auto& name : untyped["required"])
      if (name != "type") required.push_back(name);
    untyped["required"] = required;
    untyped["not"] = {{"required", {"type"}}};
    alternatives.push_back(untyped);
  }
  return {
      {"description", "The loss: a loss op name or {type: <loss>, ...} (default: cross_entropy)"},
      {"anyOf", alternatives}};
}

json model_schema() {
  return {
      {"type", "object"},
      {"description", "The network, validated in full by the graph builder"},
      {"properties",
       {{"layers", {{"type", "array"}, {"minItems", 1}, {"items", {{"$ref", "#/$defs/layer"}}}}},
        {"blocks", {{"type", "object"}, {"description", "Named reusable layer lists"}}},
        {"loss", {{"$ref", "#/$defs/loss"}}},
        {"recompute",
         {{"description", "Activation checkpointing: layer or block names, or {every: N}"},
          {"oneOf",
           {{{"type", "array"}, {"items", {{"type", "string"}}}},
            {{"type", "object"},
             {"properties", {{"every", {{"type", "integer"}, {"minimum", 1}}}}},
             {"required", {"every"}},
             {"additionalProperties", false}}}}}},
        {"freeze",
         {{"description",
           "Layer or block names whose parameters are not trained (fine-tuning with init_from)"},
          {"type", "array"},
          {"items", {{"type", "string"}}}}},
        {"lr_scale",
         {{"description",
           "Layer or block name to a factor of the learning rate of its parameters (> 0)"},
          {"type", "object"},
          {"additionalProperties", {{"type", "number"}, {"exclusiveMinimum", 0}}}}},
        {"init_from",
         {{"type", "string"},
          {"description",
           "Start from these weights (.safetensors, relative to this file); names and shapes must "
           "match"}}},
        {"init_strict",
         {{"type", "boolean"},
          {"description",
           "false: load only the init_from tensors that match, list the others (default true)"}}}}},
      {"additionalProperties", false}};
}

json special_key_schema(const std::string& section, const std::string& key) {
  if (section.empty() && key == "extends")
    return {{"anyOf", json::array({{{"type", "string"}},
                                   {{"type", "array"}, {"items", {{"type", "string"}}}}})}};
  if (section.empty() && key == "model") return {{"$ref", "#/$defs/model"}};
  if (section.empty() && key == "sweep") return {{"type", "object"}};
  if (key == "train") return {{"$ref", "#/$defs/source"}};
  if (key == "eval")  // no value: no evaluation source
    return {{"anyOf", json::array({{{"$ref", "#/$defs/source"}}, {{"type", "null"}}})}};
  if (key == "transforms" || key == "eval_transforms")
    return {{"type", "array"}, {"items", {{"$ref", "#/$defs/transform"}}}};
  return json::object();
}

json section_schema(const SectionDef& section) {
  json props = json::object();
  json required = json::array();
  for (const auto& field : section.fields) {
    json s = field_json_schema(field.spec);
    if (!field.keyword.empty()) {
      json choice = {{"anyOf", json::array({s, {{"const", field.keyword}}})}};
      choice["description"] = s["description"];
      s = choice;
    }
    props[field.spec.name] = s;
    if (field.spec.required) required.push_back(field.spec.name);
  }
  for (const auto& child : child_sections(section.path)) {
    const SectionDef* def = find_section(section.path.empty() ? child : section.path + "." + child);
    // A section left empty (`optimizer:` with its keys commented out) is null.
    json child_schema = section_schema(*def);
    const json null = {{"type", "null"}};
    if (child_schema.contains("anyOf"))  // the shorthand forms, then the map
      child_schema["anyOf"].insert(child_schema["anyOf"].begin(), null);
    else
      child_schema = {{"description", child_schema["description"]},
                      {"anyOf", json::array({null, child_schema})}};
    props[child] = child_schema;
  }
  for (const auto& key : section.special_keys) {
    json s = special_key_schema(section.path, key.name);
    s["description"] = key.doc;
    props[key.name] = s;
  }
  json out = {{"type", "object"}, {"description", section.doc}, {"properties", props}};
  if (!required.empty()) out["required"] = required;
  out["additionalProperties"] = false;

  if (!section.shorthand.empty()) {  // `precision: bf16`
    const ConfigField* target = nullptr;
    for (const auto& f : section.fields)
      if (f.spec.name == section.shorthand) target = &f;
    return {{"description", section.doc},
            {"anyOf", json::array({field_json_schema(target->spec), out})}};
  }
  if (section.path == "devices") {
    // `devices: 0` is refused: a list of GPU indices ([0]), not one.
    const FieldSpec& gpus = section.fields.front().spec;
    json list = list_schema(number_schema(gpus, "integer"), gpus);
    list["description"] = gpus.doc;
    return {{"description", section.doc}, {"anyOf", json::array({{{"const", "cpu"}}, list, out})}};
  }
  return out;
}

}  // namespace

json field_json_schema(const FieldSpec& spec) {
  json s;
  switch (spec.type) {
    case FieldType::boolean:
      s = {{"type", "boolean"}};
      break;
    case FieldType::integer:
      s = number_schema(spec, "integer");
      break;
    case FieldType::number:
      s = number_schema(spec, "number");
      break;
    case FieldType::string:
      s = {{"type", text_type(spec)}};
      if (!spec.choices.empty()) s["examples"] = spec.choices;
      break;
    case FieldType::enumeration:
      s = {{"enum", spec.choices}};
      break;
    case FieldType::int_list: {
      const json one = number_schema(spec, "integer");
      s = {{"anyOf", json::array({one, list_schema(one, spec)})}};
      break;
    }
    case FieldType::number_list:
      s = list_schema(number_schema(spec, "number"), spec);
      break;
    case FieldType::string_list:
      s = list_schema({{"type", text_type(spec)}}, spec);
      break;
  }
  json out = {{"description", spec.doc}};
  for (auto it = s.begin(); it != s.end(); ++it) out[it.key()] = it.value();
  const Node def = default_node(spec);
  if (!def.is_null()) out["default"] = to_json(def);
  return out;
}

json config_json_schema() {
  json sources = json::array();
  for (const auto& d : data::source_defs())
    sources.push_back(typed_item_schema(d.name, d.doc, d.fields, json::object()));
  json transforms = json::array();
  for (const auto& d : data::transform_defs())
    transforms.push_back(typed_item_schema(d.name, d.doc, d.fields, json::object()));

  json root = {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
               {"$id", "https://trainer.local/schemas/trainer.schema.json"},
               {"title", "trainer experiment"}};
  const json top = section_schema(*find_section(""));
  for (auto it = top.begin(); it != top.end(); ++it) root[it.key()] = it.value();
  // A file that extends another may leave the required sections (and the
  // model's layers) to its base.
  root["if"] = {{"not", {{"type", "object"}, {"required", {"extends"}}}}};
  root["then"] = {{"required", {"model", "data"}},
                  {"properties",
                   {{"data", {{"type", "object"}, {"required", {"train"}}}},
                    {"model", {{"type", "object"}, {"required", {"layers"}}}}}}};
  root["$defs"] = {{"model", model_schema()},
                   {"layer", layer_schema()},
                   {"loss", loss_schema()},
                   {"source", one_of_items(sources)},
                   {"transform", one_of_items(transforms)}};
  return root;
}

std::string config_json_schema_text() {
  return config_json_schema().dump(2) + "\n";
}

}  // namespace trainer::config
