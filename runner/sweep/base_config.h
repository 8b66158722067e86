// The config a sweep's trials start from, as `trainer sweep` and `trainer
// validate` read it. A rule between fields may fail on the config alone and
// hold in every trial, the sweep setting what it needs (a multistep schedule
// whose milestones are swept, train.epochs: 0 with the epochs swept): then it
// is read with the first trial's values applied, so that an error no swept
// value mends is still reported once, before any trial.
#pragma once

#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"

namespace trainer::sweep {

struct BaseConfig {
  config::Config config;
  // The first trial's values (KEY=VALUE) that the config needed to pass its
  // checks, applied after the command line's overrides; empty when it
  // passes alone.
  std::vector<std::string> mended_by;
  // The config's errors without those values: what `trainer run` of it
  // reports (empty when it passes alone).
  std::vector<config::Diagnostic> alone_errors;
};

// The config at `path` with `overrides`; when it fails alone, with the first
// trial of its sweep section and `grid_flags` (the random search drawing
// from the config's seed) applied too. Throws the config's own errors when
// it has no sweep to mend them, and the errors with the first trial's values
// otherwise, after printing to stderr, prefixed by `command`, which trial's
// values those were.
BaseConfig load_base_config(const std::string& path, const std::vector<std::string>& overrides,
                            const std::vector<std::string>& grid_flags, const char* command);

}  // namespace trainer::sweep
