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

[[noreturn]] PPSCHED_OUTLINE void fail_validation(const Schedule& schedule, const ValidationReport& report);

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/validate/impl/detail_validate.ipp"
#endif
