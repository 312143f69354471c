// An ASCII timeline for terminals and logs: one line per rank, one character cell per slice
// of time, each cell the letter of the operation running then (F forward, B backward,
// I backward-for-input, W backward-for-weights, '.' idle), optionally followed by the
// micro-batch number, like the schedule diagrams of the zero-bubble pipeline paper. When
// every start and end is a whole number of units from the origin (a unit-cost simulation)
// and the step fits, each column is exactly one unit, so the picture is the schedule.
//
//     rank 0 |FFF.BFBFB...|
//
// Otherwise the makespan is cut into `columns` equal cells and each cell shows the action
// that covers most of it, or '.' when idle time covers more of it than any one action.
// On request, communication on its own lane gets a line under its rank (s/r send/receive
// activation, S/R send/receive gradient); communication run on the compute lane always
// shows in the rank's line with the same letters.
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
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/detail/text.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/trace/detail/ascii.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct AsciiOptions {
  // Cells per line. 0: one per unit when the timeline is whole-unit and its makespan is at
  // most max_columns, else max_columns.
  std::int32_t columns = 0;
  std::int32_t max_columns = 120;
  // Each cell becomes the letter and the micro-batch ("F3 B12"), cells separated by spaces.
  bool microbatch_digits = false;
  bool comm_rows = false;  // a line per rank for the comm lane, when the timeline has one
  bool ruler = true;       // a line of times above the ranks
  bool legend = true;      // a line naming the letters shown and the time per column
};

[[nodiscard]] PPSCHED_OUTLINE std::string to_ascii(const Timeline& timeline, const AsciiOptions& options = {});

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/trace/impl/ascii.ipp"
#endif
