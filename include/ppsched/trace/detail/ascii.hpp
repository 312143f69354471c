// Internals of <ppsched/trace/ascii.hpp>, which includes this file: the cell letters and the row
// layout of the ASCII drawing. They are in ppsched::detail and not part of the API: no example or
// page uses them, and they may change in any release (docs/architecture.md).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/trace/detail/text.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// The cell letter of an operation.
[[nodiscard]] constexpr char ascii_letter(Op op) noexcept {
  switch (op) {
    case Op::F: return 'F';
    case Op::B: return 'B';
    case Op::BI: return 'I';
    case Op::BW: return 'W';
    case Op::SEND_F: return 's';
    case Op::RECV_F: return 'r';
    case Op::SEND_B: return 'S';
    case Op::RECV_B: return 'R';
    // 'R' is taken by RECV_B: recompute is C, and the copies O(ffload) and L(oad).
    case Op::R: return 'C';
    case Op::OFFLOAD: return 'O';
    case Op::RELOAD: return 'L';
  }
  return '?';
}

[[nodiscard]] inline bool is_whole(double value) noexcept {
  return std::abs(value - std::round(value)) <= 1e-9 * std::max(1.0, std::abs(value));
}

// Whether every span starts and ends a whole number of units after `origin`.
[[nodiscard]] inline bool whole_unit_timeline(const Timeline& timeline, double origin) noexcept {
  return std::all_of(timeline.spans.begin(), timeline.spans.end(), [origin](const Span& s) {
    return is_whole(s.start - origin) && is_whole(s.end - origin);
  });
}

// One lane of one rank as cells: the index of the span shown in each cell, or -1 for idle.
[[nodiscard]] inline std::vector<std::ptrdiff_t> ascii_cells(const std::vector<const Span*>& spans,
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
