// Graph capture of a rank's steady-state step (CUDA Graphs; the CPU backend's model of them):
// the options that turn it on, and the optional backend operations it needs.
//
// With `ExecutorOptions::graphs.enabled`, the executor runs `warmup_steps` steps eagerly
// (NCCL connects its peers, libraries initialise), then issues the next step once inside a
// capture of its compute stream — the comm and copy streams join it through events, as
// CUDA's cross-stream capture has them — and from then on replays the captured program with
// one `replay` per step instead of issuing every action. What may be captured, and the
// errors that say why not, are in docs/gpu.md ("CUDA Graphs").
//
//   begin_capture(stream&)         cudaStreamBeginCapture (cudaStreamCaptureModeThreadLocal)
//   graph end_capture(stream&)     cudaStreamEndCapture, cudaGraphInstantiate
//   replay(graph&, stream&)        cudaGraphLaunch
//   capture_unsupported() const    optional: why this backend cannot capture (empty: it can)
#pragma once

#include "ppsched/config.hpp"

#include <concepts>
#include <cstdint>
#include <span>
#include <string>

namespace ppsched::inline PPSCHED_MODE {

// ExecutorOptions::graphs.
struct GraphOptions {
  // Capture the step after the warm-up and replay it every step after.
  bool enabled = false;
  // Steps run eagerly before the capture, and again after a failed step (the communicator
  // is new then: NCCL connects its peers on their first transfer, which a capture cannot
  // hold). At least 1 on CUDA with NCCL.
  std::int32_t warmup_steps = 1;
};

namespace backend_ops {

template <class B>
concept has_capture = requires(B& b, typename B::stream& s, typename B::graph& g) {
  typename B::graph;
  b.begin_capture(s);
  { b.end_capture(s) } -> std::same_as<typename B::graph>;
  b.replay(g, s);
};

}  // namespace backend_ops

namespace detail {
// Why `backend` cannot capture a step, or an empty string when it can.
template <class B>
[[nodiscard]] std::string capture_unsupported(const B& backend) {
  if constexpr (!backend_ops::has_capture<B>) {
    (void)backend;
    return "the backend has no graph capture (begin_capture, end_capture and replay)";
  } else if constexpr (requires { { backend.capture_unsupported() } -> std::convertible_to<std::string>; }) {
    return std::string(backend.capture_unsupported());
  } else {
    return {};
  }
}

// The graph type of a backend that captures; an empty stand-in for one that does not.
struct NoGraph {};
template <class B>
struct graph_of {
  using type = NoGraph;
};
template <class B>
  requires backend_ops::has_capture<B>
struct graph_of<B> {
  using type = typename B::graph;
};
// A backend whose buffers are not host memory copies them back with copy_to_host (CUDA).
template <class B>
concept has_copy_to_host =
    requires(B& b, typename B::stream& s, const typename B::buffer& from, std::span<float> to) {
      b.copy_to_host(s, from, to);
    };
}  // namespace detail

}  // namespace ppsched
