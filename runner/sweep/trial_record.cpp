// The sweep's trial state file, its two tables, and what it reads of a
// trial's run directory.
#include "runner/sweep/trial_record.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "data/file_kind.h"
#include "runner/checkpoint/durable_file.h"
#include "runner/config/overrides.h"
#include "runner/config/yaml_reader.h"
#include "runner/json_shown.h"
#include "runner/json_text.h"
#include "runner/sweep/objective.h"

namespace trainer::sweep {
namespace {

// The value an override gives, as the tables show it: a scalar's value (a
// quoted string without its quotes and escapes), a list or map as written.
// Each text parsed once: the tables are rewritten as each trial ends.
std::string value_of(const std::string& override_text) {
  static std::map<std::string, std::string> shown;
  if (const auto it = shown.find(override_text); it != shown.end()) return it->second;
  const auto eq = override_text.find('=');
  std::string text = eq == std::string::npos ? "" : override_text.substr(eq + 1);
  config::Diagnostics ignored;
  bool ok = true;
  const config::Node value = config::parse_yaml(text, "<value>", ignored, &ok);
  if (ok && value.is_scalar()) text = value.text();
  return shown.emplace(override_text, text).first->second;
}

std::vector<std::string> swept_keys(const std::vector<TrialRecord>& records) {
  std::vector<std::string> keys;
  for (const auto& r : records)
    for (const auto& o : r.trial.overrides)
      if (std::find(keys.begin(), keys.end(), config::override_key(o)) == keys.end())
        keys.push_back(config::override_key(o));
  return keys;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c == '\n' ? ' ' : c);
  return out + "\"";
}

std::string md_cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c == '\n' ? ' ' : c);
  return out;
}

std::string number_text(const std::optional<double>& v) {
  if (!v) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", *v);
  return buf;
}

// "1200", "600 (early stop)", or empty for a trial that has not finished.
std::string steps_text(const TrialRecord& r) {
  if (r.status != "done") return "";
  return std::to_string(r.steps) + (r.early_stopped ? " (early stop)" : "");
}

// The run's summary.json when it is an object of that `status` (a summary
// without one counts as complete); null otherwise.
nlohmann::json summary_of_status(const std::string& run_dir, const std::string& status) {
  const std::string path = (std::filesystem::path(run_dir) / "summary.json").string();
  if (!data::not_a_regular_file(path).empty()) return nullptr;  // a FIFO would block the open
  std::ifstream in(path);
  if (!in) return nullptr;
  nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
  if (s.is_discarded() || !s.is_object() || s.value("status", "complete") != status) return nullptr;
  return s;
}

nlohmann::json completed_summary(const std::string& run_dir) {
  return summary_of_status(run_dir, "complete");
}

std::optional<double> number_at(const nlohmann::json& object, const std::string& key) {
  if (!object.is_object()) return {};
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return {};
  return it->get<double>();
}

// `key` of the summary's record `name` (final_eval, best_eval, last_train).
std::optional<double> summary_number(const nlohmann::json& summary, const std::string& name,
                                     const std::string& key) {
  const auto record = summary.find(name);
  return record == summary.end() ? std::nullopt : number_at(*record, key);
}

// The values of `key` in the run's evaluation records (metrics.jsonl).
std::vector<double> eval_values(const std::string& run_dir, const std::string& key) {
  std::ifstream in(std::filesystem::path(run_dir) / "metrics.jsonl");
  std::vector<double> values;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"eval\"") == std::string::npos) continue;  // not an evaluation
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || !record.is_object() || record.value("split", "") != "eval")
      continue;
    if (const auto v = number_at(record, key)) values.push_back(*v);
  }
  return values;
}

// An eval metric's best value over every evaluation of the run (the summary's
// final and best records included); a train metric's value in the last
// logging window.
std::optional<double> objective_of(const nlohmann::json& summary, const std::string& run_dir,
                                   const SweepSpec& spec) {
  const auto dot = spec.metric.find('.');
  const std::string key = spec.metric.substr(dot + 1);
  if (spec.metric.substr(0, dot) != "eval") return summary_number(summary, "last_train", key);
  std::vector<double> values = eval_values(run_dir, key);
  for (const char* record : {"final_eval", "best_eval"})
    if (const auto v = summary_number(summary, record, key)) values.push_back(*v);
  if (values.empty()) return {};
  return spec.maximize ? *std::max_element(values.begin(), values.end())
                       : *std::min_element(values.begin(), values.end());
}

// What the sweep does with a trials.json it cannot read, wholly or in part.
constexpr const char* kDamagedStatePolicy =
    "the sweep goes on as for a trials.json it cannot read: whether a trial finished, and its "
    "result, is read from its run directory, and the file is rewritten";

