// The CPU backend's model of CUDA Graphs (runtime/graph_capture.hpp): a capture records the
// operations issued to a stream — and to every stream that joins it by waiting on an event
// recorded in it — as a program of nodes instead of running them; `replay` issues that
// program again, node by node, onto the same streams, with the checks of any issued work
// (rendezvous, races in checking mode). What CUDA refuses inside a capture is refused here,
// with the rule named: a host synchronisation (synchronize, query, elapsed_ms, event_time) on
// captured work, an allocation from the capturing thread, a captured wait on an event recorded
// outside the capture, transfers on a stream outside it, a stream left unjoined at the end,
// and replaying a graph captured before `recover()` (its transfers used the aborted
// communicator). A broken rule fails the operation and invalidates the capture: end_capture
// then throws the first one.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ppsched/backend/cpu/detail/state.hpp"
#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE {

class CpuBackend;
class CpuStream;
class CpuBuffer;

namespace detail::cpu {

enum class CaptureOp : std::uint8_t { record, wait, zero, accumulate, launch, group_start, group_end, send, recv };

// One captured operation, with what its replay issues again. Streams and buffers are the
// handles the capture was given (the graph holds them as a CUDA graph holds device pointers:
// they must outlive it); events are the rank's event states.
struct CaptureNode {
  CaptureOp op = CaptureOp::record;
  CpuStream* stream = nullptr;
  EventState* event = nullptr;
  CpuBuffer* to = nullptr;          // zero, accumulate, recv
  const CpuBuffer* from = nullptr;  // accumulate, send
  HostTask task{};
  std::vector<BufferUse<CpuBuffer>> uses;
  std::size_t count = 0;
  int peer = -1;
  PeerTag tag{};

  [[nodiscard]] static CaptureNode make(CaptureOp op, CpuStream* stream = nullptr, EventState* event = nullptr,
                                        CpuBuffer* to = nullptr, const CpuBuffer* from = nullptr) {
    CaptureNode n;
    n.op = op;
    n.stream = stream;
    n.event = event;
    n.to = to;
    n.from = from;
    return n;
  }
};

// A capture in progress on one rank (the host thread that began it issues it).
struct CaptureState {
  StreamState* origin = nullptr;
  std::vector<StreamState*> streams;       // captured, the origin first
  std::vector<CpuStream*> handles;         // the same, as handles
  std::vector<std::size_t> last_node;      // per stream: nodes issued to it (index of its last + 1)
  std::vector<std::size_t> joined;         // per stream: its nodes the origin has waited for
  std::vector<EventState*> events;         // recorded in this capture
  std::vector<std::size_t> event_stream;   // per event: the stream it was recorded on
  std::vector<std::size_t> event_node;     // per event: nodes of that stream it covers
  std::vector<CaptureNode> nodes;
  std::string invalid;                     // the first rule broken; end_capture throws it
  std::size_t group_depth = 0;

  [[nodiscard]] std::ptrdiff_t index_of(const StreamState* s) const noexcept {
    for (std::size_t i = 0; i < streams.size(); ++i) {
      if (streams[i] == s) return static_cast<std::ptrdiff_t>(i);
    }
    return -1;
  }
  [[nodiscard]] std::ptrdiff_t event_index(const EventState* e) const noexcept {
    for (std::size_t i = events.size(); i-- > 0;) {
      if (events[i] == e) return static_cast<std::ptrdiff_t>(i);
    }
    return -1;
  }
};

// A captured program of one rank (CUDA: a cudaGraphExec_t). Move-only; made by
// CpuBackend::end_capture, run by CpuBackend::replay on the same rank; users spell it
// CpuBackend::graph.
class CpuGraph {
 public:
  CpuGraph() = default;
  CpuGraph(CpuGraph&&) noexcept = default;
  CpuGraph& operator=(CpuGraph&&) noexcept = default;
  CpuGraph(const CpuGraph&) = delete;
  CpuGraph& operator=(const CpuGraph&) = delete;
  ~CpuGraph() = default;

  [[nodiscard]] bool valid() const noexcept { return rank_ != nullptr; }
  // Captured operations (kernels, copies, transfers, event records and waits).
  [[nodiscard]] std::size_t nodes() const noexcept { return nodes_.size(); }
  // How many of them are of kind `op`.
  [[nodiscard]] std::size_t count(detail::cpu::CaptureOp op) const noexcept {
    std::size_t n = 0;
    for (const auto& node : nodes_) n += node.op == op ? 1 : 0;
    return n;
  }

 private:
  friend class ppsched::CpuBackend;
  detail::cpu::RankState* rank_ = nullptr;
  std::uint64_t generation_ = 0;  // the rank's recover() count when captured
  std::vector<detail::cpu::CaptureNode> nodes_;
  std::vector<CpuStream*> streams_;                   // captured, the origin first
  std::vector<detail::cpu::EventState*> fork_join_;  // per stream: fork (origin) and joins (others)
};

}  // namespace detail::cpu

}  // namespace ppsched
