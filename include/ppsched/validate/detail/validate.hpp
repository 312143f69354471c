// Internals of <ppsched/validate/validate.hpp>, which includes this file: validate() of a
// schedule lower() wrote, which trusts the proof and measures the memory. They are in
// ppsched::detail and not part of the API: no example or page uses them, and they may change in
// any release (docs/architecture.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "ppsched/config.hpp"
#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/detail/static_checks.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/validate/memory.hpp"
#include "ppsched/validate/report.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// validate() of a schedule lower() wrote (LoweredSchedule::proven): what the full checks would
// report for it — no problems, and its memory, measured from the programs as always.
PPSCHED_OUTLINE ValidationReport validate_proven(const LoweredSchedule& lowered, const ValidateOptions& options,
                                        FlatSchedule& flat);

// Static checks, memory and (when they pass) the deadlock proof in both stream settings.
PPSCHED_OUTLINE ValidationReport validate_into(const Schedule& s, const ValidateOptions& options, Workspace& ws);

[[noreturn]] inline void fail_validation(const Schedule& schedule, const ValidationReport& report) {
  std::string list;
  const std::size_t shown = std::min<std::size_t>(report.problems.size(), 20);
  for (std::size_t i = 0; i < shown; ++i) list += "\n  - " + report.problems[i].message;
  const std::size_t hidden = report.problems.size() - shown + report.unlisted_problems;
  if (hidden != 0) list += concat("\n  - ... and ", hidden, " more (see validate()'s report)");
  fail({"schedule '" + schedule.name + "'",
        concat("is not valid: ", report.problems.size() + report.unlisted_problems, " problem(s):", list), "",
        "fix each problem as it says; lower() writes the communication of a compute-only schedule"});
}

}  // namespace detail

}  // namespace ppsched
