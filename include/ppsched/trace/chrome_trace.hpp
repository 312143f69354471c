// Chrome-trace JSON (the Trace Event Format read by Perfetto and chrome://tracing) for a
// Timeline, simulated or measured. Each rank is a process named "rank N", listed in rank
// order, with a "compute" thread and, when the timeline has communication on its own lane,
// a "comm" thread below it. Every action is one complete ("X") event named like "F3" or
// "SEND_B3" (operation and micro-batch) whose args carry op, stage, micro-batch, rank and
// communication group, so a click in the viewer says exactly which action it was.
//
// The format's timestamps are microseconds. Times convert from Timeline::unit when it is a
// known time unit ("s", "ms", "us", "ns"); any other unit (a simulation in the user's cost
// unit) maps one unit to one microsecond unless ChromeTraceOptions says otherwise. The unit,
// the factor and the timeline's origin are recorded under "otherData". Times are written
// from the timeline's origin, because trace processors reject negative timestamps, and
// process ids start at 1, because Perfetto treats pid 0 as the kernel's idle task. Numbers
// are written without the stream's locale, so the JSON is valid whatever the caller imbued.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/text.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct ChromeTraceOptions {
  // Microseconds per timeline unit; 0 derives it from Timeline::unit as described above.
  double microseconds_per_unit = 0.0;
  // Processes are named "<process_label> <rank>".
  std::string process_label = "rank";
  // Recorded under otherData.title when not empty (a schedule's name, a run's label).
  std::string title;
};

// The process id and thread ids a rank's lanes get in the trace.
[[nodiscard]] constexpr std::int64_t chrome_trace_pid(std::int32_t rank) noexcept {
  return std::int64_t{rank} + 1;
}
[[nodiscard]] constexpr std::int64_t chrome_trace_tid(Lane lane) noexcept {
  return lane == Lane::compute ? 1 : 2;
}

// "F3", "SEND_B12": the event name of an action.
[[nodiscard]] inline std::string chrome_trace_event_name(const Action& action) {
  return std::string{op_name(action.op)} + std::to_string(action.microbatch);
}

[[nodiscard]] inline double chrome_trace_microseconds_per_unit(const Timeline& timeline,
                                                               const ChromeTraceOptions& options) {
  if (!std::isfinite(options.microseconds_per_unit) || options.microseconds_per_unit < 0.0) {
    fail({"chrome trace", detail::concat("microseconds per unit is ", options.microseconds_per_unit),
          "ChromeTraceOptions::microseconds_per_unit",
          "pass a positive factor, or 0 to derive it from the timeline's unit"});
  }
  if (options.microseconds_per_unit > 0.0) return options.microseconds_per_unit;
  if (const auto seconds = seconds_per_unit(timeline.unit)) return *seconds * 1e6;
  return 1.0;
}

PPSCHED_OUTLINE void write_chrome_trace(std::ostream& out, const Timeline& timeline,
                               const ChromeTraceOptions& options = {})
#if PPSCHED_OUTLINE_BODY
{
  const TimelineStats stats = summarize(timeline);  // validates: no NaN can reach the JSON
  const double scale = chrome_trace_microseconds_per_unit(timeline, options);
  const bool comm_lane = std::any_of(timeline.spans.begin(), timeline.spans.end(),
                                     [](const Span& s) { return s.lane == Lane::comm; });

  bool first = true;
  const auto begin_event = [&]() -> std::ostream& {
    out << (first ? "\n" : ",\n");
    first = false;
    return out;
  };
  const auto metadata = [&](const char* name, std::int64_t pid, std::int64_t tid, const char* key,
                            const std::string& json_value) {
    begin_event() << R"({"name":")" << name << R"(","ph":"M","pid":)" << std::to_string(pid) << R"(,"tid":)"
                  << std::to_string(tid) << R"(,"args":{")" << key << R"(":)" << json_value << "}}";
  };
  const auto quoted = [](std::string_view text) { return "\"" + detail::json_escape(text) + "\""; };

  out << R"({"traceEvents":[)";
  for (std::int32_t rank = 0; rank < timeline.ranks; ++rank) {
    const auto pid = chrome_trace_pid(rank);
    metadata("process_name", pid, 0, "name", quoted(options.process_label + " " + std::to_string(rank)));
    metadata("process_sort_index", pid, 0, "sort_index", std::to_string(rank));
    metadata("thread_name", pid, chrome_trace_tid(Lane::compute), "name", quoted("compute"));
    metadata("thread_sort_index", pid, chrome_trace_tid(Lane::compute), "sort_index", "0");
    if (comm_lane) {
      metadata("thread_name", pid, chrome_trace_tid(Lane::comm), "name", quoted("comm"));
      metadata("thread_sort_index", pid, chrome_trace_tid(Lane::comm), "sort_index", "1");
    }
  }

  // Viewers cope with any order, but sorted events make the file readable and diffable.
  std::vector<const Span*> order;
  order.reserve(timeline.spans.size());
  for (const Span& span : timeline.spans) order.push_back(&span);
  std::stable_sort(order.begin(), order.end(), [](const Span* a, const Span* b) {
    return std::make_tuple(a->rank, a->lane, a->start) < std::make_tuple(b->rank, b->lane, b->start);
  });
  for (const Span* span : order) {
    const Action& a = span->action;
    begin_event() << R"({"name":")" << chrome_trace_event_name(a) << R"(","cat":")"
                  << (is_compute(a.op) ? "compute" : "comm") << R"(","ph":"X","pid":)"
                  << std::to_string(chrome_trace_pid(span->rank)) << R"(,"tid":)"
                  << std::to_string(chrome_trace_tid(span->lane)) << R"(,"ts":)"
                  << detail::format_shortest((span->start - stats.origin) * scale) << R"(,"dur":)"
                  << detail::format_shortest((span->end - span->start) * scale) << R"(,"args":{"op":")"
                  << op_name(a.op) << R"(","stage":)" << std::to_string(a.stage) << R"(,"microbatch":)"
                  << std::to_string(a.microbatch) << R"(,"rank":)" << std::to_string(span->rank);
    if (a.group != 0) out << R"(,"group":)" << std::to_string(a.group);
    out << "}}";
  }
  out << "\n],\n"
      << R"("otherData":{"unit":)" << quoted(timeline.unit) << R"(,"microseconds_per_unit":)"
      << detail::format_shortest(scale) << R"(,"origin":)" << detail::format_shortest(stats.origin)
      << R"(,"ranks":)" << std::to_string(timeline.ranks);
  if (!options.title.empty()) out << R"(,"title":)" << quoted(options.title);
  out << "}}\n";
}
#else
;
#endif

[[nodiscard]] inline std::string to_chrome_trace(const Timeline& timeline,
                                                 const ChromeTraceOptions& options = {}) {
  std::ostringstream out;
  write_chrome_trace(out, timeline, options);
  return out.str();
}

}  // namespace ppsched
