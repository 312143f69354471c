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
[[nodiscard]] PPSCHED_OUTLINE bool whole_unit_timeline(const Timeline& timeline, double origin) noexcept;

// One lane of one rank as cells: the index of the span shown in each cell, or -1 for idle.
[[nodiscard]] PPSCHED_OUTLINE std::vector<std::ptrdiff_t> ascii_cells(const std::vector<const Span*>& spans,
                                                             double origin, double cell_time,
                                                             std::size_t columns);

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/trace/impl/detail_ascii.ipp"
#endif
