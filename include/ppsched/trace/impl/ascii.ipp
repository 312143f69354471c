// The bodies of <ppsched/trace/ascii.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE std::string to_ascii(const Timeline& timeline, const AsciiOptions& options) {
  const TimelineStats stats = summarize(timeline);
  if (options.columns < 0 || options.max_columns < 1) {
    detail::fail({"ascii timeline", "the column count is out of range",
          detail::concat("AsciiOptions columns ", options.columns, ", max_columns ", options.max_columns),
          "pass columns 0 (automatic) or more, and max_columns of at least 1"});
  }
  const bool whole = detail::whole_unit_timeline(timeline, stats.origin);
  std::size_t columns = 0;
  double cell_time = 0.0;
  if (stats.makespan > 0.0) {
    if (options.columns > 0) {
      columns = static_cast<std::size_t>(options.columns);
    } else if (whole && stats.makespan <= static_cast<double>(options.max_columns)) {
      columns = static_cast<std::size_t>(std::llround(stats.makespan));
    } else {
      columns = static_cast<std::size_t>(options.max_columns);
    }
    cell_time = stats.makespan / static_cast<double>(columns);
  }

  std::int32_t max_microbatch = 0;
  for (const Span& s : timeline.spans) max_microbatch = std::max(max_microbatch, s.action.microbatch);
  const std::size_t cell_width = options.microbatch_digits ? 1 + std::to_string(max_microbatch).size() : 1;
  const std::size_t cell_stride = options.microbatch_digits ? cell_width + 1 : 1;
  const std::size_t line_width = columns == 0 ? 0 : columns * cell_stride - (cell_stride - cell_width);

  const bool comm_lane = options.comm_rows && std::any_of(timeline.spans.begin(), timeline.spans.end(),
                                                          [](const Span& s) { return s.lane == Lane::comm; });
  const std::string last_label = "rank " + std::to_string(std::max(timeline.ranks - 1, 0));
  const std::size_t label_width = last_label.size();
  const auto label = [&](std::string text) {
    text.insert(0, label_width - std::min(label_width, text.size()), ' ');
    return text + " |";
  };

  std::string out;
  if (options.ruler && columns > 0) {
    // Round times (multiples of 1, 2 or 5 × 10^k) about every tenth cell (fifth with
    // digits), each at the cell where it falls, skipped where it would run into the last.
    std::string ruler(line_width, ' ');
    const double every = options.microbatch_digits ? 5.0 : 10.0;
    const double step =
        detail::nice_tick_step(stats.makespan, std::max(1.0, static_cast<double>(columns) / every));
    const int decimals = detail::tick_decimals(step);
    std::size_t free_from = 0;
    for (std::size_t k = 0;; ++k) {
      const double time = static_cast<double>(k) * step;
      const auto c = static_cast<std::size_t>(std::floor(time / cell_time + 1e-9));
      if (c >= columns) break;
      const std::string text = detail::format_fixed(time, decimals);
      const std::size_t at = c * cell_stride;
      if (at < free_from || at + text.size() > line_width) continue;
      ruler.replace(at, text.size(), text);
      free_from = at + text.size() + 1;
    }
    while (!ruler.empty() && ruler.back() == ' ') ruler.pop_back();
    out += std::string(label_width + 2, ' ') + ruler + '\n';
  }

  std::array<bool, op_count> shown{};
  const auto draw = [&](const std::vector<const Span*>& spans) {
    const auto cells = detail::ascii_cells(spans, stats.origin, cell_time, columns);
    std::string line;
    for (std::size_t c = 0; c < columns; ++c) {
      if (c != 0 && options.microbatch_digits) line += ' ';
      std::string text;
      if (cells[c] < 0) {
        text.assign(cell_width, '.');
      } else {
        const Action& a = spans[static_cast<std::size_t>(cells[c])]->action;
        shown[static_cast<std::size_t>(a.op)] = true;
        text = detail::ascii_letter(a.op);
        if (options.microbatch_digits) text += std::to_string(a.microbatch);
        text.resize(cell_width, ' ');
      }
      line += text;
    }
    return line + "|\n";
  };
  const auto lanes = detail::spans_by_rank_and_lane(timeline);
  for (std::int32_t r = 0; r < timeline.ranks; ++r) {
    const auto& rank = lanes[static_cast<std::size_t>(r)];
    out += label("rank " + std::to_string(r)) + draw(rank[0]);
    if (comm_lane) out += label("comm") + draw(rank[1]);
    // Copies overlap compute, so they never share its row: a row of their own where there are any.
    if (!rank[2].empty()) out += label("copy") + draw(rank[2]);
  }

  if (options.legend) {
    std::string legend;
    for (int op = 0; op < op_count; ++op) {
      if (!shown[static_cast<std::size_t>(op)]) continue;
      legend += detail::ascii_letter(static_cast<Op>(op));
      legend += ' ';
      legend += op_description(static_cast<Op>(op));
      legend += ", ";
    }
    const std::string unit = timeline.unit.empty() ? std::string{"unit"} : timeline.unit.text();
    legend += ". idle; 1 column = " + detail::format_readable(cell_time, 4) + " " + unit;
    out += legend + '\n';
  }
  return out;
}

}  // namespace ppsched::PPSCHED_MODE