// The warning for a value of trials.json of the wrong type: `where` names
// the trial and field ("trial-000.failures").
std::string damaged_state(const std::string& path, const std::string& where,
                          const std::string& expected, const nlohmann::json& value) {
  // A list or an object by its size: it may nest too deep to print.
  std::string found = value.is_structured() ? shown_json(value) : value.dump();
  if (found.size() > 60) found = found.substr(0, 60) + "...";
  return path + " is damaged at " + where + " (expected " + expected + ", found " + found +
         "): " + (where.find('.') == std::string::npos ? "the trial's saved state" : "that value") +
         " is ignored; " + kDamagedStatePolicy;
}

bool is_status(const nlohmann::json& v) {
  static const std::vector<std::string> known = {"pending", "running", "done", "failed",
                                                 "interrupted"};
  return v.is_string() &&
         std::find(known.begin(), known.end(), v.get<std::string>()) != known.end();
}
bool is_integer(const nlohmann::json& v) {
  return v.is_number_integer();
}
bool is_number(const nlohmann::json& v) {
  return v.is_number();
}
bool is_string(const nlohmann::json& v) {
  return v.is_string();
}
bool is_boolean(const nlohmann::json& v) {
  return v.is_boolean();
}

// One trial's saved fields: each is taken when it has its type; one of
// another type is ignored, with a warning naming it.
class SavedTrial {
 public:
  SavedTrial(const nlohmann::json& saved, const std::string& path, const std::string& trial_id,
             std::vector<std::string>& warnings)
      : saved_(saved), path_(path), trial_id_(trial_id), warnings_(warnings) {}

  // The field when it is there and `valid`, else nullptr.
  const nlohmann::json* field(const char* key, bool (*valid)(const nlohmann::json&),
                              const char* expected) const {
    const auto value = saved_.find(key);
    if (value == saved_.end()) return nullptr;
    if (valid(*value)) return &*value;
    warnings_.push_back(damaged_state(path_, trial_id_ + "." + key, expected, *value));
    return nullptr;
  }

 private:
  const nlohmann::json& saved_;
  const std::string& path_;
  const std::string& trial_id_;
  std::vector<std::string>& warnings_;
};

}  // namespace

bool read_completed_run(const SweepSpec& spec, TrialRecord& record) {
  const nlohmann::json s = completed_summary(record.run_dir);
  if (s.is_null()) return false;
  record.objective = objective_of(s, record.run_dir, spec);
  if (const auto steps = s.find("steps"); steps != s.end() && steps->is_number_integer())
    record.steps = steps->get<std::int64_t>();
  record.early_stopped = s.contains("early_stopped");
  return true;
}

bool run_was_interrupted(const std::string& run_dir) {
  return !summary_of_status(run_dir, "interrupted").is_null();
}

std::vector<std::string> summary_metrics(const std::string& run_dir) {
  const nlohmann::json s = completed_summary(run_dir);
  std::vector<std::string> out;
  if (s.is_null()) return out;
  for (const auto& m : objective_metrics()) {
    const auto dot = m.name.find('.');
    const char* record = m.name.substr(0, dot) == "eval" ? "final_eval" : "last_train";
    if (summary_number(s, record, m.name.substr(dot + 1))) out.push_back(m.name);
  }
  return out;
}

std::vector<std::string> load_trial_state(const std::string& path,
                                          std::vector<TrialRecord>& records) {
  std::vector<std::string> warnings;
  if (const std::string what = data::not_a_regular_file(path); !what.empty()) {
    warnings.push_back(path + " is " + what + ", not a file: " + kDamagedStatePolicy +
                       " (where it can be)");
    return warnings;
  }
  std::ifstream in(path);
  if (!in) return warnings;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    warnings.push_back(
        path + " is damaged (" +
        (j.is_discarded() ? std::string("not JSON")
                          : "a JSON " + std::string(j.type_name()) + ", not an object of trials") +
        "): the trials' saved status and failure counts are ignored; " + kDamagedStatePolicy);
    return warnings;
  }
  for (auto& r : records) {
    const auto found = j.find(r.trial.id);
    if (found == j.end()) continue;
    if (!found->is_object()) {
      warnings.push_back(damaged_state(path, r.trial.id, "an object", *found));
      continue;
    }
    SavedTrial saved(*found, path, r.trial.id, warnings);
    if (const auto* v =
            saved.field("status", is_status, "pending, running, done, failed or interrupted"))
      r.status = v->get<std::string>();
    if (const auto* v = saved.field(found->contains("failures") ? "failures" : "attempts",
                                    is_integer, "an integer"))
      r.failures = v->get<std::int64_t>();
    if (const auto* v = saved.field("error", is_string, "a string"))
      r.error = v->get<std::string>();
    if (const auto* v = saved.field("objective", is_number, "a number"))
      r.objective = v->get<double>();
    if (const auto* v = saved.field("steps", is_integer, "an integer"))
      r.steps = v->get<std::int64_t>();
    if (const auto* v = saved.field("early_stopped", is_boolean, "true or false"))
      r.early_stopped = v->get<bool>();
  }
  return warnings;
}

