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

namespace ppsched::inline PPSCHED_MODE {

struct CompareOptions {
  // Multiply a measured time by this to express it in the predicted timeline's unit
  // (e.g. 1e-3 for a measurement in "us" against a prediction in "ms"). 0 means: work it
  // out from the units as described above, or compare no absolute times when it can't be.
  double measured_to_predicted = 0.0;
};

// Statistics of (measured − predicted) over matched actions, in TimelineComparison's
// deviation_unit. Positive means the measurement is later (or longer).
struct Deviation {
  std::size_t count = 0;
  double mean = 0.0;  // signed
  double mean_abs = 0.0;
  double rms = 0.0;
  double max_abs = 0.0;
  std::int32_t worst_rank = -1;  // where |deviation| is largest; -1 when count is 0
  Action worst_action{};

  friend bool operator==(const Deviation&, const Deviation&) = default;
};

struct RankComparison {
  std::int32_t rank = 0;
  double measured_bubble = 0.0;  // RankStats::bubble_fraction of the measurement
  double predicted_bubble = 0.0;
  double difference_pp = 0.0;  // (measured − predicted) × 100, percentage points

  friend bool operator==(const RankComparison&, const RankComparison&) = default;
};

struct TimelineComparison {
  TimelineStats measured;
  TimelineStats predicted;
  std::optional<double> scale;           // measured unit → predicted unit, when known
  // predicted.unit, or "makespan" when there is no scale: a unit of its own, fractions of
  // each timeline's makespan.
  TimeUnit deviation_unit;
  std::optional<double> makespan_ratio;  // measured × scale ÷ predicted, when both exist
  double bubble_difference_pp = 0.0;     // overall bubble_fraction, measured − predicted
  std::vector<RankComparison> per_rank;
  std::size_t matched = 0;             // actions found in both
  Deviation start;                     // of start times
  Deviation end;                       // of end times
  Deviation duration;                  // of end − start
  std::vector<Span> only_in_measured;  // sorted by rank, then start
  std::vector<Span> only_in_predicted;

  friend bool operator==(const TimelineComparison&, const TimelineComparison&) = default;
};

}  // namespace ppsched

#include "ppsched/trace/detail/compare.hpp"  // the internals below build on the types above

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
