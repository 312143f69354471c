// The bodies of <ppsched/schedule/detail/request.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> request_size_problem(std::string_view family,
                                                                       const ScheduleRequest& r) {
  for (const auto& [value, what, letter] : {std::tuple{r.ranks, "ranks", "p"}, std::tuple{r.microbatches, "micro-batches", "m"},
                                            std::tuple{r.chunks, "chunks per rank", "v"}}) {
    if (value < 1) {
      return error_context{family_subject(family),
                           detail::concat("the number of ", what, " ", letter, " must be at least 1 (got ", letter, "=", value, ")"),
                           detail::concat("request ", to_string(r)), detail::concat("ask for ", letter, "=1 or more")};
    }
  }
  // In double: three factors up to 2^31 overflow int64 (the check would then pass and the
  // generator try to allocate); the limit is far below where double loses integers.
  const double actions = 3.0 * static_cast<double>(r.ranks) * r.chunks * r.microbatches;
  if (actions > static_cast<double>(max_generated_actions)) {
    return error_context{family_subject(family),
                         detail::concat("the schedule would hold about ", actions, " actions, more than the ",
                                max_generated_actions, " a generator will build"),
                         detail::concat("request ", to_string(r)),
                         "ask for fewer ranks, micro-batches or chunks (p*v*m at most 22369621)"};
  }
  return std::nullopt;
}

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> chunks_problem(std::string_view family, const ScheduleRequest& r,
                                                                 std::int32_t required, std::string_view reason,
                                                                 std::string_view alternative) {
  if (r.chunks == required) return std::nullopt;
  return error_context{family_subject(family), detail::concat(reason, ", so v must be ", required, " (got v=", r.chunks, ")"),
                       detail::concat("request ", to_string(r)),
                       detail::concat("nearest valid: v=", required, alternative.empty() ? "" : "; ", alternative)};
}

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> sizes_and_chunks_problem(std::string_view family,
                                                                           const ScheduleRequest& r,
                                                                           std::int32_t required, std::string_view reason,
                                                                           std::string_view alternative) {
  if (auto problem = request_size_problem(family, r)) return problem;
  return chunks_problem(family, r, required, reason, alternative);
}

[[nodiscard]] PPSCHED_OUTLINE Schedule empty_schedule(std::string_view name, const ScheduleRequest& r,
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
