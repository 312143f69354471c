// Internals of <ppsched/schedule/request.hpp>: the checks of a schedule request and the
// placements' arithmetic. They are in ppsched::detail and not part of the API: no example or page
// uses them, and they may change in any release (docs/architecture.md).
//
// They build on public types of <ppsched/schedule/request.hpp>, which includes this file after
// declaring them. So that this file also compiles alone, it includes that header first, and its
// guard opens only below that include: included alone, the header's own include of this file
// emits these internals where the header needs them, and this outer copy is then skipped.
#include "ppsched/schedule/request.hpp"

#ifndef PPSCHED_SCHEDULE_DETAIL_REQUEST_HPP
#define PPSCHED_SCHEDULE_DETAIL_REQUEST_HPP

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

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// A generated schedule holds about 3*p*v*m actions; past this it would not fit in memory on
// an ordinary machine, and the int32 stage and micro-batch indices stay far from overflow.
inline constexpr std::int64_t max_generated_actions = std::int64_t{1} << 26;

[[nodiscard]] inline std::string family_subject(std::string_view family) {
  return concat("schedule '", family, "'");
}

// The checks every family makes first: p, m, v at least 1 and the schedule of bounded size.
// What is wrong, or nothing: a planner asks why a family refuses a request without building
// it or catching an exception (FamilyInfo::why_not).
[[nodiscard]] inline std::optional<error_context> request_size_problem(std::string_view family,
                                                                       const ScheduleRequest& r) {
  for (const auto& [value, what, letter] : {std::tuple{r.ranks, "ranks", "p"}, std::tuple{r.microbatches, "micro-batches", "m"},
                                            std::tuple{r.chunks, "chunks per rank", "v"}}) {
    if (value < 1) {
      return error_context{family_subject(family),
                           concat("the number of ", what, " ", letter, " must be at least 1 (got ", letter, "=", value, ")"),
                           concat("request ", to_string(r)), concat("ask for ", letter, "=1 or more")};
    }
  }
  const std::int64_t actions =
      3 * std::int64_t{r.ranks} * std::int64_t{r.chunks} * std::int64_t{r.microbatches};
  if (actions > max_generated_actions) {
    return error_context{family_subject(family),
                         concat("the schedule would hold about ", actions, " actions, more than the ",
                                max_generated_actions, " a generator will build"),
                         concat("request ", to_string(r)),
                         "ask for fewer ranks, micro-batches or chunks (p*v*m at most 22369621)"};
  }
  return std::nullopt;
}

inline void check_request_sizes(std::string_view family, const ScheduleRequest& r) {
  if (auto problem = request_size_problem(family, r)) fail(*problem);
}

// For families whose placement fixes v (one stage per rank: v=1; V-shape: v=2).
[[nodiscard]] inline std::optional<error_context> chunks_problem(std::string_view family, const ScheduleRequest& r,
                                                                 std::int32_t required, std::string_view reason,
                                                                 std::string_view alternative) {
  if (r.chunks == required) return std::nullopt;
  return error_context{family_subject(family), concat(reason, ", so v must be ", required, " (got v=", r.chunks, ")"),
                       concat("request ", to_string(r)),
                       concat("nearest valid: v=", required, alternative.empty() ? "" : "; ", alternative)};
}

inline void require_chunks(std::string_view family, const ScheduleRequest& r, std::int32_t required,
                           std::string_view reason, std::string_view alternative) {
  if (auto problem = chunks_problem(family, r, required, reason, alternative)) fail(*problem);
}

// The sizes every family checks, then the v its placement fixes: the whole check of most
// families.
[[nodiscard]] inline std::optional<error_context> sizes_and_chunks_problem(std::string_view family,
                                                                           const ScheduleRequest& r,
                                                                           std::int32_t required, std::string_view reason,
                                                                           std::string_view alternative) {
  if (auto problem = request_size_problem(family, r)) return problem;
  return chunks_problem(family, r, required, reason, alternative);
}

[[nodiscard]] constexpr Action compute_action(Op op, std::int32_t stage, std::int32_t microbatch) noexcept {
  Action a;
  a.op = op;
  a.stage = stage;
  a.microbatch = microbatch;
  return a;
}

// An empty schedule with the placement set and one program per rank, room reserved.
[[nodiscard]] inline Schedule empty_schedule(std::string_view name, const ScheduleRequest& r,
                                             std::vector<std::int32_t> placement, bool split_backward,
                                             std::size_t actions_per_rank) {
  Schedule s;
  s.name = std::string(name);
  s.ranks = r.ranks;
  s.microbatches = r.microbatches;
  s.placement = std::move(placement);
  s.programs.resize(static_cast<std::size_t>(r.ranks));
  for (auto& program : s.programs) program.reserve(actions_per_rank);
  s.split_backward = split_backward;
  return s;
}

}  // namespace detail

}  // namespace ppsched

#endif  // PPSCHED_SCHEDULE_DETAIL_REQUEST_HPP
