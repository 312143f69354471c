// The bodies of <ppsched/trace/compare.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/trace/compare.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::string signed_points(double pp) {
  const std::string text = format_fixed(pp, 2);
  if (text == "0.00" || text == "-0.00") return "0.00 pp";
  return (pp > 0.0 ? "+" : "") + text + " pp";
}

PPSCHED_OUTLINE void print_deviation(std::ostream& out, const char* what, const Deviation& d, const std::string& unit,
                            bool as_fraction) {
  // Fractions of the makespan read better as percentages.
  const auto show = [&](double v, bool sign) {
    if (as_fraction) return (sign ? signed_readable(v * 100.0, 3) : format_readable(v * 100.0, 3)) + "%";
    return (sign ? signed_readable(v) : format_readable(v)) + (unit.empty() ? "" : " " + unit);
  };
  out << what << ": mean " << show(d.mean, true) << ", mean |d| " << show(d.mean_abs, false) << ", rms "
      << show(d.rms, false) << ", max |d| " << show(d.max_abs, false);
  if (d.worst_rank >= 0) out << " (" << d.worst_action << " on rank " << d.worst_rank << ")";
  out << '\n';
}

PPSCHED_OUTLINE void print_unmatched(std::ostream& out, const char* where, const std::vector<Span>& spans) {
  constexpr std::size_t shown = 10;  // enough to see the pattern without flooding a terminal
  out << "only in " << where << ": " << spans.size();
  for (std::size_t i = 0; i < spans.size() && i < shown; ++i) {
    out << (i == 0 ? ": " : ", ") << spans[i].action << " on rank " << spans[i].rank;
  }
  if (spans.size() > shown) out << ", ...";
  out << '\n';
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const TimelineComparison& c) {
  using detail::cell;
  using detail::percent;
  out << "measured vs predicted: " << c.measured.ranks << " ranks\n"
      << "makespan: measured " << detail::with_unit(c.measured.makespan, c.measured.unit) << ", predicted "
      << detail::with_unit(c.predicted.makespan, c.predicted.unit);
  if (c.makespan_ratio) {
    out << ", ratio " << detail::format_readable(*c.makespan_ratio) << " (measured x "
        << detail::format_readable(*c.scale, 6) << " in the predicted unit)";
  } else {
    out << ", no ratio (units not comparable; pass CompareOptions::measured_to_predicted)";
  }
  out << "\nbubble: measured " << percent(c.measured.bubble_fraction) << ", predicted "
      << percent(c.predicted.bubble_fraction) << " (" << detail::signed_points(c.bubble_difference_pp)
      << ")\n"
      << cell("rank", 6) << cell("measured", 10) << cell("predicted", 11) << "difference\n";
  for (const RankComparison& r : c.per_rank) {
    out << cell(std::to_string(r.rank), 6) << cell(percent(r.measured_bubble), 10)
        << cell(percent(r.predicted_bubble), 11) << detail::signed_points(r.difference_pp) << '\n';
  }
  out << "actions: " << c.matched << " matched of " << c.measured.spans << " measured and "
      << c.predicted.spans << " predicted";
  const bool as_fraction = !c.scale;
  out << (as_fraction ? "; times as a share of each makespan\n" : "\n");
  if (c.matched != 0) {
    detail::print_deviation(out, "start deviation", c.start, c.deviation_unit, as_fraction);
    detail::print_deviation(out, "end deviation", c.end, c.deviation_unit, as_fraction);
    detail::print_deviation(out, "duration deviation", c.duration, c.deviation_unit, as_fraction);
  }
  detail::print_unmatched(out, "measured", c.only_in_measured);
  detail::print_unmatched(out, "predicted", c.only_in_predicted);
  return out;
}

[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const TimelineComparison& c) {
  std::ostringstream out;
  out << c;
  return out.str();
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::vector<std::size_t> sorted_by_identity(const Timeline& t) {
  std::vector<std::size_t> order(t.spans.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&t](std::size_t a, std::size_t b) {
    const Span& x = t.spans[a];
    const Span& y = t.spans[b];
    return std::make_tuple(match_key(x), x.start, x.end, a) <
           std::make_tuple(match_key(y), y.start, y.end, b);
  });
  return order;
}

PPSCHED_OUTLINE void sort_by_rank_then_start(std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return std::make_tuple(a.rank, a.start, a.action) < std::make_tuple(b.rank, b.start, b.action);
  });
}

}  // namespace detail
}  // namespace ppsched
