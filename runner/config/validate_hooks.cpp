// The list of registered validation hooks and the function that runs them.
#include "runner/config/validate_hooks.h"

#include <mutex>

#include "runner/config/load.h"

namespace trainer::config {
namespace {

std::mutex& hooks_mutex() {
  static std::mutex m;
  return m;
}

std::vector<ValidationHook>& hooks() {
  static std::vector<ValidationHook> list;
  return list;
}

}  // namespace

void add_validation_hook(ValidationHook hook) {
  std::lock_guard<std::mutex> lock(hooks_mutex());
  hooks().push_back(std::move(hook));
}

std::vector<Diagnostic> run_validation_hooks(const Config& config) {
  std::vector<ValidationHook> copy;
  {
    std::lock_guard<std::mutex> lock(hooks_mutex());
    copy = hooks();
  }
  Diagnostics diags, warnings;
  for (const auto& hook : copy) {
    try {
      hook(config, diags, warnings);
    } catch (const ConfigError& e) {
      for (const auto& d : e.diagnostics().list()) diags.add(d);
    }
  }
  diags.throw_if_any();
  return warnings.list();
}

Config load_and_check(const std::string& path, const std::vector<std::string>& overrides) {
  Config config = load_config(path, overrides);
  run_validation_hooks(config);
  return config;
}

}  // namespace trainer::config
