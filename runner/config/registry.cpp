// The declarations of every fixed config field: one line of spec and one binder each.
#include "runner/config/registry.h"

#include <algorithm>

#include "ops/loss_scale_rule.h"
#include "runner/config/diagnostics.h"

namespace trainer::config {
namespace {

using T = FieldType;

// Under an out-of-range loss scale (init_scale, min_scale, static_scale).
constexpr const char* kLossScaleAdvice =
    "float32 multiplies the loss by the scale: below 1e-30 the gradients vanish, and a scale "
    "above 2^64 only makes them overflow (the default start, 65536, suits most fp16 runs)";

std::int64_t int_of(const FieldValue& v) {
  return std::get<std::int64_t>(v);
}
double number_of(const FieldValue& v) {
  return std::get<double>(v);
}
bool bool_of(const FieldValue& v) {
  return std::get<bool>(v);
}
const std::string& string_of(const FieldValue& v) {
  return std::get<std::string>(v);
}
std::vector<std::int64_t> ints_of(const FieldValue& v) {
  if (auto* i = std::get_if<std::int64_t>(&v)) return {*i};
  return std::get<std::vector<std::int64_t>>(v);
}

ConfigField f(FieldSpec spec, Binder bind) {
  return {std::move(spec), std::move(bind), {}, {}};
}

std::vector<SectionDef> build_sections() {
  std::vector<SectionDef> s;

  s.push_back(
      {"",
       "The top level of an experiment.",
       {
           f(field("name", T::string,
                   "Experiment name; run directories are `<output.dir>/<name>/<timestamp>`, so "
                   "it is one folder name of at most 200 bytes: letters, digits, `-`, `_` and `.` "
                   "(not `.` or `..`)")
                 .def("experiment"),
             [](Config& c, const FieldValue& v) { c.name = string_of(v); }),
           f(field("seed", T::integer,
                   "Seed of every random stream (init, shuffle, dropout, augmentation)")
                 .def("0")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.seed = int_of(v); }),
           f(field("deterministic", T::boolean,
                   "Bit-identical results for the same config, machine, backend and compute "
                   "thread count (backend.threads: 0 takes the cores there are; slower "
                   "algorithms)")
                 .def("false"),
             [](Config& c, const FieldValue& v) { c.deterministic = bool_of(v); }),
       },
       {{"extends",
         "A base YAML file (or a list of them), relative to this file; deep-merged under "
         "this one (maps merge, lists replace)"},
        {"model",
         "The network: `layers` (a list of `{type: <op>, ...}` or `{block: <name>, ...}` "
         "items), optional `blocks`, `loss` (a `{type: <loss>, ...}` map or a loss name; default "
         "`{type: cross_entropy}`) and `recompute` (activation checkpointing: layer or "
         "block names, or `{every: N}`, N >= 2), `init_from` (start from a .safetensors file; "
         "`init_strict: false` loads only the tensors that match), `freeze` (layer or block "
         "names whose parameters are not trained), `lr_scale` (layer or block name to a factor "
         "of its parameters' learning rate); validated by the graph builder"},
        {"sweep",
         "Hyperparameter search for `trainer sweep`: `grid`, `random` (trials, seed, params with "
         "uniform / log_uniform / int / choice), `seeds`, `objective` {metric, mode}, "
         "`max_retries` (see docs/experiments.md)"}},
       ""});

