// The bodies of <ppsched/validate/detail/validate.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[noreturn]] PPSCHED_OUTLINE void fail_validation(const Schedule& schedule, const ValidationReport& report) {
  std::string list;
  const std::size_t shown = std::min<std::size_t>(report.problems.size(), 20);
  for (std::size_t i = 0; i < shown; ++i) list += "\n  - " + report.problems[i].message;
  const std::size_t hidden = report.problems.size() - shown + report.unlisted_problems;
  if (hidden != 0) list += detail::concat("\n  - ... and ", hidden, " more (see validate()'s report)");
  detail::fail({"schedule '" + schedule.name + "'",
        detail::concat("is not valid: ", report.problems.size() + report.unlisted_problems, " problem(s):", list), "",
        "fix each problem as it says; lower() writes the communication of a compute-only schedule"});
}

}  // namespace detail
}  // namespace ppsched
