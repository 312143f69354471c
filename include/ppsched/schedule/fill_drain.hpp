// The fill-drain families: every forward of the step runs before any backward on a rank.
// GPipe (all-forward-all-backward) and forward-only (inference) place one stage per rank;
// looped BFS (breadth-first pipeline parallelism, Lamy-Poirier 2022) places v chunks per rank
// in a loop and runs each chunk's forwards for all micro-batches before the next chunk's.
// They are the simplest schedules to reason about and the most memory-hungry: a rank keeps
// every micro-batch's activations (m per stage) until the backward phase starts.
#pragma once

#include "ppsched/config.hpp"

#include <cstdint>
#include <string_view>

#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {  // the canonical names; users read them from family_info(name).name
inline constexpr std::string_view gpipe_name = "gpipe";
inline constexpr std::string_view forward_only_name = "forward-only";
inline constexpr std::string_view looped_bfs_name = "looped-bfs";
}  // namespace detail

namespace detail {

// What each generator below refuses in a request (FamilyInfo::problem), or nothing.
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> gpipe_problem(const ScheduleRequest& r);
[[nodiscard]] inline std::optional<error_context> forward_only_problem(const ScheduleRequest& r) {
  return sizes_and_chunks_problem(detail::forward_only_name, r, 1, "forward-only places one stage per rank", "");
}
[[nodiscard]] inline std::optional<error_context> looped_bfs_problem(const ScheduleRequest& r) {
  return request_size_problem(detail::looped_bfs_name, r);
}

}  // namespace detail

// GPipe: on every rank F0..F(m-1), then B0..B(m-1). Any p, m >= 1; v = 1.
// Idle per rank (p-1)(T_F+T_B); m activations in flight on every stage.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_gpipe(const ScheduleRequest& r);

// Forward-only (inference): F0..F(m-1) on every rank and nothing else. Any p, m >= 1; v = 1.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_forward_only(const ScheduleRequest& r);

// Looped BFS: looped placement (stage c*p + rank). Each rank runs the forwards of its chunks
// in chunk order, all micro-batches of a chunk before the next chunk, then the backwards in
// reverse chunk order and reverse micro-batch order (as PyTorch's ScheduleLoopedBFS does:
// the last activation stored is the first one freed). Any p, m, v >= 1.
// m*v activations in flight on every rank.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_looped_bfs(const ScheduleRequest& r);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/fill_drain.ipp"
#endif