  s.push_back(
      {"data",
       "Where samples come from and how the loader feeds them.",
       {
           f(field("split", T::number,
                   "Fraction of `train` held out for evaluation when `eval` is absent (an error "
                   "when `eval` is set)")
                 .def("0")
                 .at_least(0)
                 .at_most(0.9),
             [](Config& c, const FieldValue& v) { c.data.split = number_of(v); }),
           f(field("workers", T::integer, "Loader worker threads")
                 .def("2")
                 .at_least(0)
                 .at_most(256),
             [](Config& c, const FieldValue& v) { c.data.workers = int_of(v); }),
           f(field("prefetch", T::integer,
                   "Batches built ahead of the one the training step uses (the loader holds "
                   "one more, so at most one worker more than this builds at once)")
                 .def("4")
                 .at_least(1)
                 .at_most(1024)
                 .only_while_positive("workers"),
             [](Config& c, const FieldValue& v) { c.data.prefetch = int_of(v); }),
           f(field("pin_memory", T::boolean,
                   "Page-locked host buffers for faster host-to-device copies (GPU runs)")
                 .def("true"),
             [](Config& c, const FieldValue& v) { c.data.pin_memory = bool_of(v); }),
           f(field("shuffle", T::boolean, "Shuffle the training samples every epoch (seeded)")
                 .def("true"),
             [](Config& c, const FieldValue& v) { c.data.shuffle = bool_of(v); }),
           f(field("drop_last", T::boolean, "Drop the last incomplete training batch of an epoch")
                 .def("true"),
             [](Config& c, const FieldValue& v) { c.data.drop_last = bool_of(v); }),
       },
       {{"train", "The training source: `{type: <source>, ...}` (required)"},
        {"eval",
         "The evaluation source: `{type: <source>, ...}` (optional; no value, as `eval:` or "
         "`data.eval=null`, is none, also where a base config names one); after its transforms its "
         "samples must have the training samples' shape, and its classes must be among the "
         "model's (for regression: targets of the same shape)"},
        {"transforms",
         "Transforms applied to training samples: a list of `{type: <transform>, ...}`"},
        {"eval_transforms",
         "Transforms applied to evaluation samples (default: the entries of `transforms` that "
         "act on them: every non-random one, and random_crop as a centre crop)"}},
       ""});

  s.push_back(
      {"optimizer",
       "The parameter update rule.",
       {
           f(field("type", T::enumeration, "Update rule")
                 .def("sgd")
                 .one_of({"sgd", "adam", "adamw"}),
             [](Config& c, const FieldValue& v) { c.optimizer.type = string_of(v); }),
           f(field("lr", T::number, "Base learning rate (before the schedule and lr_scaling)")
                 .def("0.1")
                 .above(0)
                 .in_float32(),
             [](Config& c, const FieldValue& v) { c.optimizer.lr = number_of(v); }),
           f(field("momentum", T::number, "SGD momentum")
                 .def("0.9")
                 .at_least(0)
                 .at_most(1)
                 .only_when("type", {"sgd"}),
             [](Config& c, const FieldValue& v) { c.optimizer.momentum = number_of(v); }),
           f(field("nesterov", T::boolean, "SGD with Nesterov momentum")
                 .def("false")
                 .only_when("type", {"sgd"})
                 .only_while_positive("momentum"),
             [](Config& c, const FieldValue& v) { c.optimizer.nesterov = bool_of(v); }),
           f(field("weight_decay", T::number,
                   "L2 penalty (sgd, adam) or decoupled decay (adamw), on the parameters "
                   "`weight_decay_params` names")
                 .def("0")
                 .at_least(0)
                 .in_float32(),
             [](Config& c, const FieldValue& v) { c.optimizer.weight_decay = number_of(v); }),
           f(field("weight_decay_params", T::enumeration,
                   "Which parameters weight_decay acts on: `matrices` (linear and conv weights, "
                   "every parameter of 2 or more dimensions; biases and normalisation scales "
                   "and shifts are left alone) or `all` (every trainable parameter, as "
                   "torch.optim does with one parameter group)")
                 .def("matrices")
                 .one_of({"matrices", "all"}),
             [](Config& c, const FieldValue& v) {
               c.optimizer.weight_decay_params = string_of(v);
             }),
           f(field("beta1", T::number, "Adam first-moment decay")
                 .def("0.9")
                 .at_least(0)
                 .at_most(0.999999)
                 .only_when("type", {"adam", "adamw"}),
             [](Config& c, const FieldValue& v) { c.optimizer.beta1 = number_of(v); }),
           f(field("beta2", T::number, "Adam second-moment decay")
                 .def("0.999")
                 .at_least(0)
                 .at_most(0.999999)
                 .only_when("type", {"adam", "adamw"}),
             [](Config& c, const FieldValue& v) { c.optimizer.beta2 = number_of(v); }),
           f(field("eps", T::number, "Adam denominator epsilon")
                 .def("1e-8")
                 .above(0)
                 .in_float32()
                 .only_when("type", {"adam", "adamw"}),
             [](Config& c, const FieldValue& v) { c.optimizer.eps = number_of(v); }),
           f(field("lr_scaling", T::enumeration,
                   "Scale the learning rates (lr, and the schedule's min_lr and max_lr) with the "
                   "number of data-parallel ranks")
                 .def("none")
                 .one_of({"none", "linear", "sqrt"}),
             [](Config& c, const FieldValue& v) { c.optimizer.lr_scaling = string_of(v); }),
       },
       {},
       ""});

