// What differs between two configs written as YAML, value by value: the
// changes a resumed run or sweep reports, seen through today's defaults.
#pragma once

#include <string>

namespace trainer::config {

// "model.layers[1].out_features: 512 -> 64, train.epochs: 20 -> 2" (the
// first few, then how many more), or "" when both hold the same values, in
// whatever key order. A key only one side has shows as "(not set)".
std::string value_changes(const std::string& was, const std::string& now);

// `was`, a config resolved by this or an earlier trainer, resolved again by
// this one (as YAML), without its `without_key` ("sweep": a sweep's base
// config has none): compared with a config resolved today, it differs only
// where values do, not where an earlier trainer filled in fewer defaults.
// `was` itself when it no longer loads.
std::string resolved_today(const std::string& was, const std::string& without_key = "");

}  // namespace trainer::config
