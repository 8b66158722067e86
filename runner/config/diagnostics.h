// Diagnostics: user-facing errors that point at the YAML. Every stage that can
// reject user input (config parsing, graph building, data checks) reports
// through these, so all errors of a run are listed at once in one format:
//   configs/a.yaml:12:5: error: optimizer.lr: expected a number > 0, found -1
//     did you mean 'optimizer.lr'?
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "runner/config/node.h"

namespace trainer::config {

struct Diagnostic {
  Mark mark;
  std::string key_path;    // "optimizer.lr", "model.layers[3].kernel"; may be empty
  std::string message;     // "expected a number > 0, found -1"
  std::string suggestion;  // "did you mean 'lr'?"; may be empty
};

// "file:line:col: error: key: message" and the suggestion indented below it;
// `severity` "warning" for a setting that is accepted but has no effect.
std::string format(const Diagnostic& d, const char* severity = "error");

class Diagnostics {
 public:
  void add(Mark mark, std::string key_path, std::string message, std::string suggestion = {});
  void add(Diagnostic d) { list_.push_back(std::move(d)); }
  bool empty() const { return list_.empty(); }
  std::size_t size() const { return list_.size(); }
  const std::vector<Diagnostic>& list() const { return list_; }
  std::string format_all() const;  // one diagnostic per line (suggestion indented below)
  // Throws ConfigError holding everything collected so far, if anything was.
  void throw_if_any() const;

 private:
  std::vector<Diagnostic> list_;
};

// Thrown when user input is rejected; the CLI prints format_all() and exits 2.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(Diagnostics diagnostics);
  const Diagnostics& diagnostics() const { return diagnostics_; }

 private:
  Diagnostics diagnostics_;
};

// `items` one after another with `separator` between them, as messages list
// names ("a, b, c").
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");

// The candidate nearest to `word`: the one other tools' name for it is
// ("learning_rate", "kernel_size", "float16"; see ours_for), else the nearest
// by edit distance, else the one candidate `word` (3 or more characters)
// abbreviates, or "" when none is close enough.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// This program's word for a key or value as other training tools write it
// ("max_epochs" -> "epochs", "cosine_annealing" -> "cosine"); "" when it has
// none. Case is ignored.
std::string ours_for(const std::string& word);

}  // namespace trainer::config
