// Internals of <ppsched/trace/stats.hpp>, which includes this file: how errors point at one span
// of a timeline, and the steps of its statistics. They are in ppsched::detail and not part of the
// API: no example or page uses them, and they may change in any release (docs/architecture.md).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/trace/detail/text.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// "span 7 (F3@s1 on rank 2)": how errors point at one span of a timeline.
[[nodiscard]] inline std::string describe_span(const Span& span, std::size_t index) {
  return detail::concat("span ", index, " (", to_string(span.action), " on rank ", span.rank, ")");
}

struct Interval {
  double start = 0.0;
  double end = 0.0;
};

// Sorted, disjoint intervals covering exactly the union of the input; touching intervals
// merge.
[[nodiscard]] PPSCHED_OUTLINE std::vector<Interval> merge_intervals(std::vector<Interval> intervals);

[[nodiscard]] PPSCHED_OUTLINE double total_length(const std::vector<Interval>& disjoint) noexcept;

// Length of the intersection of two sorted, disjoint interval lists.
[[nodiscard]] PPSCHED_OUTLINE double overlap_length(const std::vector<Interval>& a,
                                           const std::vector<Interval>& b) noexcept;

// The spans of each rank and lane, each list in order of start (ties in timeline order):
// lanes[rank][0] is the compute lane, lanes[rank][1] the comm lane. The writers draw from
// it so that a large timeline is bucketed once rather than scanned per rank.
[[nodiscard]] PPSCHED_OUTLINE std::vector<std::array<std::vector<const Span*>, 3>> spans_by_rank_and_lane(
    const Timeline& timeline);

[[nodiscard]] constexpr double ratio_or_zero(double numerator, double denominator) noexcept {
  return denominator > 0.0 ? numerator / denominator : 0.0;
}

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/trace/impl/detail_stats.ipp"
#endif
