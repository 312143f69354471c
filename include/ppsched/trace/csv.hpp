// A Timeline as CSV, for spreadsheets, pandas or gnuplot: one row per span with its rank,
// lane, operation, stage, micro-batch, communication group and times, preceded by one
// comment line with the rank count and the unit (pandas reads it with comment='#').
// Times are written in the shortest form that reads back as the same double, so nothing
// is lost on the way out, and without the stream's locale.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "ppsched/schedule/action.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/text.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

inline void write_timeline_csv(std::ostream& out, const Timeline& timeline) {
  validate_timeline(timeline);
  // The unit sits in a comment line: anything that could end the line or the comment's
  // meaning (control characters, invalid UTF-8) is replaced.
  std::string unit;
  detail::for_each_code_point(timeline.unit, [&unit](char32_t cp, std::string_view bytes) {
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
    out << std::to_string(s->rank) << ',' << (s->lane == Lane::compute ? "compute" : "comm") << ','
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

}  // namespace ppsched
