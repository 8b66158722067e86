// The config a sweep's trials start from (base_config.h).
#include "runner/sweep/base_config.h"

#include <cstdio>
#include <optional>

#include "runner/config/diagnostics.h"
#include "runner/config/load.h"
#include "runner/config/overrides.h"
#include "runner/sweep/sweep_spec.h"

namespace trainer::sweep {
namespace {

// The command line's overrides followed by the first trial's values (the
// random search drawing from `seed`), and where each was written. The
// trial's `seed` is left out: the config keeps its own, the random search's
// default seed.
struct FirstTrial {
  std::string id;
  std::vector<std::string> values;     // the trial's, as KEY=VALUE
  std::vector<std::string> overrides;  // the command line's, then `values`
  config::OverrideOrigins origins;     // parallel to `overrides`
};

FirstTrial first_trial(const std::vector<std::string>& overrides,
                       const std::vector<std::string>& grid_flags, const config::Node& merged,
                       std::uint64_t seed) {
  const config::Node* section = merged.find("sweep");
  const Trial trial =
      expand_trials(parse_sweep(section ? *section : config::Node{}, grid_flags, seed)).front();
  FirstTrial first{trial.id, {}, overrides, config::OverrideOrigins(overrides.size())};
  for (std::size_t i = 0; i < trial.overrides.size(); ++i) {
    if (config::override_key(trial.overrides[i]) == "seed") continue;
    first.values.push_back(trial.overrides[i]);
    first.overrides.push_back(trial.overrides[i]);
    first.origins.push_back(
        from_sweep_section(trial.sources[i]) ? std::optional(trial.sources[i].mark) : std::nullopt);
  }
  return first;
}

}  // namespace

BaseConfig load_base_config(const std::string& path, const std::vector<std::string>& overrides,
                            const std::vector<std::string>& grid_flags, const char* command) {
  try {
    return {config::load_config(path, overrides), {}};
  } catch (const config::ConfigError& alone) {
    FirstTrial first;
    config::Node merged;
    try {
      merged = config::load_merged_tree(path, overrides);
      first = first_trial(overrides, grid_flags, merged, 0);
    } catch (const config::ConfigError&) {
      throw alone;  // no sweep to mend it: the config's own errors
    }
    try {
      config::Config config = config::load_config(path, first.overrides, first.origins);
      // The first trial as the config's seed draws it, when that differs.
      const FirstTrial drawn =
          first_trial(overrides, grid_flags, merged, static_cast<std::uint64_t>(config.seed));
      if (drawn.values == first.values)
        return {std::move(config), first.values, alone.diagnostics().list()};
      first = drawn;
      return {config::load_config(path, first.overrides, first.origins), first.values,
              alone.diagnostics().list()};
    } catch (const config::ConfigError&) {
      // Says where the values of the overrides after the command line's come from.
      std::fprintf(stderr,
                   "%s: the config fails its checks without the values the sweep sets; "
                   "checked with %s's (%s):\n",
                   command, first.id.c_str(), config::join(first.values, " ").c_str());
      throw;
    }
  }
}

}  // namespace trainer::sweep
