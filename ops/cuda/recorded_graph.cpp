// CUDA graph capture and replay (recorded_graph.h).
#include "ops/cuda/recorded_graph.h"

#include <exception>

#include "ops/cuda/check.h"
#include "ops/cuda/unique_handle.h"

namespace trainer::cuda {
namespace {

using Graph = UniqueHandle<cudaGraph_t, cudaGraphDestroy>;
using GraphExec = UniqueHandle<cudaGraphExec_t, cudaGraphExecDestroy>;

class RecordedGraph final : public RecordedWork {
 public:
  RecordedGraph(cudaStream_t stream, Graph graph, GraphExec exec)
      : stream_(stream), graph_(std::move(graph)), exec_(std::move(exec)) {}
  void replay() override { check(cudaGraphLaunch(exec_.get(), stream_), "cudaGraphLaunch"); }

 private:
  cudaStream_t stream_;
  Graph graph_;
  GraphExec exec_;
};

std::string error_text(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

}  // namespace

std::unique_ptr<RecordedWork> record_graph(cudaStream_t stream,
                                           const std::function<void()>& queue_work,
                                           std::string& why_not) {
  cudaGetLastError();  // an error left by an unchecked call must not end the capture
  // Thread-local mode: other threads (the loader's) may keep using CUDA.
  cudaError_t status = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) {
    cudaGetLastError();
    why_not = "cannot start a CUDA graph capture: " + error_text(status);
    return nullptr;
  }
  std::string queue_error;
  try {
    queue_work();
  } catch (const std::exception& e) {
    queue_error = e.what();
  } catch (...) {  // the capture must end whatever was thrown
    queue_error = "an exception that is not a std::exception";
  }
  cudaGraph_t captured = nullptr;
  status = cudaStreamEndCapture(stream, &captured);
  Graph graph(captured);
  if (!queue_error.empty() || status != cudaSuccess || !graph) {
    cudaGetLastError();  // an invalidated capture leaves its error behind
    why_not = "the step could not be captured as a CUDA graph: " +
              (queue_error.empty() ? error_text(status) : queue_error);
    return nullptr;
  }
  cudaGraphExec_t instantiated = nullptr;
  status = cudaGraphInstantiate(&instantiated, graph.get(), 0);
  if (status != cudaSuccess) {
    cudaGetLastError();
    why_not = "the captured CUDA graph could not be instantiated: " + error_text(status);
    return nullptr;
  }
  return std::make_unique<RecordedGraph>(stream, std::move(graph), GraphExec(instantiated));
}

}  // namespace trainer::cuda
