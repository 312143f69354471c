// The bodies of <ppsched/trace/detail/stats.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::vector<Interval> merge_intervals(std::vector<Interval> intervals) {
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

[[nodiscard]] PPSCHED_OUTLINE double total_length(const std::vector<Interval>& disjoint) noexcept {
  double sum = 0.0;
  for (const Interval& i : disjoint) sum += i.end - i.start;
  return sum;
}

[[nodiscard]] PPSCHED_OUTLINE double overlap_length(const std::vector<Interval>& a,
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

[[nodiscard]] PPSCHED_OUTLINE std::vector<std::array<std::vector<const Span*>, 3>> spans_by_rank_and_lane(
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

}  // namespace detail
}  // namespace ppsched
