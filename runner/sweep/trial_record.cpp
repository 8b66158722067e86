// The sweep's trial state file, its two tables, and what it reads of a
// trial's run directory.
#include "runner/sweep/trial_record.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/durable_file.h"
#include "runner/config/overrides.h"
#include "runner/sweep/objective.h"

namespace trainer::sweep {
namespace {

std::string value_of(const std::string& override_text) {
  const auto eq = override_text.find('=');
  return eq == std::string::npos ? "" : override_text.substr(eq + 1);
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

// The run's summary.json when it says the run completed, else null.
nlohmann::json completed_summary(const std::string& run_dir) {
  std::ifstream in(std::filesystem::path(run_dir) / "summary.json");
  if (!in) return nullptr;
  nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
  if (s.is_discarded() || !s.is_object() || s.value("status", "complete") != "complete")
    return nullptr;
  return s;
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

void load_trial_state(const std::string& path, std::vector<TrialRecord>& records) {
  std::ifstream in(path);
  if (!in) return;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return;  // rewritten from the run directories
  }
  for (auto& r : records) {
    if (!j.contains(r.trial.id)) continue;
    const auto& t = j[r.trial.id];
    r.status = t.value("status", "pending");
    r.failures = t.value("failures", t.value("attempts", std::int64_t{0}));
    r.error = t.value("error", "");
    if (t.contains("objective") && t["objective"].is_number())
      r.objective = t["objective"].get<double>();
    r.steps = t.value("steps", std::int64_t{0});
    r.early_stopped = t.value("early_stopped", false);
  }
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
  checkpoint::write_file_atomically(path, j.dump(2) + "\n");
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
  std::stable_sort(order.begin(), order.end(), [&](const TrialRecord* a, const TrialRecord* b) {
    const bool ra = a->status == "done" && a->objective, rb = b->status == "done" && b->objective;
    if (ra != rb) return ra;
    if (!ra) return false;
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
