// CUDA Graphs for the executor's capture of a steady-state step (runtime/graph_capture.hpp):
// `CudaGraph` owns a captured cudaGraph_t and its instantiation (move-only, destroyed exactly
// once), and the three calls the CUDA backend makes: begin_capture, end_capture and launch.
//
// Capture runs in cudaStreamCaptureModeThreadLocal: one host thread per rank captures while
// the others issue or capture their own ranks, as NCCL's graph documentation asks for
// multi-threaded use. NCCL's point-to-point calls are captured as graph nodes (NCCL 2.9 and
// later, CUDA 11.3 and later); each rank's capture and every launch of its graph is collective
// with its peers, which the executor guarantees by capturing and replaying the same step on
// every rank.
//
// Host-only: usable from .cpp files compiled by a plain C++ compiler that link cudart.
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/stream.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

class CudaGraph {
 public:
  CudaGraph() noexcept = default;
  CudaGraph(CudaGraph&& other) noexcept
      : graph_(std::exchange(other.graph_, nullptr)),
        exec_(std::exchange(other.exec_, nullptr)),
        nodes_(std::exchange(other.nodes_, 0)) {}
  CudaGraph& operator=(CudaGraph&& other) noexcept {
    if (this != &other) {
      release();
      graph_ = std::exchange(other.graph_, nullptr);
      exec_ = std::exchange(other.exec_, nullptr);
      nodes_ = std::exchange(other.nodes_, 0);
    }
    return *this;
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph() { release(); }

  [[nodiscard]] bool valid() const noexcept { return exec_ != nullptr; }
  // Nodes of the captured graph (kernels, copies, memsets, NCCL's kernels, event nodes).
  [[nodiscard]] std::size_t nodes() const noexcept { return nodes_; }
  [[nodiscard]] cudaGraphExec_t handle() const noexcept { return exec_; }

  // Begins capturing `stream`: its work, and that of every stream that waits on an event
  // recorded in it, is recorded instead of run.
  static void begin(CudaStreamRef stream) {
    PPSCHED_CUDA_CHECK(cudaStreamBeginCapture(stream.handle(), cudaStreamCaptureModeThreadLocal));
  }

  // Ends the capture begun on `stream` and instantiates it. A capture that an operation
  // invalidated (a synchronisation, an unjoined stream, a forbidden call) throws, naming CUDA's
  // error, and leaves the stream out of capture.
  [[nodiscard]] static CudaGraph end(CudaStreamRef stream) {
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream.handle(), &graph);
    if (ended != cudaSuccess) {
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      ppsched::detail::throw_cuda_failure(ended, "cudaStreamEndCapture(stream, &graph) (the capture was invalidated)",
                                 __FILE__, __LINE__);
    }
    CudaGraph g;
    g.graph_ = graph;
    std::size_t nodes = 0;
    PPSCHED_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    g.nodes_ = nodes;
    PPSCHED_CUDA_CHECK(cudaGraphInstantiate(&g.exec_, graph, 0ULL));
    return g;
  }

  // Launches the graph on `stream`: it starts after the stream's earlier work, and the
  // stream's later work starts after all of it.
  void launch(CudaStreamRef stream) const {
    if (exec_ == nullptr) {
      ppsched::detail::fail({"CudaGraph::launch", "the graph is empty (default-constructed or moved from)", "",
                             "Launch a graph returned by end_capture"});
    }
    PPSCHED_CUDA_CHECK(cudaGraphLaunch(exec_, stream.handle()));
  }

 private:
  void release() noexcept {
    if (exec_ != nullptr) PPSCHED_CUDA_LOG(cudaGraphExecDestroy(std::exchange(exec_, nullptr)));
    if (graph_ != nullptr) PPSCHED_CUDA_LOG(cudaGraphDestroy(std::exchange(graph_, nullptr)));
    nodes_ = 0;
  }

  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::size_t nodes_ = 0;
};

}  // namespace cuda
}  // namespace ppsched
