// Recording work as a CUDA graph: everything queued on one stream between the
// start and the end of a capture becomes one graph, instantiated once and
// launched as a whole on that stream. This is Backend::record for CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

#include "ops/kernel.h"

namespace trainer::cuda {

// Captures what `queue_work` queues on `stream` (it runs none of it). Null,
// with the reason in `why_not`, when the capture fails (a call that cannot be
// captured, an error while queueing); the stream is usable again afterwards.
std::unique_ptr<RecordedWork> record_graph(cudaStream_t stream,
                                           const std::function<void()>& queue_work,
                                           std::string& why_not);

}  // namespace trainer::cuda
