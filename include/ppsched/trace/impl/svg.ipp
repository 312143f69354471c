// The bodies of <ppsched/trace/svg.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE void write_svg(std::ostream& out, const Timeline& timeline, const SvgOptions& options) {
  const TimelineStats stats = summarize(timeline);
  if (!(options.width >= 200.0 && options.width <= 1e6) ||
      !(options.row_height >= 4.0 && options.row_height <= 1e4) ||
      !(options.comm_row_height >= 2.0 && options.comm_row_height <= 1e4)) {
    detail::fail({"svg", "the picture size is out of range",
          detail::concat("SvgOptions width ", options.width, ", row_height ", options.row_height,
                         ", comm_row_height ", options.comm_row_height),
          "use a width of 200 to 1e6 pixels and row heights of at least 4 (compute) and 2 (comm) pixels"});
  }
  using detail::format_fixed;
  const auto px = [](double v) { return format_fixed(v, 2); };
  const auto esc = [](std::string_view text) { return detail::xml_escape(text); };

  const bool comm_lane = std::any_of(timeline.spans.begin(), timeline.spans.end(),
                                     [](const Span& s) { return s.lane == Lane::comm; });
  constexpr double left = 90.0;  // room for "rank 127"
  constexpr double right = 24.0;
  constexpr double top = 62.0;  // title and summary
  constexpr double row_gap = 8.0;
  const double plot_width = options.width - left - right;
  const bool copy_lane = std::any_of(timeline.spans.begin(), timeline.spans.end(),
                                     [](const Span& s) { return s.lane == Lane::copy; });
  const double lane_gap = comm_lane || copy_lane ? 2.0 : 0.0;
  const double rank_height = options.row_height + (comm_lane ? lane_gap + options.comm_row_height : 0.0) +
                             (copy_lane ? lane_gap + options.comm_row_height : 0.0);
  const double plot_height = static_cast<double>(timeline.ranks) * (rank_height + row_gap);
  const double axis_y = top + plot_height;
  const double legend_y = axis_y + 48.0;

  const double makespan = stats.makespan;
  const auto x_of = [&](double t) {
    return makespan > 0.0 ? left + (t - stats.origin) / makespan * plot_width : left;
  };

  // The legend: every operation present, then idle; wraps to further lines as needed.
  std::vector<Op> present;
  for (int op = 0; op < op_count; ++op) {
    if (stats.op_counts[static_cast<std::size_t>(op)] != 0) present.push_back(static_cast<Op>(op));
  }
  constexpr double legend_entry_width = 190.0;
  const auto per_line = static_cast<std::size_t>(std::max(1.0, std::floor(plot_width / legend_entry_width)));
  const std::size_t legend_lines = (present.size() + 1 + per_line - 1) / per_line;
  const double height = legend_y + static_cast<double>(legend_lines) * 22.0 + 8.0;

  out << R"(<?xml version="1.0" encoding="UTF-8"?>)" << '\n'
      << R"(<svg xmlns="http://www.w3.org/2000/svg" width=")" << px(options.width) << R"(" height=")"
      << px(height) << R"(" viewBox="0 0 )" << px(options.width) << ' ' << px(height)
      << R"(" font-family="Helvetica, Arial, sans-serif">)" << '\n'
      << "<defs>\n"
      << R"(<pattern id="ppsched-idle" width="6" height="6" patternUnits="userSpaceOnUse" )"
      << R"svg(patternTransform="rotate(45)"><rect width="6" height="6" fill="#f3f3f3"/>)svg"
      << R"(<line x1="0" y1="0" x2="0" y2="6" stroke="#d6d6d6" stroke-width="2"/></pattern>)" << '\n'
      << "</defs>\n"
      << R"(<rect width="100%" height="100%" fill="#ffffff"/>)" << '\n';

  const std::string unit_suffix = timeline.unit.empty() ? std::string{} : " " + timeline.unit.text();
  out << R"(<text x=")" << px(left) << R"(" y="24" font-size="17" font-weight="bold">)"
      << esc(options.title.empty() ? std::string{"Pipeline timeline"} : options.title) << "</text>\n"
      << R"(<text x=")" << px(left) << R"(" y="44" font-size="12" fill="#333333">)"
      << esc(detail::concat(timeline.ranks, " ranks, ", stats.spans, " actions; makespan ",
                            detail::format_readable(makespan, 6), unit_suffix, "; bubble ",
                            detail::percent(stats.bubble_fraction), " of ranks \xC3\x97 makespan, ",
                            detail::percent(stats.bubble_vs_ideal), " over the busiest rank's ",
                            detail::format_readable(stats.ideal_time, 6), unit_suffix))
      << "</text>\n";

  // Idle background first, then grid lines over it, so boxes cover both.
  out << "<g>\n";
  for (std::int32_t r = 0; r < timeline.ranks; ++r) {
    const double y = top + static_cast<double>(r) * (rank_height + row_gap);
    out << R"(<rect x=")" << px(left) << R"(" y=")" << px(y) << R"(" width=")" << px(plot_width)
        << R"(" height=")" << px(options.row_height) << R"svg(" fill="url(#ppsched-idle)"/>)svg" << '\n';
    if (comm_lane) {
      out << R"(<rect x=")" << px(left) << R"(" y=")" << px(y + options.row_height + lane_gap)
          << R"(" width=")" << px(plot_width) << R"(" height=")" << px(options.comm_row_height)
          << R"svg(" fill="url(#ppsched-idle)"/>)svg" << '\n';
    }
    out << R"(<text x=")" << px(left - 8.0) << R"(" y=")" << px(y + options.row_height / 2.0)
        << R"(" font-size="13" text-anchor="end" dominant-baseline="central">rank )" << std::to_string(r)
        << "</text>\n";
    if (comm_lane) {
      out << R"(<text x=")" << px(left - 8.0) << R"(" y=")"
          << px(y + options.row_height + lane_gap + options.comm_row_height / 2.0)
          << R"(" font-size="9" fill="#555555" text-anchor="end" dominant-baseline="central">comm</text>)"
          << '\n';
    }
  }
  out << "</g>\n";

  const double tick_step = detail::nice_tick_step(makespan, std::max(1.0, plot_width / 90.0));
  const int decimals = detail::tick_decimals(tick_step);
  out << R"(<g font-size="11" fill="#333333">)" << '\n';
  const auto ticks = makespan > 0.0 ? static_cast<std::int64_t>(std::floor(makespan / tick_step + 1e-9)) : 0;
  for (std::int64_t k = 0; k <= ticks; ++k) {
    const double t = static_cast<double>(k) * tick_step;
    const double x = x_of(stats.origin + t);
    out << R"(<line x1=")" << px(x) << R"(" y1=")" << px(top - 4.0) << R"(" x2=")" << px(x) << R"(" y2=")"
        << px(axis_y + 5.0) << R"(" stroke="#bbbbbb" stroke-width="0.6"/>)" << '\n'
        << R"(<text x=")" << px(x) << R"(" y=")" << px(axis_y + 18.0) << R"(" text-anchor="middle">)"
        << format_fixed(t, decimals) << "</text>\n";
  }
  out << R"(<line x1=")" << px(left) << R"(" y1=")" << px(axis_y) << R"(" x2=")" << px(left + plot_width)
      << R"(" y2=")" << px(axis_y) << R"(" stroke="#333333" stroke-width="1"/>)" << '\n'
      << R"(<text x=")" << px(left + plot_width / 2.0) << R"(" y=")" << px(axis_y + 34.0)
      << R"(" text-anchor="middle">)"
      << esc(timeline.unit.empty() ? std::string{"time from the first start"}
                                   : "time from the first start (" + timeline.unit.text() + ")")
      << "</text>\n</g>\n";

  // Boxes, one group per rank and lane.
  const auto lanes = detail::spans_by_rank_and_lane(timeline);
  for (std::int32_t r = 0; r < timeline.ranks; ++r) {
    for (const Lane lane : {Lane::compute, Lane::comm, Lane::copy}) {
      const std::vector<const Span*>& spans = lanes[static_cast<std::size_t>(r)][static_cast<std::size_t>(lane)];
      if (spans.empty()) continue;
      std::vector<std::size_t> level;
      const std::size_t levels = detail::assign_levels(spans, level);
      // Compute, then comm, then copy, each below the one before.
      const double comm_top = options.row_height + lane_gap;
      const double copy_top = comm_top + (comm_lane ? options.comm_row_height + lane_gap : 0.0);
      const double lane_top = top + static_cast<double>(r) * (rank_height + row_gap) +
                              (lane == Lane::comm ? comm_top : (lane == Lane::copy ? copy_top : 0.0));
      const double lane_height = lane == Lane::compute ? options.row_height : options.comm_row_height;
      const double bar_height = lane_height / static_cast<double>(levels);
      out << "<g stroke=\"#ffffff\" stroke-width=\"0.5\">\n";
      for (std::size_t i = 0; i < spans.size(); ++i) {
        const Span& s = *spans[i];
        const double x = x_of(s.start);
        const double w = x_of(s.end) - x;
        const double y = lane_top + static_cast<double>(level[i]) * bar_height;
        out << R"(<rect x=")" << px(x) << R"(" y=")" << px(y) << R"(" width=")" << px(w) << R"(" height=")"
            << px(bar_height) << R"(" fill=")" << detail::svg_fill(s.action.op) << '"';
        if (options.tooltips) {
          out << "><title>"
              << esc(detail::concat(s.action, " on rank ", s.rank, ": ",
                                    detail::format_readable(s.start - stats.origin, 6), " to ",
                                    detail::format_readable(s.end - stats.origin, 6), unit_suffix))
              << "</title></rect>\n";
        } else {
          out << "/>\n";
        }
        if (options.microbatch_labels) {
          // The largest font up to 11 px in which the number fits the box with a margin;
          // boxes too small for 7 px text stay unlabelled rather than smudged.
          const std::string label = std::to_string(s.action.microbatch);
          const double glyph = 0.6;  // average digit width per px of font size
          const double font =
              std::min({11.0, bar_height * 0.7, (w - 2.0) / (glyph * static_cast<double>(label.size()))});
          if (font >= 7.0) {
            out << R"(<text x=")" << px(x + w / 2.0) << R"(" y=")" << px(y + bar_height / 2.0)
                << R"(" font-size=")" << format_fixed(font, 1) << R"(" fill=")" << detail::svg_text_fill(s.action.op)
                << R"(" stroke="none" text-anchor="middle" dominant-baseline="central">)" << label
                << "</text>\n";
          }
        }
      }
      out << "</g>\n";
    }
  }

  out << R"(<g font-size="12">)" << '\n';
  for (std::size_t i = 0; i <= present.size(); ++i) {
    const double x = left + static_cast<double>(i % per_line) * legend_entry_width;
    const double y = legend_y + static_cast<double>(i / per_line) * 22.0;
    const bool idle = i == present.size();
    out << R"(<rect x=")" << px(x) << R"(" y=")" << px(y) << R"(" width="16" height="14" fill=")"
        << (idle ? std::string{"url(#ppsched-idle)"} : std::string{detail::svg_fill(present[i])})
        << R"(" stroke="#999999" stroke-width="0.5"/>)" << '\n'
        << R"(<text x=")" << px(x + 22.0) << R"(" y=")" << px(y + 7.0) << R"(" dominant-baseline="central">)"
        << (idle ? std::string{"idle"}
                 : std::string{op_name(present[i])} + " " + std::string{op_description(present[i])})
        << "</text>\n";
  }
  out << "</g>\n</svg>\n";
}

}  // namespace ppsched::PPSCHED_MODE