  s.push_back(
      {"schedule",
       "How the learning rate changes over optimizer steps.",
       {
           f(field("type", T::enumeration, "Schedule shape")
                 .def("constant")
                 .one_of({"constant", "step", "multistep", "cosine", "linear", "onecycle",
                          "range_test"}),
             [](Config& c, const FieldValue& v) { c.schedule.type = string_of(v); }),
           f(field("warmup_steps", T::integer,
                   "Linear warm-up: step k < warmup_steps (from 0) uses lr * (k + 1) / "
                   "warmup_steps; the schedule's shape then spans the steps after it (`step` "
                   "counts step_size from there; `multistep` milestones stay absolute steps, "
                   "and those inside the warm-up all apply at its end: the rate rises to lr, "
                   "then drops)")
                 .def("0")
                 .at_least(0)
                 .only_when("type", {"constant", "step", "multistep", "cosine", "linear"}),
             [](Config& c, const FieldValue& v) { c.schedule.warmup_steps = int_of(v); }),
           f(field("step_size", T::integer, "step: multiply lr by gamma every step_size steps")
                 .def("1000")
                 .at_least(1)
                 .only_when("type", {"step"}),
             [](Config& c, const FieldValue& v) { c.schedule.step_size = int_of(v); }),
           f(field("milestones", T::int_list,
                   "multistep: steps at which lr is multiplied by gamma (increasing)")
                 .def("[]")
                 .at_least(1)
                 .only_when("type", {"multistep"}),
             [](Config& c, const FieldValue& v) { c.schedule.milestones = ints_of(v); }),
           f(field("gamma", T::number, "step / multistep decay factor")
                 .def("0.1")
                 .above(0)
                 .at_most(1)
                 .only_when("type", {"step", "multistep"}),
             [](Config& c, const FieldValue& v) { c.schedule.gamma = number_of(v); }),
           f(field("min_lr", T::number,
                   "cosine / linear: the rate the schedule reaches after the last step (the last "
                   "step itself trains just above it, as PyTorch's CosineAnnealingLR with T_max "
                   "the step count)")
                 .def("0")
                 .at_least(0)
                 .in_float32()
                 .only_when("type", {"cosine", "linear"}),
             [](Config& c, const FieldValue& v) { c.schedule.min_lr = number_of(v); }),
           f(field("max_lr", T::number,
                   "onecycle: peak learning rate (0: optimizer.lr); range_test: the last "
                   "step's rate, which grows exponentially from optimizer.lr at the first "
                   "(the learning-rate range test of `trainer lr-find`)")
                 .def("0")
                 .at_least(0)
                 .in_float32()
                 .only_when("type", {"onecycle", "range_test"}),
             [](Config& c, const FieldValue& v) { c.schedule.max_lr = number_of(v); }),
           f(field("pct_start", T::number,
                   "onecycle: fraction of the steps spent rising (as PyTorch's OneCycleLR: "
                   "from max_lr/25 to max_lr, then down to max_lr/25/1e4 at the last step)")
                 .def("0.3")
                 .above(0)
                 .at_most(1)
                 .only_when("type", {"onecycle"}),
             [](Config& c, const FieldValue& v) { c.schedule.pct_start = number_of(v); }),
           f(field("cycle_momentum", T::boolean,
                   "onecycle: cycle the momentum against the learning rate, as OneCycleLR's "
                   "cycle_momentum=True (PyTorch's default): from max_momentum down to "
                   "base_momentum while the rate rises, then back; it replaces sgd's momentum "
                   "(an sgd without momentum gains it) and adam's beta1")
                 .def("false")
                 .only_when("type", {"onecycle"}),
             [](Config& c, const FieldValue& v) { c.schedule.cycle_momentum = bool_of(v); }),
           f(field("base_momentum", T::number,
                   "onecycle with cycle_momentum: the momentum at the peak learning rate")
                 .def("0.85")
                 .at_least(0)
                 .at_most(0.999999)
                 .only_when("cycle_momentum", {"true"}),
             [](Config& c, const FieldValue& v) { c.schedule.base_momentum = number_of(v); }),
           f(field("max_momentum", T::number,
                   "onecycle with cycle_momentum: the momentum at the first and the last step")
                 .def("0.95")
                 .at_least(0)
                 .at_most(0.999999)
                 .only_when("cycle_momentum", {"true"}),
             [](Config& c, const FieldValue& v) { c.schedule.max_momentum = number_of(v); }),
       },
       {},
       ""});

