// What the schedule families are described by (<ppsched/schedule/generators.hpp> lists them):
// FamilyInfo, its placement kind and its closed-form bubble. They sit in a header of their own
// so that the internals in schedule/detail/generators.hpp build on them without including the
// public header back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Where a family puts its stages (ScheduleRequest::chunks of them per rank).
enum class PlacementKind : std::uint8_t {
  one_per_rank,  // stage r on rank r
  looped,        // v chunks per rank, stage s on rank s mod p (interleaved, breadth-first)
  v_shape,       // two chunks per rank, down the ranks and back up (zb-v, v-half, v-min, dualpipev)
};

[[nodiscard]] constexpr std::string_view placement_kind_name(PlacementKind k) noexcept {
  switch (k) {
    case PlacementKind::one_per_rank: return "one stage per rank";
    case PlacementKind::looped: return "looped";
    case PlacementKind::v_shape: return "v-shape";
  }
  return "?";
}

// A family's closed-form idle time per rank, as the literature states it (sim/analytic.hpp
// turns it into an AnalyticBubble). T_F, T_BI, T_BW are per rank: the sum over its chunks.
struct BubbleFormula {
  std::string_view formula;           // in the literature's notation, e.g. "(p-1)(T_F+T_B)"
  std::string_view measured_against;  // "makespan" or "span" (AnalyticBubble says what each means)
  std::string_view condition;         // when it is exact; empty: always
  double (*idle_per_rank)(std::int32_t p, std::int32_t m, std::int32_t v, double t_f, double t_bi, double t_bw);
  // Whether `condition` holds; nullptr when it always does.
  bool (*holds)(std::int32_t p, std::int32_t m, std::int32_t v, double t_f, double t_bi, double t_bw);
};

// What a command line, a planner or the search needs to know about a family: its names and
// rule for people, and its properties as data (placement, chunk count, split backward, closed
// forms), so that no caller compares family names to learn them.
struct FamilyInfo {
  std::string_view name;     // canonical, e.g. "interleaved-1f1b"
  std::string_view rule;     // the request it accepts, one line
  std::string_view summary;  // what it does, one line
  Schedule (*make)(const ScheduleRequest&);
  // What make(r) refuses in r, in the generator's words (the rule and the nearest valid
  // request), or nothing when it builds it: the very check make runs first.
  std::optional<error_context> (*problem)(const ScheduleRequest&) = nullptr;
  PlacementKind placement = PlacementKind::one_per_rank;
  // Chunks per rank it is built with; 0 when it takes any number (the caller chooses v).
  std::int32_t chunks = 1;
  bool split_backward = false;    // some backwards run as BI then BW
  bool training = true;           // false for inference (forward-only)
  bool overlapped_pairs = false;  // F&B pairs as compute groups (CostModel::fb_overlap applies)
  // The family's own rule on p, m and v beyond the sizes every family checks; nullptr: any p
  // and m with v equal to `chunks` (or any v when `chunks` is 0).
  bool (*rule_accepts)(const ScheduleRequest&) noexcept = nullptr;
  const BubbleFormula* bubble = nullptr;  // closed-form idle per rank; nullptr: none stated
  // Peak micro-batches whose activations stage `stage` (0-based, one stage per rank) holds, as
  // the literature bounds it; -1 where no bound is stated. nullptr: none for the family.
  std::int32_t (*peak_in_flight)(std::int32_t p, std::int32_t m, std::int32_t stage) noexcept = nullptr;

  // The chunks per rank to build it with when the caller would like `wanted`: `wanted` for a
  // family that takes any number, its own otherwise (family_info("zb-v").chunks_for(4) == 2).
  [[nodiscard]] constexpr std::int32_t chunks_for(std::int32_t wanted) const noexcept {
    return chunks == 0 ? wanted : chunks;
  }
  // Whether the family's rule accepts `r` (the sizes every family checks aside: see accepts()).
  [[nodiscard]] constexpr bool rule_allows(const ScheduleRequest& r) const noexcept {
    if (rule_accepts != nullptr) return rule_accepts(r);
    return chunks == 0 || r.chunks == chunks;
  }
  // Whether make(r) builds a schedule: the sizes every family checks, then its own rule.
  [[nodiscard]] constexpr bool accepts(const ScheduleRequest& r) const noexcept {
    if (r.ranks < 1 || r.microbatches < 1 || r.chunks < 1) return false;
    // In double, as request_size_problem: 3pvm overflows int64 near the int32 limits.
    if (3.0 * static_cast<double>(r.ranks) * r.chunks * r.microbatches > static_cast<double>(detail::max_generated_actions))
      return false;
    return rule_allows(r);
  }
  // Why the family rejects `r`, in its generator's words (the rule and the nearest valid
  // request): the message make(r) would throw; empty when it accepts it. Nothing is built.
  [[nodiscard]] std::string why_not(const ScheduleRequest& r) const {
    if (accepts(r)) return {};
    if (problem != nullptr) {
      if (const std::optional<error_context> why = problem(r)) return format_error(*why);
    }
    return detail::concat("schedule '", name, "': does not accept ", to_string(r), " (", rule, ")");
  }
};

}  // namespace ppsched
