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

inline constexpr std::string_view gpipe_name = "gpipe";
inline constexpr std::string_view forward_only_name = "forward-only";
inline constexpr std::string_view looped_bfs_name = "looped-bfs";

namespace detail {

// What each generator below refuses in a request (FamilyInfo::problem), or nothing.
[[nodiscard]] inline std::optional<error_context> gpipe_problem(const ScheduleRequest& r) {
  return sizes_and_chunks_problem(gpipe_name, r, 1, "gpipe places one stage per rank",
                                  "for several chunks per rank use looped-bfs (fill-drain) or interleaved-1f1b");
}
[[nodiscard]] inline std::optional<error_context> forward_only_problem(const ScheduleRequest& r) {
  return sizes_and_chunks_problem(forward_only_name, r, 1, "forward-only places one stage per rank", "");
}
[[nodiscard]] inline std::optional<error_context> looped_bfs_problem(const ScheduleRequest& r) {
  return request_size_problem(looped_bfs_name, r);
}

}  // namespace detail

// GPipe: on every rank F0..F(m-1), then B0..B(m-1). Any p, m >= 1; v = 1.
// Idle per rank (p-1)(T_F+T_B); m activations in flight on every stage.
[[nodiscard]] inline Schedule make_gpipe(const ScheduleRequest& r) {
  if (auto problem = detail::gpipe_problem(r)) fail(*problem);
  Schedule s = detail::empty_schedule(gpipe_name, r, one_stage_per_rank_placement(r.ranks), false,
                                      2 * static_cast<std::size_t>(r.microbatches));
  for (std::int32_t rank = 0; rank < r.ranks; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    for (std::int32_t mb = 0; mb < r.microbatches; ++mb)
      program.push_back(detail::compute_action(Op::F, rank, mb));
    for (std::int32_t mb = 0; mb < r.microbatches; ++mb)
      program.push_back(detail::compute_action(Op::B, rank, mb));
  }
  return s;
}

// Forward-only (inference): F0..F(m-1) on every rank and nothing else. Any p, m >= 1; v = 1.
[[nodiscard]] inline Schedule make_forward_only(const ScheduleRequest& r) {
  if (auto problem = detail::forward_only_problem(r)) fail(*problem);
  Schedule s = detail::empty_schedule(forward_only_name, r, one_stage_per_rank_placement(r.ranks), false,
                                      static_cast<std::size_t>(r.microbatches));
  for (std::int32_t rank = 0; rank < r.ranks; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    for (std::int32_t mb = 0; mb < r.microbatches; ++mb)
      program.push_back(detail::compute_action(Op::F, rank, mb));
  }
  return s;
}

// Looped BFS: looped placement (stage c*p + rank). Each rank runs the forwards of its chunks
// in chunk order, all micro-batches of a chunk before the next chunk, then the backwards in
// reverse chunk order and reverse micro-batch order (as PyTorch's ScheduleLoopedBFS does:
// the last activation stored is the first one freed). Any p, m, v >= 1.
// m*v activations in flight on every rank.
[[nodiscard]] inline Schedule make_looped_bfs(const ScheduleRequest& r) {
  if (auto problem = detail::looped_bfs_problem(r)) fail(*problem);
  Schedule s = detail::empty_schedule(
      looped_bfs_name, r, looped_placement(r.ranks, r.chunks), false,
      2 * static_cast<std::size_t>(r.microbatches) * static_cast<std::size_t>(r.chunks));
  for (std::int32_t rank = 0; rank < r.ranks; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    for (std::int32_t c = 0; c < r.chunks; ++c)
      for (std::int32_t mb = 0; mb < r.microbatches; ++mb)
        program.push_back(detail::compute_action(Op::F, c * r.ranks + rank, mb));
    for (std::int32_t c = r.chunks - 1; c >= 0; --c)
      for (std::int32_t mb = r.microbatches - 1; mb >= 0; --mb)
        program.push_back(detail::compute_action(Op::B, c * r.ranks + rank, mb));
  }
  return s;
}

}  // namespace ppsched
