// The types of comparing a measured timeline with a predicted one (<ppsched/trace/compare.hpp>):
// CompareOptions and the TimelineComparison compare() returns. Include
// <ppsched/trace/compare.hpp>; they sit in a header of their own so that the internals in
// trace/detail/compare.hpp build on them without including the public header back.
#pragma once

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

#include "ppsched/config.hpp"
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
