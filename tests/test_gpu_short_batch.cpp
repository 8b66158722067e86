// labels: gpu train
// A short last training batch (data.drop_last: false) with batchnorm on a GPU,
// through whole runs (short_batch_runs.h): 10 samples in batches of 4 train
// like 8 in batches of 4 followed by the last 2 as a batch of 2, the padded
// step replayed from the step's recording. The run takes batchnorm's own
// kernels over the real rows (cuDNN's would count the padding rows). Skipped
// with the reason on a machine without a GPU.
#include <catch2/catch.hpp>

#include "gpu_skip.h"
#include "tests/short_batch_runs.h"

TEST_CASE("a short last batch trains batchnorm like a batch of its samples on a GPU") {
  trainer::testing::short_batch::check_short_batch_trains_like_its_rows("[0]", 1e-4);
}