  s.push_back(
      {"train",
       "The training loop. `max_steps > 0` wins over `epochs`; one of them must be > 0.",
       {
           f(field("epochs", T::integer,
                   "Passes over the training data (ignored when max_steps > 0)")
                 .def("1")
                 .at_least(0)
                 .at_most(1e9),
             [](Config& c, const FieldValue& v) { c.train.epochs = int_of(v); }),
           f(field("max_steps", T::integer,
                   "Stop after this many optimizer steps (0: run `epochs`)")
                 .def("0")
                 .at_least(0)
                 .at_most(1e12),
             [](Config& c, const FieldValue& v) { c.train.max_steps = int_of(v); }),
           f(field("batch_size", T::integer,
                   "Global batch per optimizer step (over all ranks and accumulation)")
                 .def("128")
                 .at_least(1)
                 .at_most(1e9),
             [](Config& c, const FieldValue& v) { c.train.batch_size = int_of(v); }),
           {field("micro_batch_size", T::integer,
                  "Samples per forward/backward pass per rank (0: batch_size / (accumulation * "
                  "world); `auto`: the largest that fits)")
                .def("0")
                .at_least(0),
            [](Config& c, const FieldValue& v) { c.train.micro_batch_size = int_of(v); }, "auto",
            [](Config& c) {
              c.train.micro_batch_auto = true;
              c.train.micro_batch_size = 0;
            }},
           f(field("accumulation", T::integer,
                   "Micro-batches accumulated per optimizer step (0: derived)")
                 .def("0")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.train.accumulation = int_of(v); }),
           f(field("clip_grad_norm", T::number,
                   "Clip the global gradient norm to this value (0: off)")
                 .def("0")
                 .at_least(0)
                 .in_float32(),
             [](Config& c, const FieldValue& v) { c.train.clip_grad_norm = number_of(v); }),
           f(field("ema_decay", T::number,
                   "Exponential moving average of the weights: after every step ema = ema_decay "
                   "* ema + (1 - ema_decay) * w for every parameter and batchnorm statistic, "
                   "starting from the initial weights (timm's ModelEmaV2); evaluations, "
                   "keep_best and `trainer eval` use the averaged weights, and each checkpoint "
                   "holds them in model_ema.safetensors (0: off)")
                 .def("0")
                 .at_least(0)
                 .at_most(0.999999),
             [](Config& c, const FieldValue& v) { c.train.ema_decay = number_of(v); }),
           f(field("ema_warmup", T::boolean,
                   "Warm the average up: the decay of step t (from 0) is min(ema_decay, (1 + t) "
                   "/ (10 + t)), as TensorFlow's ExponentialMovingAverage with num_updates, so "
                   "that the average leaves the initial weights behind quickly")
                 .def("false")
                 .only_while_positive("ema_decay"),
             [](Config& c, const FieldValue& v) { c.train.ema_warmup = bool_of(v); }),
           f(field("eval_every", T::integer,
                   "Evaluate also every N steps (0: only at the end of each epoch, which evaluates "
                   "either way)")
                 .def("0")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.train.eval_every = int_of(v); }),
           f(field("log_every", T::integer,
                   "Log one line every N steps, and one at the last step (a log_every beyond "
                   "the run's steps logs the last step only; a run that early stopping ends "
                   "between log points ends with its last log point's line)")
                 .def("50")
                 .at_least(1),
             [](Config& c, const FieldValue& v) { c.train.log_every = int_of(v); }),
           f(field("eval_batches", T::integer,
                   "Evaluate on the first N micro-batches of the eval split only, on each rank "
                   "(0: all of it)")
                 .def("0")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.train.eval_batches = int_of(v); }),
           f(field(
                 "memory_limit_mib", T::integer,
                 "Memory the job may use per device, in MiB: `run`, `time` and (on the CPU) "
                 "`validate` refuse a plan that does not fit it, and micro_batch_size: auto "
                 "fits it (0: what the device has available, free GPU memory or available "
                 "RAM within the process's cgroup and ulimit -v, for `plan` and auto, and "
                 "which `run`, `time` and (on the CPU) `validate` and `sweep`'s check of each "
                 "trial refuse a plan larger than, loader batches on the host "
                 "left out on a GPU); CPU ranks on one machine share it, each planning for its "
                 "share (each has a ulimit -v of its own whole). The "
                 "plan counts the training's memory (parameters, gradients, optimizer state, "
                 "activations, workspace, loader buffers), not the process's libraries or "
                 "data read into memory; a checkpoint being written or loaded adds at most 16 MiB")
                 .def("0")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.train.memory_limit_mib = int_of(v); }),
           f(field("memory_headroom", T::number,
                   "Fraction of the capacity kept free when checking the fit and choosing an "
                   "automatic micro-batch")
                 .def("0.1")
                 .at_least(0)
                 .at_most(0.9),
             [](Config& c, const FieldValue& v) { c.train.memory_headroom = number_of(v); }),
       },
       {},
       ""});

  s.push_back(
      {"train.early_stopping",
       "Stop training when an evaluation metric has stopped improving: after `patience` "
       "evaluations in a row that do not beat the best by more than `min_delta`, the run writes "
       "a checkpoint and ends (summary.json `early_stopped`).",
       {
           f(field("patience", T::integer,
                   "Evaluations without improvement before training stops (0: off)")
                 .def("0")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.train.early_stopping.patience = int_of(v); }),
           f(field("metric", T::string,
                   "The evaluation metric followed: eval.loss, eval.accuracy or eval.top5 "
                   "(more than 5 classes)")
                 .def("eval.loss")
                 .only_while_positive("patience"),
             [](Config& c, const FieldValue& v) { c.train.early_stopping.metric = string_of(v); }),
           f(field("mode", T::enumeration, "Whether a smaller or larger metric is better")
                 .def("min")
                 .one_of({"min", "max"})
                 .only_while_positive("patience"),
             [](Config& c, const FieldValue& v) { c.train.early_stopping.mode = string_of(v); }),
           f(field("min_delta", T::number,
                   "An evaluation improves only when it beats the best by more than this")
                 .def("0")
                 .at_least(0)
                 .only_while_positive("patience"),
             [](Config& c, const FieldValue& v) {
               c.train.early_stopping.min_delta = number_of(v);
             }),
       },
       {},
       ""});

  s.push_back(
      {"precision",
       "Numeric precision of compute. `precision: bf16` is short for `precision: {mode: bf16}`.",
       {
           f(field("mode", T::enumeration,
                   "fp32; tf32 (fp32 storage, TF32 matmuls on GPU); bf16 / fp16 mixed precision "
                   "with fp32 master weights")
                 .def("fp32")
                 .one_of({"fp32", "tf32", "bf16", "fp16"}),
             [](Config& c, const FieldValue& v) { c.precision.mode = string_of(v); }),
       },
       {},
       "mode"});

  s.push_back(
      {"precision.loss_scale",
       "Loss scaling (fp16): a step whose gradients overflow is skipped (the learning-rate "
       "schedule does not advance); the dynamic scale backs off on overflow and grows after "
       "clean steps.",
       {
           f(field("init_scale", T::number,
                   "Initial loss scale, at most 2^64 (PyTorch's GradScaler starts at 65536 "
                   "too; the dynamic scale grows to 2^24 at most)")
                 .def("65536")
                 .above(0)
                 .at_most(kLargestConfiguredLossScale)
                 .in_float32()
                 .advice_when_out_of_range(kLossScaleAdvice),
             [](Config& c, const FieldValue& v) {
               c.precision.loss_scale.init_scale = number_of(v);
             }),
           f(field("growth_factor", T::number,
                   "Multiply the scale by this after growth_interval clean steps")
                 .def("2")
                 .above(1),
             [](Config& c, const FieldValue& v) {
               c.precision.loss_scale.growth_factor = number_of(v);
             }),
           f(field("backoff_factor", T::number, "Multiply the scale by this on overflow")
                 .def("0.5")
                 .above(0)
                 .at_most(0.999),
             [](Config& c, const FieldValue& v) {
               c.precision.loss_scale.backoff_factor = number_of(v);
             }),
           f(field("growth_interval", T::integer, "Clean steps before the scale grows")
                 .def("2000")
                 .at_least(1),
             [](Config& c, const FieldValue& v) {
               c.precision.loss_scale.growth_interval = int_of(v);
             }),
           f(field("hysteresis", T::integer,
                   "Consecutive overflowing steps before the scale backs off (1: at each)")
                 .def("1")
                 .at_least(1),
             [](Config& c, const FieldValue& v) { c.precision.loss_scale.hysteresis = int_of(v); }),
           f(field("min_scale", T::number, "The scale never goes below this")
                 .def("1")
                 .above(0)
                 .at_most(kLargestConfiguredLossScale)
                 .in_float32()
                 .advice_when_out_of_range(kLossScaleAdvice),
             [](Config& c, const FieldValue& v) {
               c.precision.loss_scale.min_scale = number_of(v);
             }),
           f(field("static_scale", T::number, "> 0: a fixed loss scale instead of the dynamic one")
                 .def("0")
                 .at_least(0)
                 .at_most(kLargestConfiguredLossScale)
                 .in_float32()
                 .advice_when_out_of_range(kLossScaleAdvice),
             [](Config& c, const FieldValue& v) {
               c.precision.loss_scale.static_scale = number_of(v);
             }),
           f(field("collapse_patience", T::integer,
                   "Stop with a diagnosis after this many consecutive steps overflow at "
                   "min_scale (or at the static scale)")
                 .def("10")
                 .at_least(1),
             [](Config& c, const FieldValue& v) {
               c.precision.loss_scale.collapse_patience = int_of(v);
             }),
       },
       {},
       ""});
  // Every loss-scaling setting acts under fp16 only.
  for (ConfigField& field : s.back().fields) field.spec.only_when("precision.mode", {"fp16"});

  s.push_back(
      {"checkpoint",
       "When checkpoints are written and which are kept.",
       {
           f(field("every_steps", T::integer, "Write a checkpoint every N optimizer steps (0: off)")
                 .def("0")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.checkpoint.every_steps = int_of(v); }),
           f(field("every_epochs", T::integer, "Write a checkpoint every N epochs (0: off)")
                 .def("1")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.checkpoint.every_epochs = int_of(v); }),
           f(field("keep_last", T::integer,
                   "Keep the N most recent checkpoints (0: keep all); one a stop signal saved off "
                   "the schedule is kept only while it is the newest, and not counted")
                 .def("2")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.checkpoint.keep_last = int_of(v); }),
           f(field("keep_best", T::integer,
                   "Also keep the N best checkpoints by `metric`, as measured on each one's own "
                   "weights: with an eval.* metric every evaluation is followed by a checkpoint; "
                   "a train.* metric ranks the checkpoints taken at a log step")
                 .def("0")
                 .at_least(0),
             [](Config& c, const FieldValue& v) { c.checkpoint.keep_best = int_of(v); }),
           f(field("metric", T::string,
                   "Metric that ranks checkpoints for keep_best and `trainer eval --checkpoint "
                   "best`: eval.loss, eval.accuracy, eval.top5 (more than 5 classes), train.loss "
                   "or train.accuracy; a loss wants mode: min")
                 .def("eval.accuracy"),
             [](Config& c, const FieldValue& v) { c.checkpoint.metric = string_of(v); }),
           f(field("mode", T::enumeration, "Whether a larger or smaller metric is better")
                 .def("max")
                 .one_of({"max", "min"}),
             [](Config& c, const FieldValue& v) { c.checkpoint.mode = string_of(v); }),
       },
       {},
       ""});

  s.push_back(
      {"devices",
       "Where to run. `devices: cpu` (the default) or `devices: [0, 1]` (GPU indices) are short "
       "for this map.",
       {
           f(field("gpus", T::int_list, "GPU indices, one data-parallel rank each (empty: CPU)")
                 .def("[]")
                 .at_least(0)
                 .at_most(1023),
             [](Config& c, const FieldValue& v) {
               c.devices.gpus = ints_of(v);
               c.devices.cpu = c.devices.gpus.empty();
             }),
           f(field("world_size", T::integer,
                   "CPU data-parallel ranks (with GPUs the rank count is the GPU list)")
                 .def("1")
                 .at_least(1),
             [](Config& c, const FieldValue& v) { c.devices.world_size = int_of(v); }),
       },
       {},
       ""});

  s.push_back(
      {"backend",
       "Backend tuning.",
       {
           f(field("threads", T::integer,
                   "CPU compute threads (0: OMP_NUM_THREADS when set, else every CPU this process "
                   "may run on, shared among the ranks of a node)")
                 .def("0")
                 .at_least(0)
                 .at_most(4096),
             [](Config& c, const FieldValue& v) { c.backend.threads = int_of(v); }),
           f(field("autotune", T::boolean,
                   "Benchmark candidate algorithms once and keep the fastest (cuDNN)")
                 .def("true"),
             [](Config& c, const FieldValue& v) { c.backend.autotune = bool_of(v); }),
           f(field("cuda_graphs", T::boolean,
                   "GPU: replay every training and evaluation step from one CUDA graph, "
                   "captured at the second step (runs kernel by kernel, with the reason in "
                   "manifest.json step_execution, when capture fails)")
                 .def("true"),
             [](Config& c, const FieldValue& v) { c.backend.cuda_graphs = bool_of(v); }),
           f(field("fuse_activations", T::boolean,
                   "Fold an activation layer into the layer before it when the backend applies "
                   "it inside that layer's kernel: relu after linear, batchnorm and add on CPU; "
                   "relu after linear and add, and gelu with approximate: tanh after linear, on "
                   "GPU")
                 .def("true"),
             [](Config& c, const FieldValue& v) { c.backend.fuse_activations = bool_of(v); }),
       },
       {},
       ""});

  s.push_back({"output",
               "Where runs are written.",
               {
                   f(field("dir", T::string,
                           "Parent directory of run directories; a relative one is relative "
                           "to the working directory (not to the YAML file, unlike data paths)")
                         .def("runs"),
                     [](Config& c, const FieldValue& v) { c.output.dir = string_of(v); }),
                   f(field("tensorboard", T::boolean,
                           "Also write the metrics as TensorBoard scalars "
                           "(events.out.tfevents.trainer in the run directory)")
                         .def("true"),
                     [](Config& c, const FieldValue& v) { c.output.tensorboard = bool_of(v); }),
               },
               {},
               ""});
  return s;
}

}  // namespace

