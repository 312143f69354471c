// A Timeline as CSV, for spreadsheets, pandas or gnuplot: one row per span with its rank,
// lane, operation, stage, micro-batch, communication group and times, preceded by one
// comment line with the rank count and the unit (pandas reads it with comment='#').
// Times are written in the shortest form that reads back as the same double, so nothing
// is lost on the way out, and without the stream's locale. parse_timeline_csv reads the file
// back (a measured run saved for `ppsched-plan --calibrate`, sim/calibrate.hpp), and
// load_timeline_csv reads it from a file.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "ppsched/graph/text_input.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/detail/text.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

inline void write_timeline_csv(std::ostream& out, const Timeline& timeline) {
  validate_timeline(timeline);
  // The unit sits in a comment line: anything that could end the line or the comment's
  // meaning (control characters, invalid UTF-8) is replaced.
  std::string unit;
  detail::for_each_code_point(timeline.unit.text(), [&unit](char32_t cp, std::string_view bytes) {
    unit += cp < 0x20 || cp == 0x7F ? detail::utf8_replacement : bytes;
  });
  out << "# ppsched timeline: ranks " << std::to_string(timeline.ranks) << ", unit " << unit << '\n'
      << "rank,lane,op,stage,microbatch,group,start,end\n";
  std::vector<const Span*> order;
  order.reserve(timeline.spans.size());
  for (const Span& s : timeline.spans) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](const Span* a, const Span* b) {
    return std::make_tuple(a->rank, a->start, a->lane) < std::make_tuple(b->rank, b->start, b->lane);
  });
  for (const Span* s : order) {
    out << std::to_string(s->rank) << ',' << lane_name(s->lane) << ','
        << op_name(s->action.op) << ',' << std::to_string(s->action.stage) << ','
        << std::to_string(s->action.microbatch) << ',' << std::to_string(s->action.group) << ','
        << detail::format_shortest(s->start) << ',' << detail::format_shortest(s->end) << '\n';
  }
}

[[nodiscard]] inline std::string to_timeline_csv(const Timeline& timeline) {
  std::ostringstream out;
  write_timeline_csv(out, timeline);
  return out.str();
}

namespace detail {

[[nodiscard]] inline std::vector<std::string_view> split_csv_line(std::string_view line) {
  std::vector<std::string_view> cells;
  std::size_t from = 0;
  while (true) {
    const std::size_t comma = line.find(',', from);
    cells.push_back(line.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from));
    if (comma == std::string_view::npos) return cells;
    from = comma + 1;
  }
}

}  // namespace detail

// Reads what write_timeline_csv writes; `source` names the text in errors, which give the line
// and the column that cannot be read.
[[nodiscard]] inline Timeline parse_timeline_csv(std::string_view text, std::string_view source = "<string>") {
  using detail::concat;
  const std::string subject = detail::concat("timeline '", source, "'");
  Timeline t;
  std::size_t line_no = 0, from = 0;
  bool header = false, columns = false;
  while (from < text.size()) {
    std::size_t end = text.find('\n', from);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(from, end - from);
    from = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = detail::concat("line ", line_no);
    if (!header) {
      const std::string_view prefix = "# ppsched timeline: ranks ";
      const std::size_t unit_at = line.find(", unit ");
      std::int32_t ranks = 0;
      if (line.substr(0, prefix.size()) != prefix || unit_at == std::string_view::npos ||
          std::from_chars(line.data() + prefix.size(), line.data() + unit_at, ranks).ec != std::errc{} || ranks < 1) {
        detail::fail({subject, "does not start with \"# ppsched timeline: ranks N, unit U\"", where,
              "give a file written by write_timeline_csv (ppsched's --timeline-csv, or a run's to_timeline_csv)"});
      }
      t.ranks = ranks;
      t.unit = std::string(line.substr(unit_at + 7));
      header = true;
      continue;
    }
    if (!columns) {
      if (line != "rank,lane,op,stage,microbatch,group,start,end") {
        detail::fail({subject, detail::concat("expected the column names, got \"", line, "\""), where,
              "the second line is rank,lane,op,stage,microbatch,group,start,end"});
      }
      columns = true;
      continue;
    }
    const std::vector<std::string_view> cells = detail::split_csv_line(line);
    if (cells.size() != 8) {
      detail::fail({subject, detail::concat("has ", cells.size(), " cells, not 8"), where, "one span per line: rank,lane,op,stage,microbatch,group,start,end"});
    }
    const auto integer = [&](std::size_t k, const char* name) {
      std::int32_t v = 0;
      const auto r = std::from_chars(cells[k].data(), cells[k].data() + cells[k].size(), v);
      if (r.ec != std::errc{} || r.ptr != cells[k].data() + cells[k].size() || v < 0) {
        detail::fail({subject, detail::concat(name, " \"", cells[k], "\" is not a whole number >= 0"), detail::concat(where, ", column ", k + 1),
              detail::concat("write the ", name, " as a whole number")});
      }
      return v;
    };
    const auto number = [&](std::size_t k, const char* name) {
      double v = 0.0;
      const auto r = std::from_chars(cells[k].data(), cells[k].data() + cells[k].size(), v);
      if (r.ec != std::errc{} || r.ptr != cells[k].data() + cells[k].size()) {
        detail::fail({subject, detail::concat(name, " \"", cells[k], "\" is not a number"), detail::concat(where, ", column ", k + 1),
              detail::concat("write the ", name, " time as a number")});
      }
      return v;
    };
    Span span;
    span.rank = integer(0, "rank");
    if (cells[1] != "compute" && cells[1] != "comm" && cells[1] != "copy") {
      detail::fail({subject, detail::concat("lane \"", cells[1], "\""), detail::concat(where, ", column 2"), "the lane is compute, comm or copy"});
    }
    span.lane = cells[1] == "compute" ? Lane::compute : (cells[1] == "comm" ? Lane::comm : Lane::copy);
    bool known = false;
    for (int op = 0; op < op_count; ++op) {
      if (op_name(static_cast<Op>(op)) == cells[2]) {
        span.action.op = static_cast<Op>(op);
        known = true;
      }
    }
    if (!known) {
      detail::fail({subject, detail::concat("operation \"", cells[2], "\""), detail::concat(where, ", column 3"),
            "the operations are F, B, BI, BW, SEND_F, RECV_F, SEND_B, RECV_B, R, OFFLOAD, RELOAD"});
    }
    span.action.stage = integer(3, "stage");
    span.action.microbatch = integer(4, "micro-batch");
    span.action.group = static_cast<std::uint32_t>(integer(5, "group"));
    span.start = number(6, "start");
    span.end = number(7, "end");
    t.spans.push_back(span);
  }
  if (!columns) detail::fail({subject, "has no spans", "the end of the file", "give a file written by write_timeline_csv"});
  validate_timeline(t);
  return t;
}

// Reads a timeline CSV from a file (or a FIFO or a device), at most `max_bytes` of it, as
// parse_timeline_csv reads text: a measured run saved with write_timeline_csv, to calibrate
// a profile from (recalibrate_plan) or to compare with a prediction. Errors name the input
// as "timeline '<path>'"; one that never ends (/dev/zero) is an error at the bound.
[[nodiscard]] inline Timeline load_timeline_csv(const std::filesystem::path& path, std::size_t max_bytes = max_csv_bytes) {
  const std::string text = detail::read_text_file(path, max_bytes, detail::concat("timeline '", path.string(), "'"));
  return parse_timeline_csv(text, path.string());
}

}  // namespace ppsched
