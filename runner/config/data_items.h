// Validation of the `data:` items: sources (`data.train`, `data.eval`) and
// transform lists (`data.transforms`, `data.eval_transforms`), each
// `{type: <name>, ...}` checked against the FieldSpecs of data/registry.h.
// Path fields are resolved relative to the YAML file that wrote them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"

namespace trainer::config {

// Validates the source item `node` in place (defaults filled, paths resolved).
// A relative path written in `file` is relative to that file's folder; one
// given on the command line or by a default is relative to the working
// directory. Returned absolute, so a resolved config names the same file from
// anywhere.
std::string resolve_path(const std::string& path, const std::string& file);

std::optional<TypedItem> read_source_item(Node& node, const std::string& key_path,
                                          Diagnostics& diags);
// The largest sample a source may declare, in elements (2^31).
inline constexpr std::int64_t kMaxSampleElements = std::int64_t{1} << 31;

// The product of `extents` (a sample's shape), or kMaxSampleElements + 1
// when it is larger or an extent is not positive: never an overflow.
std::int64_t bounded_elements(const std::vector<std::int64_t>& extents);

// The number of elements of one sample, when the source's fields say it
// (synthetic `shape`, image_folder `size` x `channels`); nullopt otherwise.
// Saturates at kMaxSampleElements + 1.
std::optional<std::int64_t> declared_sample_elements(const TypedItem& item);

// Validates a list of transform items in place.
std::vector<TypedItem> read_transform_list(Node& node, const std::string& key_path,
                                           Diagnostics& diags);
// Whether a transform type does something to eval samples: every
// deterministic one, and a random one with an eval form (random_crop: a
// centre crop). The default data.eval_transforms keeps those.
bool acts_on_eval_samples(const std::string& type);

}  // namespace trainer::config
