// The sweep's trial state file and its two tables.
#include "runner/sweep/trial_record.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/durable_file.h"

namespace trainer::sweep {
namespace {

std::string key_of(const std::string& override_text) {
  return override_text.substr(0, override_text.find('='));
}
std::string value_of(const std::string& override_text) {
  const auto eq = override_text.find('=');
  return eq == std::string::npos ? "" : override_text.substr(eq + 1);
}

std::vector<std::string> swept_keys(const std::vector<TrialRecord>& records) {
  std::vector<std::string> keys;
  for (const auto& r : records)
    for (const auto& o : r.trial.overrides)
      if (std::find(keys.begin(), keys.end(), key_of(o)) == keys.end()) keys.push_back(key_of(o));
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

}  // namespace

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
    r.attempts = t.value("attempts", 0);
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
                        {"attempts", r.attempts},
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
  std::string out = "trial,status,attempts,objective,steps,early_stopped";
  for (const auto& k : keys) out += "," + csv_field(k);
  out += ",run_dir,error\n";
  for (const auto& r : records) {
    out += r.trial.id + "," + r.status + "," + std::to_string(r.attempts) + "," +
           number_text(r.objective) + "," + (r.status == "done" ? std::to_string(r.steps) : "") +
           "," + (r.early_stopped ? "true" : "false");
    for (const auto& k : keys) {
      std::string v;
      for (const auto& o : r.trial.overrides)
        if (key_of(o) == k) v = value_of(o);
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
  std::size_t done = 0, failed = 0;
  for (const auto& r : records) {
    done += r.status == "done";
    failed += r.status == "failed";
  }
  std::string out = "# Sweep results\n\nObjective: `" + spec.metric + "` (" +
                    (spec.maximize ? "max" : "min") + "). " + std::to_string(done) + " of " +
                    std::to_string(records.size()) + " trials done, " + std::to_string(failed) +
                    " failed.\n\n| rank | trial | status | " + spec.metric + " | steps |";
  for (const auto& k : keys) out += " " + md_cell(k) + " |";
  out += " attempts | error |\n|---|---|---|---|---|";
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
        if (key_of(o) == k) v = value_of(o);
      out += " " + md_cell(v) + " |";
    }
    out += " " + std::to_string(r->attempts) + " | " + md_cell(r->error) + " |\n";
  }
  checkpoint::write_file_atomically(path, out);
}

}  // namespace trainer::sweep
