// The bodies of <ppsched/trace/compare.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::string signed_points(double pp) {
  const std::string text = format_fixed(pp, 2);
  if (text == "0.00" || text == "-0.00") return "0.00 pp";
  return (pp > 0.0 ? "+" : "") + text + " pp";
}

PPSCHED_OUTLINE void print_deviation(std::ostream& out, const char* what, const Deviation& d, const TimeUnit& unit,
                            bool as_fraction) {
  // Fractions of the makespan read better as percentages.
  const auto show = [&](double v, bool sign) {
    if (as_fraction) return (sign ? signed_readable(v * 100.0, 3) : format_readable(v * 100.0, 3)) + "%";
    return (sign ? signed_readable(v) : format_readable(v)) + (unit.empty() ? "" : " " + unit.text());
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

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE TimelineComparison compare(const Timeline& measured, const Timeline& predicted,
                                                const CompareOptions& options) {
  TimelineComparison c;
  c.measured = summarize(measured);
  c.predicted = summarize(predicted);
  if (measured.ranks != predicted.ranks) {
    detail::fail({"compare",
          detail::concat("the measured timeline has ", measured.ranks, " ranks but the predicted one has ",
                         predicted.ranks),
          "Timeline::ranks", "compare a run with the prediction for the same schedule"});
  }
  if (!std::isfinite(options.measured_to_predicted) || options.measured_to_predicted < 0.0) {
    detail::fail({"compare",
          detail::concat("the scale from measured to predicted units is ", options.measured_to_predicted),
          "CompareOptions::measured_to_predicted",
          "pass a positive factor, or 0 to derive it from the timelines' units"});
  }
  if (options.measured_to_predicted > 0.0) {
    c.scale = options.measured_to_predicted;
  } else {
    c.scale = measured.unit.try_factor_to(predicted.unit);
  }
  c.deviation_unit = c.scale ? predicted.unit : TimeUnit("makespan");
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

}  // namespace ppsched
