// The bodies of <ppsched/schedule/fill_drain.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> gpipe_problem(const ScheduleRequest& r) {
  return sizes_and_chunks_problem(detail::gpipe_name, r, 1, "gpipe places one stage per rank",
                                  "for several chunks per rank use looped-bfs (fill-drain) or interleaved-1f1b");
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Schedule make_gpipe(const ScheduleRequest& r) {
  if (auto problem = detail::gpipe_problem(r)) detail::fail(*problem);
  Schedule s = detail::empty_schedule(detail::gpipe_name, r, one_stage_per_rank_placement(r.ranks), false,
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

[[nodiscard]] PPSCHED_OUTLINE Schedule make_forward_only(const ScheduleRequest& r) {
  if (auto problem = detail::forward_only_problem(r)) detail::fail(*problem);
  Schedule s = detail::empty_schedule(detail::forward_only_name, r, one_stage_per_rank_placement(r.ranks), false,
                                      static_cast<std::size_t>(r.microbatches));
  for (std::int32_t rank = 0; rank < r.ranks; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    for (std::int32_t mb = 0; mb < r.microbatches; ++mb)
      program.push_back(detail::compute_action(Op::F, rank, mb));
  }
  return s;
}

[[nodiscard]] PPSCHED_OUTLINE Schedule make_looped_bfs(const ScheduleRequest& r) {
  if (auto problem = detail::looped_bfs_problem(r)) detail::fail(*problem);
  Schedule s = detail::empty_schedule(
      detail::looped_bfs_name, r, looped_placement(r.ranks, r.chunks), false,
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
