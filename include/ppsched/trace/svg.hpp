// An SVG Gantt chart of a Timeline, simulated or measured: one row per rank (a thin second
// row under it for the comm lane when the timeline has one), a colour per operation with a
// legend, the micro-batch number inside every box wide enough to hold it, idle time as a
// hatched background wherever no box covers it, a time axis in the timeline's unit, and a
// title with the makespan and the bubble fraction. Each box carries a <title>, so hovering
// in a browser names the action, its stage and its times. The default width keeps 8 ranks
// × 32 micro-batches of 1F1B readable with every micro-batch labelled.
//
// Actions that overlap on one lane of one rank (a grouped send and receive in flight
// together) are drawn in stacked thinner bars rather than on top of each other.
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
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/detail/text.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/trace/detail/svg.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct SvgOptions {
  std::string title;         // empty: "Pipeline timeline"
  double width = 1600.0;     // of the whole picture, in pixels
  double row_height = 30.0;  // a rank's compute row
  double comm_row_height = 12.0;
  bool microbatch_labels = true;
  bool tooltips = true;  // a <title> per box: action, rank, start, end
};

PPSCHED_OUTLINE void write_svg(std::ostream& out, const Timeline& timeline, const SvgOptions& options = {});

[[nodiscard]] inline std::string to_svg(const Timeline& timeline, const SvgOptions& options = {}) {
  std::ostringstream out;
  write_svg(out, timeline, options);
  return out.str();
}

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/trace/impl/svg.ipp"
#endif
