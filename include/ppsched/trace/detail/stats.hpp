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
[[nodiscard]] inline std::vector<Interval> merge_intervals(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> merged;
  for (const Interval& i : intervals) {
    if (!merged.empty() && i.start <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, i.end);
    } else {
      merged.push_back(i);
    }
  }
  return merged;
}

[[nodiscard]] inline double total_length(const std::vector<Interval>& disjoint) noexcept {
  double sum = 0.0;
  for (const Interval& i : disjoint) sum += i.end - i.start;
  return sum;
}

// Length of the intersection of two sorted, disjoint interval lists.
[[nodiscard]] inline double overlap_length(const std::vector<Interval>& a,
                                           const std::vector<Interval>& b) noexcept {
  double sum = 0.0;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].start, b[j].start);
    const double hi = std::min(a[i].end, b[j].end);
    if (hi > lo) sum += hi - lo;
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return sum;
}

// The spans of each rank and lane, each list in order of start (ties in timeline order):
// lanes[rank][0] is the compute lane, lanes[rank][1] the comm lane. The writers draw from
// it so that a large timeline is bucketed once rather than scanned per rank.
[[nodiscard]] inline std::vector<std::array<std::vector<const Span*>, 3>> spans_by_rank_and_lane(
    const Timeline& timeline) {
  std::vector<std::array<std::vector<const Span*>, 3>> lanes(
      static_cast<std::size_t>(std::max(timeline.ranks, 0)));
  for (const Span& s : timeline.spans) {
    lanes[static_cast<std::size_t>(s.rank)][static_cast<std::size_t>(s.lane)].push_back(&s);
  }
  for (auto& rank : lanes) {
    for (auto& lane : rank) {
      std::stable_sort(lane.begin(), lane.end(),
                       [](const Span* a, const Span* b) { return a->start < b->start; });
    }
  }
  return lanes;
}

[[nodiscard]] constexpr double ratio_or_zero(double numerator, double denominator) noexcept {
  return denominator > 0.0 ? numerator / denominator : 0.0;
}

}  // namespace detail

}  // namespace ppsched
