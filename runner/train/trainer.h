// The training loop: loader batch > forward > backward > (accumulate) > clip >
// optimizer > metrics > evaluation > checkpoint, one log line per `log_every`
// steps, metrics as JSON lines and a summary at the end. A run resumes exactly
// (bit-identical metrics with `deterministic: true`) from its newest good
// checkpoint; SIGINT / SIGTERM finish the step, checkpoint and stop. Also what
// the loop and the commands share: compiling a session, its optimizer and
// loader settings, feeding a batch, the rows its loss counts, evaluation.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "ops/collective.h"
#include "ops/kernel.h"
#include "runner/graph/program.h"
#include "runner/train/metrics.h"
#include "runner/train/session.h"

namespace trainer::train {

// The compile options a config asks for (optimizer state tensors, accumulation).
graph::CompileOptions compile_options(const Session& session);

// The optimizer a config asks for, at its base learning rate, with clipping
// inside the update unless fp16 loss scaling clips on the host.
OptimizerStep configured_optimizer(const config::Config& config);

// The loader settings of a session's training (shuffled, its ranks' share when
// `collective` has several) or evaluation data, its batch ring in the
// backend's host memory.
data::LoaderOptions loader_options(const Session& session, bool training, Backend& backend,
                                   const Collective* collective = nullptr);

// The loader settings evaluate() reads the evaluation data with: the
// evaluation's, each sample in exactly one rank's shard. Its ring is allocated
// at every evaluation, while the training loader's is alive.
data::LoaderOptions eval_loader_options(const Session& session, Backend& backend,
                                        const Collective* collective = nullptr);

// The label the session's loss leaves out: cross_entropy's ignore_index
// (default -100, the loader's padding label); nullopt for a loss without one.
std::optional<std::int64_t> ignored_label(const Session& session);

// The real rows of `batch` the loss averages over: those whose label is not
// `ignored` (every real row for regression targets, or without `ignored`).
std::int64_t counted_rows(const data::Batch& batch, std::optional<std::int64_t> ignored);

// Top-1 / top-5 hits of `logits` against the labels of `batch`'s counted
// rows: an ignored row is in neither the hits nor Hits::rows.
Hits count_counted_hits(const float* logits, const data::Batch& batch, std::int64_t classes,
                        std::optional<std::int64_t> ignored);

// Copies a batch into the program's input buffers, checking its real rows'
// labels against the model: each in [0, classes) or equal to `ignored`.
void feed(graph::Program& program, const data::Batch& batch, std::int64_t classes,
          std::optional<std::int64_t> ignored = std::nullopt);

// Compiles the session's graph on `backend` and initialises its parameters
// (seeded, then `model.init_from` when given).
std::unique_ptr<graph::Program> compile(const Session& session, Backend& backend);

// The weights a run starts from: seeded initial values for every parameter,
// then `model.init_from` when given; zeroed optimizer state.
void initialize_parameters(const Session& session, graph::Program& program);

// Training diverged: a non-finite loss or non-finite weights, or fp16 loss
// scaling that collapsed. A run fails with it; a learning-rate range test
// (`trainer lr-find`) ends its range there.
class DivergedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainOptions {
  bool resume = false;  // continue from the newest good checkpoint under run_dir/checkpoints
  // Called once the checkpoint to resume from has loaded (or, for a new run,
  // the parameters are initialised), before the loop writes anything in the
  // run directory: a resume that is refused leaves the directory as it was.
  std::function<void()> before_writing;
};

// Trains; writes metrics.jsonl and summary.json into `run_dir` (which exists on
// the root rank). With several ranks, gradients are averaged over `collective`
// after each step's backward and only the root rank writes. Returns the summary.
// The summary's "status" is "complete", or "interrupted" with "signal" set
// when SIGINT / SIGTERM stopped it after writing a checkpoint.
nlohmann::json train(const Session& session, graph::Program& program, const std::string& run_dir,
                     Collective& collective, const TrainOptions& options);
nlohmann::json train(const Session& session, graph::Program& program, const std::string& run_dir,
                     Collective& collective);
nlohmann::json train(const Session& session, graph::Program& program, const std::string& run_dir);

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  double top5 = 0;
  std::int64_t samples = 0;
  // stop_early answered true before the last batch: the figures are partial.
  bool interrupted = false;
};

// The model on the eval split (up to train.eval_batches micro-batches per
// rank). The loss is the mean over every counted row of the set (rows whose
// label is the loss's ignore_index count in neither it nor the accuracy),
// whatever the batch size; 0 when no row counts. With several ranks each
// evaluates its shard and the sums are added over `collective`: every rank
// returns the same result, that of one rank evaluating all of it (to float
// rounding). `stop_early`, when given, is asked before each batch (a single
// process only: the ranks of a job could not agree on where to stop).
EvalResult evaluate(const Session& session, graph::Program& program, Collective& collective,
                    const std::function<bool()>& stop_early = nullptr);

}  // namespace trainer::train
