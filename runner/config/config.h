// Config: the typed, validated form of an experiment's YAML. Every field of the
// fixed sections is declared once in the field registry (runner/config/schema.*),
// which fills these structs, their defaults, `print-config`, the JSON Schema and
// the reference. Polymorphic parts (layers, data sources, transforms) keep their
// `config::Node` and are validated against their own FieldSpec tables
// (ops/ op defs, data/ source and transform defs) by the same mechanism.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/field.h"
#include "runner/config/diagnostics.h"
#include "runner/config/node.h"

namespace trainer::config {

// One `{type: X, ...}` item: a data source or a transform.
struct TypedItem {
  std::string type;
  Attrs attrs;  // validated against X's FieldSpecs, defaults filled, paths resolved
  Mark mark;
};

struct ModelConfig {
  Node node;  // the whole `model:` map (layers, blocks, loss); the graph builder validates it
};

struct DataConfig {
  std::optional<TypedItem> train;
  std::optional<TypedItem> eval;      // its own source, or absent
  double split = 0.0;                 // fraction of train held out for eval when `eval` is absent
  std::vector<TypedItem> transforms;  // applied to training batches
  std::vector<TypedItem> eval_transforms;  // default: the deterministic subset of `transforms`
  std::int64_t workers = 2;
  std::int64_t prefetch = 4;
  bool pin_memory = true;
  bool shuffle = true;
  bool drop_last = true;
};

struct OptimizerConfig {
  std::string type = "sgd";  // sgd | adam | adamw
  double lr = 0.1;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  std::string weight_decay_params = "matrices";  // or "all"
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  std::string lr_scaling = "none";  // none | linear | sqrt (with world size)
};

struct ScheduleConfig {
  std::string type = "constant";  // constant | step | multistep | cosine | linear | onecycle
  std::int64_t warmup_steps = 0;
  std::int64_t step_size = 1000;         // step: decay every N steps
  std::vector<std::int64_t> milestones;  // multistep
  double gamma = 0.1;
  double min_lr = 0.0;     // cosine / linear floor
  double max_lr = 0.0;     // onecycle peak (0: optimizer.lr)
  double pct_start = 0.3;  // onecycle warm fraction
  // onecycle: momentum (sgd) or beta1 (adam) from max_momentum down to
  // base_momentum at the peak, then back (OneCycleLR's cycle_momentum).
  bool cycle_momentum = false;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

// Stop when an evaluation metric has not improved for `patience` evaluations.
struct EarlyStoppingConfig {
  std::int64_t patience = 0;  // evaluations without improvement; 0: off
  std::string metric = "eval.loss";
  std::string mode = "min";  // min: smaller is better; max: larger
  double min_delta = 0.0;    // an improvement must beat the best by more than this
};

struct TrainConfig {
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;     // 0: run `epochs`; otherwise stop after this many optimizer steps
  std::int64_t batch_size = 128;  // global batch per optimizer step
  std::int64_t micro_batch_size = 0;  // 0: derived (batch_size / (accumulation * world))
  bool micro_batch_auto = false;      // `micro_batch_size: auto`
  std::int64_t memory_limit_mib = 0;  // 0: the device's available memory
  double memory_headroom = 0.1;       // fraction of the capacity kept free
  std::int64_t accumulation = 0;      // 0: derived
  double clip_grad_norm = 0.0;        // 0: off
  double ema_decay = 0.0;             // exponential moving average of the weights; 0: off
  bool ema_warmup = false;            // decay min(ema_decay, (1 + t) / (10 + t)) at step t
  std::int64_t eval_every = 0;        // steps; 0: only at epoch ends
  std::int64_t log_every = 50;
  std::int64_t eval_batches = 0;  // evaluate on the first N batches only (0: all)
  EarlyStoppingConfig early_stopping;
};

struct LossScaleConfig {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  std::int64_t hysteresis = 1;
  double min_scale = 1.0;
  double static_scale = 0.0;            // > 0: static loss scaling
  std::int64_t collapse_patience = 10;  // consecutive overflows at min_scale before stopping
};

struct PrecisionConfig {
  std::string mode = "fp32";  // fp32 | tf32 | bf16 | fp16 (`precision: bf16` is shorthand)
  LossScaleConfig loss_scale;
};

struct CheckpointConfig {
  std::int64_t every_steps = 0;
  std::int64_t every_epochs = 1;
  std::int64_t keep_last = 2;
  std::int64_t keep_best = 0;
  std::string metric = "eval.accuracy";
  std::string mode = "max";  // max | min
};

struct DevicesConfig {
  bool cpu = true;                 // `devices: cpu`
  std::vector<std::int64_t> gpus;  // `devices: [0, 1]`
  std::int64_t world_size = 1;     // CPU data-parallel ranks
  // Training runs on the CPU: `devices: cpu`, or no GPU listed.
  bool on_cpu() const { return cpu || gpus.empty(); }
};

struct BackendConfig {
  std::int64_t threads = 0;  // CPU threads; 0: cpu::default_cpu_threads()
  bool autotune = true;
  bool cuda_graphs = true;
  bool fuse_activations = true;
};

struct OutputConfig {
  std::string dir = "runs";  // run directories go to <dir>/<name>/<timestamp>
  bool tensorboard = true;   // events.out.tfevents.trainer in the run directory
};

// The longest run name: one folder name (at most 255 bytes on common file
// systems), with room to spare for what is put next to it.
inline constexpr std::size_t kMaxNameBytes = 200;

struct Config {
  std::string name = "experiment";
  std::int64_t seed = 0;
  bool deterministic = false;
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  TrainConfig train;
  PrecisionConfig precision;
  CheckpointConfig checkpoint;
  DevicesConfig devices;
  BackendConfig backend;
  OutputConfig output;
  Node sweep;  // the `sweep:` section, if any (read by `trainer sweep`)

  std::string source_file;  // the top-level YAML file
  Node resolved;            // the merged tree (extends + overrides) with defaults filled
  // Settings given but without effect (momentum under adam): `validate` and
  // `run` show them as warnings.
  std::vector<Diagnostic> warnings;
};

}  // namespace trainer::config