const std::vector<SectionDef>& config_sections() {
  static const std::vector<SectionDef> sections = build_sections();
  return sections;
}

const SectionDef* find_section(const std::string& path) {
  for (const auto& s : config_sections())
    if (s.path == path) return &s;
  return nullptr;
}

std::vector<FieldSpec> field_specs(const SectionDef& section) {
  std::vector<FieldSpec> specs;
  for (const auto& f : section.fields) specs.push_back(f.spec);
  return specs;
}

std::vector<std::string> child_sections(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& s : config_sections()) {
    if (s.path.empty() || s.path == path) continue;
    const auto dot = s.path.rfind('.');
    const std::string parent = dot == std::string::npos ? "" : s.path.substr(0, dot);
    if (parent == path) out.push_back(section_name(s.path));
  }
  return out;
}

std::string section_name(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string config_key_named(const std::string& name) {
  std::string word = name;
  std::replace(word.begin(), word.end(), '-', '_');
  const auto dot = word.rfind('.');
  const std::string path = dot == std::string::npos ? "" : word.substr(0, dot);
  std::string field = dot == std::string::npos ? word : word.substr(dot + 1);
  if (const std::string ours = ours_for(field); !ours.empty()) field = ours;
  std::vector<std::string> keys;
  for (const SectionDef& section : config_sections()) {
    if (dot != std::string::npos && section.path != path) continue;
    for (const ConfigField& f : section.fields)
      if (f.spec.name == field)
        keys.push_back(section.path.empty() ? field : section.path + "." + field);
  }
  return keys.size() == 1 ? keys.front() : "";
}

}  // namespace trainer::config
