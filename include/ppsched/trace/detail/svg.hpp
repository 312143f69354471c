// Internals of <ppsched/trace/svg.hpp>, which includes this file: the SVG drawing's colours (the
// Okabe-Ito palette) and text colours. They are in ppsched::detail and not part of the API: no
// example or page uses them, and they may change in any release (docs/architecture.md).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
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

// Fill colours from the Okabe–Ito palette, which stays distinguishable under the common
// colour-vision deficiencies; forward work is blue, backward green/orange/purple, and
// communication the lighter or warmer tones.
[[nodiscard]] constexpr std::string_view svg_fill(Op op) noexcept {
  switch (op) {
    case Op::F: return "#0072B2";
    case Op::B: return "#009E73";
    case Op::BI: return "#E69F00";
    case Op::BW: return "#CC79A7";
    case Op::SEND_F: return "#56B4E9";
    case Op::RECV_F: return "#A8D5F2";
    case Op::SEND_B: return "#F0E442";
    case Op::RECV_B: return "#D55E00";
    // Memory actions in greys: recompute dark (it occupies the compute lane), the copies light.
    case Op::R: return "#4D4D4D";
    case Op::OFFLOAD: return "#BBBBBB";
    case Op::RELOAD: return "#DDDDDD";
  }
  return "#808080";
}

// Text colour readable on svg_fill(op).
[[nodiscard]] constexpr std::string_view svg_text_fill(Op op) noexcept {
  return op == Op::F || op == Op::B || op == Op::RECV_B || op == Op::R ? "#ffffff" : "#000000";
}

// Greedy interval partitioning: level[i] is the lowest level whose last span ended by the
// time span i starts; returns the number of levels used (at least 1).
[[nodiscard]] inline std::size_t assign_levels(const std::vector<const Span*>& spans_by_start,
                                               std::vector<std::size_t>& level) {
  std::vector<double> level_end;
  level.assign(spans_by_start.size(), 0);
  for (std::size_t i = 0; i < spans_by_start.size(); ++i) {
    const Span& s = *spans_by_start[i];
    std::size_t l = 0;
    while (l < level_end.size() && level_end[l] > s.start) ++l;
    if (l == level_end.size()) level_end.push_back(s.end);
    level_end[l] = s.end;
    level[i] = l;
  }
  return std::max<std::size_t>(level_end.size(), 1);
}

}  // namespace detail

}  // namespace ppsched
