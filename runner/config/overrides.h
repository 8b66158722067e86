// Command-line overrides `a.b.c=value` and `model.layers[1].out_features=64`:
// the value is parsed as YAML (scalar or flow: `devices=[0,1]`) and set in the
// merged tree, where it is then validated exactly like a file value. Marks of
// override values name the file "<command line>", the override's 1-based index
// as the line and the 1-based position in the KEY=VALUE text as the column.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runner/config/diagnostics.h"
#include "runner/config/node.h"

namespace trainer::config {

inline constexpr const char* kCommandLine = "<command line>";

// Where each override was written when not on the command line (parallel to
// the overrides; nullopt or missing: the command line). A value written in a
// config file's sweep section is applied as if it stood at its mark there:
// errors point at it, and a relative path in it is relative to that file.
using OverrideOrigins = std::vector<std::optional<Mark>>;

void apply_overrides(Node& root, const std::vector<std::string>& overrides, Diagnostics& diags,
                     const OverrideOrigins& origins = {});

// The key an override sets: "train.max_steps" of "train.max_steps=15".
std::string override_key(const std::string& override_text);

// Adds "(in override N 'text')" to every diagnostic that points into an
// override and does not say so yet.
Diagnostics annotate_overrides(const Diagnostics& diags, const std::vector<std::string>& overrides);

}  // namespace trainer::config
