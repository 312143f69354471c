// Measured against predicted: one function sets a run's Timeline beside the simulator's
// and says how far apart they are — per-rank bubble (in percentage points), the makespan
// ratio, how early or late each action started and ended, and which actions appear in only
// one of the two. This is how a user learns whether the cost model can be trusted.
//
// Units. A simulation is often in the user's own cost unit and a measurement in
// microseconds, and nothing says how the two relate. Bubble fractions are ratios and are
// always compared. Times are compared only when a scale from the measured unit to the
// predicted unit is known: passed by the caller, or TimeUnit's converter (graph/time_unit.hpp):
// the factor between two scales ("s", "ms", "us" or "µs", "ns"), 1 between a unit of the
// model's own and itself, and none for a model's unit against a scale, two different model
// units, or a timeline without a unit. Without a scale the makespans are reported each in its
// own unit and action times are compared as fractions of each timeline's own makespan, which
// still shows where the shape differs.
//
// Both timelines are measured from their own origin (earliest start), so a measured run
// whose clock did not start at zero lines up with a prediction that does.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/detail/text.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/trace/detail/compare.hpp"
#include "ppsched/trace/compare_types.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE TimelineComparison compare(const Timeline& measured, const Timeline& predicted,
                                                const CompareOptions& options = {});

namespace detail {

[[nodiscard]] inline std::string signed_readable(double value, int digits = 4) {
  return (value > 0.0 ? "+" : "") + format_readable(value, digits);
}

// Percentage points with two decimals and a sign; rounding noise prints as "0.00".
[[nodiscard]] PPSCHED_OUTLINE std::string signed_points(double pp);

[[nodiscard]] inline std::string with_unit(double value, const TimeUnit& unit) {
  return unit.empty() ? format_readable(value, 6) : format_readable(value, 6) + " " + unit.text();
}

PPSCHED_OUTLINE void print_deviation(std::ostream& out, const char* what, const Deviation& d, const TimeUnit& unit,
                            bool as_fraction);

PPSCHED_OUTLINE void print_unmatched(std::ostream& out, const char* where, const std::vector<Span>& spans);

}  // namespace detail

PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const TimelineComparison& c);

[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const TimelineComparison& c);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/trace/impl/compare.ipp"
#endif