void save_trial_state(const std::string& path, const std::vector<TrialRecord>& records) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& r : records) {
    nlohmann::json t = {{"status", r.status},
                        {"failures", r.failures},
                        {"steps", r.steps},
                        {"early_stopped", r.early_stopped},
                        {"error", r.error},
                        {"run_dir", r.run_dir},
                        {"overrides", r.trial.overrides}};
    if (r.objective) t["objective"] = *r.objective;
    j[r.trial.id] = t;
  }
  checkpoint::write_file_atomically(path, json_text(j, 2) + "\n");
}

const TrialRecord* best_trial(const std::vector<TrialRecord>& records, const SweepSpec& spec) {
  const TrialRecord* best = nullptr;
  for (const auto& r : records) {
    if (r.status != "done" || !r.objective) continue;
    if (!best ||
        (spec.maximize ? *r.objective > *best->objective : *r.objective < *best->objective))
      best = &r;
  }
  return best;
}

std::string best_trial_text(const TrialRecord& best, const SweepSpec& spec) {
  return best.trial.id + ": " + spec.metric + " " + number_text(best.objective) + " (" +
         config::join(best.trial.overrides, " ") + ")";
}

void write_trials_csv(const std::string& path, const std::vector<TrialRecord>& records) {
  const auto keys = swept_keys(records);
  std::string out = "trial,status,failures,objective,steps,early_stopped";
  for (const auto& k : keys) out += "," + csv_field(k);
  out += ",run_dir,error\n";
  for (const auto& r : records) {
    out += r.trial.id + "," + r.status + "," + std::to_string(r.failures) + "," +
           number_text(r.objective) + "," + (r.status == "done" ? std::to_string(r.steps) : "") +
           "," + (r.early_stopped ? "true" : "false");
    for (const auto& k : keys) {
      std::string v;
      for (const auto& o : r.trial.overrides)
        if (config::override_key(o) == k) v = value_of(o);
      out += "," + csv_field(v);
    }
    out += "," + csv_field(r.run_dir) + "," + csv_field(r.error) + "\n";
  }
  checkpoint::write_file_atomically(path, out);
}

void write_results_table(const std::string& path, const std::vector<TrialRecord>& records,
                         const SweepSpec& spec) {
  std::vector<const TrialRecord*> order;
  for (const auto& r : records) order.push_back(&r);
  // Ranked ones by the objective, then finished ones without it, then those
  // still to run, then the failed ones.
  const auto group = [](const TrialRecord& r) {
    if (r.status == "done") return r.objective ? 0 : 1;
    return r.status == "failed" ? 3 : 2;
  };
  std::stable_sort(order.begin(), order.end(), [&](const TrialRecord* a, const TrialRecord* b) {
    if (group(*a) != group(*b)) return group(*a) < group(*b);
    if (group(*a) != 0) return false;
    return spec.maximize ? *a->objective > *b->objective : *a->objective < *b->objective;
  });
  const auto keys = swept_keys(records);
  std::size_t done = 0, failed = 0, ranked = 0;
  for (const auto& r : records) {
    done += r.status == "done";
    failed += r.status == "failed";
    ranked += r.status == "done" && r.objective;
  }
  const bool eval_metric = spec.metric.starts_with("eval.");
  std::string out =
      "# Sweep results\n\nObjective: `" + spec.metric + "` (" + (spec.maximize ? "max" : "min") +
      ", " +
      (eval_metric ? "the best of each trial's evaluations" : "each trial's last logged value") +
      "). " + std::to_string(done) + " of " + std::to_string(records.size()) + " trials done, " +
      std::to_string(failed) + " failed.\n\n";
  if (done > 0 && ranked == 0)
    out += "**No finished trial recorded `" + spec.metric + "`: nothing is ranked.**\n\n";
  out += "| rank | trial | status | " + spec.metric + " | steps |";
  for (const auto& k : keys) out += " " + md_cell(k) + " |";
  out += " failures | error |\n|---|---|---|---|---|";
  for (std::size_t i = 0; i < keys.size(); ++i) out += "---|";
  out += "---|---|\n";
  int rank = 0;
  for (const TrialRecord* r : order) {
    const bool ranked = r->status == "done" && r->objective;
    out += "| " + (ranked ? std::to_string(++rank) : std::string("-")) + " | " + r->trial.id +
           " | " + r->status + " | " + number_text(r->objective) + " | " + steps_text(*r) + " |";
    for (const auto& k : keys) {
      std::string v;
      for (const auto& o : r->trial.overrides)
        if (config::override_key(o) == k) v = value_of(o);
      out += " " + md_cell(v) + " |";
    }
    out += " " + std::to_string(r->failures) + " | " + md_cell(r->error) + " |\n";
  }
  checkpoint::write_file_atomically(path, out);
}

}  // namespace trainer::sweep
