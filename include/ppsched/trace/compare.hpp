// Measured against predicted: one function sets a run's Timeline beside the simulator's
// and says how far apart they are — per-rank bubble (in percentage points), the makespan
// ratio, how early or late each action started and ended, and which actions appear in only
// one of the two. This is how a user learns whether the cost model can be trusted.
//
// Units. A simulation is often in the user's own cost unit and a measurement in
// microseconds, and nothing says how the two relate. Bubble fractions are ratios and are
// always compared. Times are compared only when a scale from the measured unit to the
// predicted unit is known: passed by the caller, 1 when both units are the same non-empty
// string, or the factor between two known time units ("s", "ms", "us", "ns"). Without a
// scale the makespans are reported each in its own unit and action times are compared as
// fractions of each timeline's own makespan, which still shows where the shape differs.
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
  std::string deviation_unit;            // predicted.unit, or "makespan" (fractions of it)
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

[[nodiscard]] inline TimelineComparison compare(const Timeline& measured, const Timeline& predicted,
                                                const CompareOptions& options = {}) {
  TimelineComparison c;
  c.measured = summarize(measured);
  c.predicted = summarize(predicted);
  if (measured.ranks != predicted.ranks) {
    fail({"compare",
          detail::concat("the measured timeline has ", measured.ranks, " ranks but the predicted one has ",
                         predicted.ranks),
          "Timeline::ranks", "compare a run with the prediction for the same schedule"});
  }
  if (!std::isfinite(options.measured_to_predicted) || options.measured_to_predicted < 0.0) {
    fail({"compare",
          detail::concat("the scale from measured to predicted units is ", options.measured_to_predicted),
          "CompareOptions::measured_to_predicted",
          "pass a positive factor, or 0 to derive it from the timelines' units"});
  }
  if (options.measured_to_predicted > 0.0) {
    c.scale = options.measured_to_predicted;
  } else if (!measured.unit.empty() && measured.unit == predicted.unit) {
    c.scale = 1.0;
  } else if (const auto m = seconds_per_unit(measured.unit), p = seconds_per_unit(predicted.unit); m && p) {
    c.scale = *m / *p;
  }
  c.deviation_unit = c.scale ? predicted.unit : std::string{"makespan"};
  if (c.scale && c.predicted.makespan > 0.0) {
    c.makespan_ratio = c.measured.makespan * *c.scale / c.predicted.makespan;
  }
  c.bubble_difference_pp = (c.measured.bubble_fraction - c.predicted.bubble_fraction) * 100.0;
  for (std::size_t r = 0; r < c.measured.per_rank.size(); ++r) {
    const double m = c.measured.per_rank[r].bubble_fraction;
    const double p = c.predicted.per_rank[r].bubble_fraction;
    c.per_rank.push_back({static_cast<std::int32_t>(r), m, p, (m - p) * 100.0});
  }

  // A time on each side, as a number in deviation_unit measured from the timeline's origin.
  const auto measured_time = [&](double t) {
    const double from_origin = t - c.measured.origin;
    return c.scale ? from_origin * *c.scale : detail::ratio_or_zero(from_origin, c.measured.makespan);
  };
  const auto predicted_time = [&](double t) {
    const double from_origin = t - c.predicted.origin;
    return c.scale ? from_origin : detail::ratio_or_zero(from_origin, c.predicted.makespan);
  };

  const auto m_order = detail::sorted_by_identity(measured);
  const auto p_order = detail::sorted_by_identity(predicted);
  detail::DeviationAccumulator start;
  detail::DeviationAccumulator end;
  detail::DeviationAccumulator duration;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < m_order.size() || j < p_order.size()) {
    if (j == p_order.size() || (i < m_order.size() && detail::match_key(measured.spans[m_order[i]]) <
                                                          detail::match_key(predicted.spans[p_order[j]]))) {
      c.only_in_measured.push_back(measured.spans[m_order[i++]]);
    } else if (i == m_order.size() || detail::match_key(predicted.spans[p_order[j]]) <
                                          detail::match_key(measured.spans[m_order[i]])) {
      c.only_in_predicted.push_back(predicted.spans[p_order[j++]]);
    } else {
      const Span& m = measured.spans[m_order[i++]];
      const Span& p = predicted.spans[p_order[j++]];
      const double ms = measured_time(m.start);
      const double me = measured_time(m.end);
      const double ps = predicted_time(p.start);
      const double pe = predicted_time(p.end);
      start.add(ms - ps, m.rank, m.action);
      end.add(me - pe, m.rank, m.action);
      duration.add((me - ms) - (pe - ps), m.rank, m.action);
      ++c.matched;
    }
  }
  c.start = start.result();
  c.end = end.result();
  c.duration = duration.result();
  detail::sort_by_rank_then_start(c.only_in_measured);
  detail::sort_by_rank_then_start(c.only_in_predicted);
  return c;
}

namespace detail {

[[nodiscard]] inline std::string signed_readable(double value, int digits = 4) {
  return (value > 0.0 ? "+" : "") + format_readable(value, digits);
}

// Percentage points with two decimals and a sign; rounding noise prints as "0.00".
[[nodiscard]] PPSCHED_OUTLINE std::string signed_points(double pp);

[[nodiscard]] inline std::string with_unit(double value, const std::string& unit) {
  return unit.empty() ? format_readable(value, 6) : format_readable(value, 6) + " " + unit;
}

PPSCHED_OUTLINE void print_deviation(std::ostream& out, const char* what, const Deviation& d, const std::string& unit,
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
