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
#include "ppsched/trace/detail/text.hpp"
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

namespace detail {

// The process id and thread ids a rank's lanes get in the trace.
[[nodiscard]] constexpr std::int64_t chrome_trace_pid(std::int32_t rank) noexcept {
  return std::int64_t{rank} + 1;
}
[[nodiscard]] constexpr std::int64_t chrome_trace_tid(Lane lane) noexcept {
  return lane == Lane::compute ? 1 : (lane == Lane::comm ? 2 : 3);
}

// "F3", "SEND_B12": the event name of an action.
[[nodiscard]] inline std::string chrome_trace_event_name(const Action& action) {
  return std::string{op_name(action.op)} + std::to_string(action.microbatch);
}

[[nodiscard]] inline double chrome_trace_microseconds_per_unit(const Timeline& timeline,
                                                               const ChromeTraceOptions& options) {
  if (!std::isfinite(options.microseconds_per_unit) || options.microseconds_per_unit < 0.0) {
    detail::fail({"chrome trace", detail::concat("microseconds per unit is ", options.microseconds_per_unit),
          "ChromeTraceOptions::microseconds_per_unit",
          "pass a positive factor, or 0 to derive it from the timeline's unit"});
  }
  if (options.microseconds_per_unit > 0.0) return options.microseconds_per_unit;
  if (const auto factor = timeline.unit.try_factor_to(TimeUnit("us"))) return *factor;
  return 1.0;
}

}  // namespace detail

PPSCHED_OUTLINE void write_chrome_trace(std::ostream& out, const Timeline& timeline,
                               const ChromeTraceOptions& options = {});

[[nodiscard]] inline std::string to_chrome_trace(const Timeline& timeline,
                                                 const ChromeTraceOptions& options = {}) {
  std::ostringstream out;
  write_chrome_trace(out, timeline, options);
  return out.str();
}

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/trace/impl/chrome_trace.ipp"
#endif
