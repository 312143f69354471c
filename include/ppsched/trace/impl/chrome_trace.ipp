// The bodies of <ppsched/trace/chrome_trace.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE void write_chrome_trace(std::ostream& out, const Timeline& timeline,
                               const ChromeTraceOptions& options) {
  const TimelineStats stats = summarize(timeline);  // validates: no NaN can reach the JSON
  const double scale = detail::chrome_trace_microseconds_per_unit(timeline, options);
  const bool comm_lane = std::any_of(timeline.spans.begin(), timeline.spans.end(),
                                     [](const Span& s) { return s.lane == Lane::comm; });
  const bool copy_lane = std::any_of(timeline.spans.begin(), timeline.spans.end(),
                                     [](const Span& s) { return s.lane == Lane::copy; });

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
    const auto pid = detail::chrome_trace_pid(rank);
    metadata("process_name", pid, 0, "name", quoted(options.process_label + " " + std::to_string(rank)));
    metadata("process_sort_index", pid, 0, "sort_index", std::to_string(rank));
    metadata("thread_name", pid, detail::chrome_trace_tid(Lane::compute), "name", quoted("compute"));
    metadata("thread_sort_index", pid, detail::chrome_trace_tid(Lane::compute), "sort_index", "0");
    if (comm_lane) {
      metadata("thread_name", pid, detail::chrome_trace_tid(Lane::comm), "name", quoted("comm"));
      metadata("thread_sort_index", pid, detail::chrome_trace_tid(Lane::comm), "sort_index", "1");
    }
    if (copy_lane) {
      metadata("thread_name", pid, detail::chrome_trace_tid(Lane::copy), "name", quoted("copy"));
      metadata("thread_sort_index", pid, detail::chrome_trace_tid(Lane::copy), "sort_index", "2");
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
    begin_event() << R"({"name":")" << detail::chrome_trace_event_name(a) << R"(","cat":")"
                  << (is_compute(a.op) ? "compute" : (is_comm(a.op) ? "comm" : "memory")) << R"(","ph":"X","pid":)"
                  << std::to_string(detail::chrome_trace_pid(span->rank)) << R"(,"tid":)"
                  << std::to_string(detail::chrome_trace_tid(span->lane)) << R"(,"ts":)"
                  << detail::format_shortest((span->start - stats.origin) * scale) << R"(,"dur":)"
                  << detail::format_shortest((span->end - span->start) * scale) << R"(,"args":{"op":")"
                  << op_name(a.op) << R"(","stage":)" << std::to_string(a.stage) << R"(,"microbatch":)"
                  << std::to_string(a.microbatch) << R"(,"rank":)" << std::to_string(span->rank);
    if (a.group != 0) out << R"(,"group":)" << std::to_string(a.group);
    out << "}}";
  }
  out << "\n],\n"
      << R"("otherData":{"unit":)" << quoted(timeline.unit.text()) << R"(,"microseconds_per_unit":)"
      << detail::format_shortest(scale) << R"(,"origin":)" << detail::format_shortest(stats.origin)
      << R"(,"ranks":)" << std::to_string(timeline.ranks);
  if (!options.title.empty()) out << R"(,"title":)" << quoted(options.title);
  out << "}}\n";
}

}  // namespace ppsched::PPSCHED_MODE
