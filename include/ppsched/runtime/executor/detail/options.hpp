// Internals of <ppsched/runtime/executor/options.hpp>, which includes this file: what a rank
// reports when a peer stopped it, and how a failed action is named. They are in ppsched::detail
// and not part of the API: no example or page uses them, and they may change in any release
// (docs/architecture.md).
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// The rank's error when another rank asked it to stop.
struct StoppedByPeer {};

[[nodiscard]] inline std::string matching_action(const Schedule& s, const Action& a) {
  switch (a.op) {
    case Op::SEND_F:
      return detail::concat("RECV_F", a.microbatch, "@s", a.stage + 1, " on rank ", s.rank_of(a.stage + 1));
    case Op::RECV_F:
      return detail::concat("SEND_F", a.microbatch, "@s", a.stage - 1, " on rank ", s.rank_of(a.stage - 1));
    case Op::SEND_B:
      return detail::concat("RECV_B", a.microbatch, "@s", a.stage - 1, " on rank ", s.rank_of(a.stage - 1));
    case Op::RECV_B:
      return detail::concat("SEND_B", a.microbatch, "@s", a.stage + 1, " on rank ", s.rank_of(a.stage + 1));
    default:
      return {};
  }
}

// The host pool's buffer type: a backend's `host_buffer` (CUDA: pinned memory) when it has
// `allocate_host`, else its own buffer (host-memory backends).
template <class B>
struct host_buffer_of {
  using type = typename B::buffer;
};
template <class B>
  requires requires(B& b, std::size_t n) {
    typename B::host_buffer;
    { b.allocate_host(n) } -> std::same_as<typename B::host_buffer>;
  }
struct host_buffer_of<B> {
  using type = typename B::host_buffer;
};

}  // namespace detail

}  // namespace ppsched
