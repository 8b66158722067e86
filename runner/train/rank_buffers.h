// The buffers each rank of a data-parallel job computes on its own: the
// running statistics of a plain batchnorm (`sync: false`), which follow each
// rank's own batches, and their averaged copies (train.ema_decay). Nothing
// else makes them agree, so the training loop replaces them by their mean
// over the ranks (see docs/distributed.md): every rank then evaluates, and
// the root checkpoints, the same statistics.
#pragma once

#include <vector>

#include "ops/collective.h"
#include "ops/kernel.h"
#include "ops/tensor.h"
#include "runner/graph/program.h"

namespace trainer::train {

// The non-trainable tensors of `program` that may differ between ranks (and
// their averages, when the program keeps them). A synchronised batchnorm's
// statistics are the same on every rank and are left out; so are frozen
// parameters, which never change.
std::vector<TensorRef> rank_local_buffers(const graph::Program& program);

// Replaces every one of `buffers` (float32, in `backend`'s memory) by its mean
// over the ranks of `collective`, with the same bits on every rank. Values
// that already agree keep their bits. Nothing happens on a single rank.
void average_over_ranks(Backend& backend, const std::vector<TensorRef>& buffers,
                        Collective& collective);

}  // namespace trainer::train
