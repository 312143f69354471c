// Internals of <ppsched/schedule/request.hpp>: the checks of a schedule request and the
// placements' arithmetic. They are in ppsched::detail and not part of the API: no example or page
// uses them, and they may change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/schedule/schedule_request.hpp> holds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/schedule/schedule_request.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// A generated schedule holds about 3*p*v*m actions; past this it would not fit in memory on
// an ordinary machine, and the int32 stage and micro-batch indices stay far from overflow.
inline constexpr std::int64_t max_generated_actions = std::int64_t{1} << 26;

[[nodiscard]] inline std::string family_subject(std::string_view family) {
  return detail::concat("schedule '", family, "'");
}

// The checks every family makes first: p, m, v at least 1 and the schedule of bounded size.
// What is wrong, or nothing: a planner asks why a family refuses a request without building
// it or catching an exception (FamilyInfo::why_not).
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> request_size_problem(std::string_view family,
                                                                       const ScheduleRequest& r);

inline void check_request_sizes(std::string_view family, const ScheduleRequest& r) {
  if (auto problem = request_size_problem(family, r)) detail::fail(*problem);
}

// For families whose placement fixes v (one stage per rank: v=1; V-shape: v=2).
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> chunks_problem(std::string_view family, const ScheduleRequest& r,
                                                                 std::int32_t required, std::string_view reason,
                                                                 std::string_view alternative);

inline void require_chunks(std::string_view family, const ScheduleRequest& r, std::int32_t required,
                           std::string_view reason, std::string_view alternative) {
  if (auto problem = chunks_problem(family, r, required, reason, alternative)) detail::fail(*problem);
}

// The sizes every family checks, then the v its placement fixes: the whole check of most
// families.
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> sizes_and_chunks_problem(std::string_view family,
                                                                           const ScheduleRequest& r,
                                                                           std::int32_t required, std::string_view reason,
                                                                           std::string_view alternative);

[[nodiscard]] constexpr Action compute_action(Op op, std::int32_t stage, std::int32_t microbatch) noexcept {
  Action a;
  a.op = op;
  a.stage = stage;
  a.microbatch = microbatch;
  return a;
}

// An empty schedule with the placement set and one program per rank, room reserved.
[[nodiscard]] PPSCHED_OUTLINE Schedule empty_schedule(std::string_view name, const ScheduleRequest& r,
                                             std::vector<std::int32_t> placement, bool split_backward,
                                             std::size_t actions_per_rank);

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/detail_request.ipp"
#endif
