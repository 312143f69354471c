// The bodies of <ppsched/trace/detail/ascii.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE bool whole_unit_timeline(const Timeline& timeline, double origin) noexcept {
  return std::all_of(timeline.spans.begin(), timeline.spans.end(), [origin](const Span& s) {
    return is_whole(s.start - origin) && is_whole(s.end - origin);
  });
}

[[nodiscard]] PPSCHED_OUTLINE std::vector<std::ptrdiff_t> ascii_cells(const std::vector<const Span*>& spans,
                                                             double origin, double cell_time,
                                                             std::size_t columns) {
  std::vector<std::ptrdiff_t> cells(columns, -1);
  if (!(cell_time > 0.0)) return cells;
  for (std::size_t c = 0; c < columns; ++c) {
    const double lo = origin + static_cast<double>(c) * cell_time;
    const double hi = origin + static_cast<double>(c + 1) * cell_time;
    std::vector<Interval> covered;
    double best = 0.0;
    for (std::size_t i = 0; i < spans.size(); ++i) {
      const double overlap = std::min(spans[i]->end, hi) - std::max(spans[i]->start, lo);
      if (overlap <= 0.0) continue;
      covered.push_back({std::max(spans[i]->start, lo), std::min(spans[i]->end, hi)});
      if (overlap > best) {
        best = overlap;
        cells[c] = static_cast<std::ptrdiff_t>(i);
      }
    }
    const double idle = cell_time - total_length(merge_intervals(std::move(covered)));
    if (best < idle) cells[c] = -1;
  }
  return cells;
}

}  // namespace detail
}  // namespace ppsched
