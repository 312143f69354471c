// What a schedule generator is asked for (ranks p, micro-batches m, chunks per rank v), the
// checks every family shares, and the three stage-to-rank placements the families use.
// A family's own rule (v must be 1, m a multiple of p, ...) is checked in the family's header;
// the checks here are the ones no family may skip: sizes at least 1 and a schedule small
// enough to hold in memory, so that no generator ever overflows an index or allocates
// without bound.
#pragma once

#include "ppsched/config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct ScheduleRequest {
  std::int32_t ranks = 1;         // p: pipeline ranks (devices)
  std::int32_t microbatches = 1;  // m: micro-batches per step
  std::int32_t chunks = 1;        // v: model chunks (virtual stages) per rank

  friend constexpr bool operator==(const ScheduleRequest&, const ScheduleRequest&) = default;
};

[[nodiscard]] inline std::string to_string(const ScheduleRequest& r) {
  return detail::concat("p=", r.ranks, ", m=", r.microbatches, ", v=", r.chunks);
}

// Stage s on rank s: GPipe, 1F1B, ZB-H1, ZB-H2, forward-only.
[[nodiscard]] inline std::vector<std::int32_t> one_stage_per_rank_placement(std::int32_t ranks) {
  std::vector<std::int32_t> placement(static_cast<std::size_t>(ranks > 0 ? ranks : 0));
  for (std::int32_t s = 0; s < ranks; ++s) placement[static_cast<std::size_t>(s)] = s;
  return placement;
}

// Stage chunk*p + rank on rank: Megatron's virtual pipeline, used by interleaved 1F1B and
// looped BFS. Consecutive stages sit on consecutive ranks, so every stage boundary crosses
// ranks when p > 1.
[[nodiscard]] inline std::vector<std::int32_t> looped_placement(std::int32_t ranks, std::int32_t chunks) {
  std::vector<std::int32_t> placement;
  if (ranks <= 0 || chunks <= 0) return placement;
  placement.reserve(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(chunks));
  for (std::int32_t c = 0; c < chunks; ++c)
    for (std::int32_t r = 0; r < ranks; ++r) placement.push_back(r);
  return placement;
}

// Two stages per rank in a V: stage s on rank s for s < p and on rank 2p-1-s for s >= p, so
// rank p-1 holds the two middle stages and rank 0 holds the first and the last (ZB-V).
[[nodiscard]] inline std::vector<std::int32_t> v_shape_placement(std::int32_t ranks) {
  std::vector<std::int32_t> placement;
  if (ranks <= 0) return placement;
  placement.reserve(2 * static_cast<std::size_t>(ranks));
  for (std::int32_t s = 0; s < 2 * ranks; ++s) placement.push_back(s < ranks ? s : 2 * ranks - 1 - s);
  return placement;
}

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
