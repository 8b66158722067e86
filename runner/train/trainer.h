// The training loop: loader batch > forward > backward > (accumulate) > clip >
// optimizer > metrics > evaluation, one log line per `log_every` steps, metrics
// as JSON lines and a summary at the end.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ops/kernel.h"
#include "runner/graph/program.h"
#include "runner/train/collective.h"
#include "runner/train/session.h"

namespace trainer::train {

// The compile options a config asks for (optimizer state tensors, accumulation).
graph::CompileOptions compile_options(const Session& session);

// Compiles the session's graph on `backend` and initialises its parameters.
std::unique_ptr<graph::Program> compile(const Session& session, Backend& backend);

// Trains; writes metrics.jsonl and summary.json into `run_dir` (which exists on
// the root rank). With several ranks, gradients are averaged over `collective`
// after each step's backward and only the root rank writes. Returns the summary.
nlohmann::json train(const Session& session, graph::Program& program, const std::string& run_dir,
                     Collective& collective);
nlohmann::json train(const Session& session, graph::Program& program, const std::string& run_dir);

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  double top5 = 0;
  std::int64_t samples = 0;
};

EvalResult evaluate(const Session& session, graph::Program& program);

}  // namespace trainer::train
