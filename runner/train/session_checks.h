// The checks of a session against its model and settings that need the data
// opened: run by prepare_session, so `trainer validate` reports them too, and
// a run finds them before it starts instead of at its first evaluation or
// checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/kernel.h"
#include "runner/config/config.h"
#include "runner/config/diagnostics.h"
#include "runner/train/session.h"

namespace trainer::train {

// The training set fills at least one optimizer step per epoch (error at
// train.batch_size otherwise).
void check_batch_fills(const config::Config& config, const Session& s, config::Diagnostics& diags);

// Optimizer steps in an epoch of `micro_batches`: with drop_last a partial
// global batch is dropped; without it the last step takes the micro-batches left.
std::int64_t steps_in_epoch(std::int64_t micro_batches, std::int64_t accumulation, bool drop_last);

// The optimizer steps a run takes: train.max_steps, or train.epochs epochs of
// `steps_per_epoch`. nullopt, with an error at train.epochs, when that
// product is beyond what 64 bits count.
std::optional<std::int64_t> total_steps(const config::Config& config, std::int64_t steps_per_epoch,
                                        config::Diagnostics& diags);

// The session's train.epochs of steps can be counted (total_steps).
void check_total_steps(const config::Config& config, const Session& s, config::Diagnostics& diags);

// Classes inferred from data.train's labels (no `classes:`) more than twice
// what the model's last layer gives: an error at data.train naming the file
// and the sample (line, element) of the largest label, most likely a wrong
// one, instead of the model check's "set the last layer's size to <huge>".
// Builds the model's graph on the side to learn its outputs.
void check_inferred_classes(const config::Config& config, const Session& s,
                            config::Diagnostics& diags);

// An evaluation set of its own gives what the model was built for from the
// training set: the same sample shape after its transforms, and class labels
// the model predicts (or regression targets of the same shape).
void check_eval_matches_train(const config::Config& config, const Session& s,
                              config::Diagnostics& diags);

// An error at `mark` (data.eval) when a feature both sets name (CSV headers)
// is in another column of the evaluation set's features: read by place, the
// model would take it for another. Names the one set has and the other lacks
// are no error (columns named otherwise, read by place).
void check_eval_feature_order(const std::vector<std::string>& train,
                              const std::vector<std::string>& eval, const config::Mark& mark,
                              config::Diagnostics& diags);

// A warning at train.early_stopping.patience when the run evaluates too few
// times before its last step for early stopping ever to stop it (an
// evaluation that sets the best, then `patience` without improvement).
void warn_early_stopping_cannot_stop(const config::Config& config, const Session& s,
                                     config::Diagnostics& warnings);

// A warning at train.batch_size when, with data.drop_last: false, the batch
// is larger than the whole training set: every step is the set as one short
// batch, in memory planned (and allocated) for the batch's rows.
void warn_batch_beyond_set(const config::Config& config, const Session& s,
                           config::Diagnostics& warnings);

// Warnings at the schedule's keys that the run's steps never reach: a
// warm-up longer than the run (the rate never reaches optimizer.lr) or as
// long (a decaying schedule never acts), a `step` decay or `multistep`
// milestones at or after its last step.
void warn_schedule_beyond_run(const config::Config& config, const Session& s,
                              config::Diagnostics& warnings);

// A warning at a normalize whose mean and std are those of values in [0, 1]
// (as PyTorch's ToTensor makes them) when the training samples reach it as
// stored, beyond 1 (bytes 0..255) with no scale before it: it would leave
// them in the hundreds, and the run would diverge. Also one when images
// (samples of two or more dimensions) reach the model as stored, beyond 2,
// with neither scale nor normalize.
void warn_normalize_unscaled(const config::Config& config, const Session& s,
                             config::Diagnostics& warnings);

// A warning at data.eval when one of the training and evaluation sets names
// its classes (an image folder, a CSV of class names) and the other numbers
// them: the numbers are taken as places among the names in sorted order,
// which nothing checks.
void warn_class_naming(const config::Config& config, const Session& s,
                       config::Diagnostics& warnings);

// A warning at data.train when a conv2d or pooling layer reads the samples as
// [C, H, W] but they look channels-last ([H, W, 3] or [H, W, 4], as image
// arrays saved from NumPy often are): it would take the rows for channels.
// Needs s.graph.
void warn_channels_last(const config::Config& config, const Session& s,
                        config::Diagnostics& warnings);

// The real rows of the short micro-batch each epoch of training ends with:
// with data.drop_last: false the last micro-batch of a rank's shard holds
// what is left of the shard, padded (every micro-batch is trained on, the
// epoch's last step taking those left). 0: every micro-batch is full.
std::int64_t short_batch_rows(const config::Config& config, const Session& s);

// Without keep_best, a checkpoint.metric or mode set otherwise than by
// default ranks the checkpoints only for `trainer eval --checkpoint best`:
// the checks check_checkpoint_metric makes, as warnings (a run's resume and
// its evaluation by another checkpoint are not refused over them).
void warn_checkpoint_ranking(const config::Config& config, const Session& s,
                             config::Diagnostics& warnings);

// keep_best ranks checkpoints, and early stopping follows, a metric the run
// records (early stopping: an evaluation's), and a default mode does not pick
// the worst (a loss at its largest, an accuracy at its smallest).
void check_checkpoint_metric(const config::Config& config, const Session& s,
                             config::Diagnostics& diags);

}  // namespace trainer::train
