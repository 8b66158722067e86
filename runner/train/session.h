// Session: everything a run, a plan or a timing needs, prepared from a
// validated Config: the opened datasets and transform pipelines, the batch
// arithmetic (global = micro x accumulation x world), and the model graph.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/transforms.h"
#include "ops/collective.h"
#include "ops/kernel.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/config/config.h"
#include "runner/config/diagnostics.h"
#include "runner/graph/autodiff.h"
#include "runner/graph/ir.h"

namespace trainer::train {

// How the error at data.train of a training sample that normalize's
// statistics could not read begins (`validate --data` lists every such
// sample instead).
inline const std::string kStatisticsReadError = "normalize's statistics cannot read a sample: ";

struct BatchPlan {
  std::int64_t global = 0;        // samples per optimizer step, all ranks
  std::int64_t micro = 0;         // samples per forward/backward on one rank
  std::int64_t accumulation = 1;  // micro-batches per optimizer step
  std::int64_t world = 1;
};

struct Session {
  config::Config config;
  std::shared_ptr<data::Dataset> train_data;
  std::shared_ptr<data::Dataset> eval_data;  // null: no evaluation
  std::shared_ptr<const data::Pipeline> train_pipeline;
  std::shared_ptr<const data::Pipeline> eval_pipeline;
  Shape sample_shape;  // after transforms
  std::int64_t num_classes = 0;
  BatchPlan batch;
  graph::Graph graph;
  // The ranks of a data-parallel run, for kernels that reduce inside a step
  // (batchnorm with sync); null: this process alone. Set by `trainer run`.
  Collective* collective = nullptr;
  // model.init_from with its links resolved once, when the session opened:
  // the check, the load and the manifest's record all read this one file,
  // though a link such as another run's checkpoints/last moves on to a newer
  // checkpoint meanwhile. "" without init_from, and on a resume from a
  // checkpoint, whose weights replace them (the file may be gone since).
  std::string init_from_file;
  // Settings this session accepts that can have no effect in it (early
  // stopping in a run too short to stop): `run` and `validate` print them.
  std::vector<config::Diagnostic> warnings;
  // false: a session that only evaluates (prepare_eval_session): what only
  // training's batches need (one that the training set fills, a batchnorm
  // with more than one value per channel, steps to train) is not asked.
  bool trains = true;
};

// The mark of a key path in the resolved config ("train.batch_size",
// "data.train.files[1]"), for errors; the nearest enclosing one where the
// path goes further than the config.
config::Mark mark_of(const config::Config& config, const std::string& path);

// The mark of `path` when the user wrote it; else of the nearest enclosing
// key they wrote (the file's start when none): never a default's.
config::Mark written_mark_of(const config::Config& config, const std::string& path);

// Splits the global batch; reports a batch that does not divide, with the key's position.
BatchPlan plan_batches(const config::Config& config, config::Diagnostics& diags);

// Opens the data (reading headers and files) and builds the model graph.
// Throws config::ConfigError for anything the user can fix in the YAML, and
// std::runtime_error for bad data files (the message names the file).
// `class_names`: the classes a run recorded for its training data
// (recorded_class_names), for a source standing in for training data that is
// gone: the source's labels then follow those names. `use_init_from`: false
// on a resume from a checkpoint (Session::init_from_file stays "": the file is
// not looked at).
Session prepare_session(const config::Config& config,
                        const std::vector<std::string>& class_names = {},
                        bool use_init_from = true);

// prepare_session for evaluating a checkpoint (`trainer eval`): the model
// and the data as for a run, without the checks that only training needs
// (Session::trains) and without model.init_from.
Session prepare_eval_session(const config::Config& config,
                             const std::vector<std::string>& class_names = {});

// The training and evaluation sets as a session opens them (classes matched
// by name to `class_names` when given, the held-out split made), without
// transforms, statistics or model: what reading every sample needs. Throws
// as prepare_session does.
struct SessionData {
  std::shared_ptr<data::Dataset> train;
  std::shared_ptr<data::Dataset> eval;  // null: no evaluation
};
SessionData open_session_data(const config::Config& config,
                              const std::vector<std::string>& class_names = {});

// The classes of the training data (0: regression targets), opening only its
// source: no transforms, statistics or model. Throws as prepare_session does.
std::int64_t training_classes(const config::Config& config);

// model.init_from, resolved against the YAML file that names it; "" when the
// model has none. Throws ConfigError (at its position) when it is not a path
// or names no readable file.
std::string init_from_path(const config::Config& config);

// model.init_strict (default true): every parameter must load from init_from.
bool init_strict(const config::Config& config);

// The init_from file reads, with init_strict fills every parameter of
// s.graph, and holds only finite values in the tensors it would load: errors
// at model.init_from listing each tensor that does not fit, or naming the
// first value that is not finite, what `run` would refuse when it loads the
// weights.
void check_init_from(const Session& s, config::Diagnostics& diags);

// What to do with weights `file` that do not fit s.graph strictly, when they
// are recognisably its weights stored or named another way (another dtype,
// transposed, under a prefix, a checkpoint's state file); "" otherwise.
std::string weights_fit_advice(const Session& s, const checkpoint::Safetensors& file);

// (Re)builds s.graph for s.batch.micro and s.config (compute types included).
void build_model_graph(Session& s);

// The training graph of s.graph lowered for `backend`: the activation formats
// its kernels run fastest on (graph/formats.h), then the backward pass.
graph::TrainingGraph training_graph(const Session& s, const Backend& backend);

// The same session with micro-batch `micro` (dividing the per-rank batch) and
// the accumulation that keeps the global batch.
Session with_micro_batch(const Session& s, std::int64_t micro);

}  // namespace trainer::train
