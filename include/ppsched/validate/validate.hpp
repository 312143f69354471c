// Validation of a schedule, as a proof rather than a lint. `validate` checks everything a
// user writing (or loading) a schedule can get wrong — placement, ranges, every (stage,
// micro-batch) computed exactly once per kind, the order of F / B / BI / BW, the
// communication of a lowered schedule (one send and one receive per transfer, on the right
// ranks, posted in an order NCCL can match, contiguous groups) — and then executes the
// programs abstractly under the rendezvous rules of docs/execution-model.md. Because every
// rule of that model is an "all of these are done" condition, the set of actions that can
// ever complete does not depend on timing, so one abstract run decides whether the
// schedule can deadlock on any hardware; the run with communication on the compute stream
// decides it for a separate comm stream too (that setting only removes waits). A deadlock
// is reported with each stuck action and what it waits for. The report also carries peak
// activation memory per rank.
//
// The static checks and the abstract execution are the engine's (include/ppsched/engine/),
// shared with `lower` and the simulator; the memory walk is memory.hpp. A `Schedule` is always
// checked in full. A `LoweredSchedule` that lower() wrote carries lower()'s construction as its
// proof (every static check holds, and no timing can deadlock in either stream setting: see
// lower/lower.hpp), so validating it only measures its memory; tests/test_validate.cpp checks
// that the two paths report alike.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "ppsched/config.hpp"
#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/engine/detail/static_checks.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/validate/memory.hpp"
#include "ppsched/validate/report.hpp"
#include "ppsched/validate/detail/validate.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Validates a schedule (compute-only or lowered) and reports every problem found, plus
// peak activation memory per rank: every check, always. Throws only for unusable options.
// `ws` (optional) lends its arrays (engine/workspace.hpp); without it the call borrows the scratch pool's.
[[nodiscard]] inline ValidationReport validate(const Schedule& schedule, const ValidateOptions& options,
                                               Workspace& ws) {
  return detail::validate_into(schedule, options, ws);
}
[[nodiscard]] inline ValidationReport validate(const Schedule& schedule, const ValidateOptions& options = {}) {
  detail::BorrowedWorkspace ws;  // the scratch pool's (engine/workspace.hpp)
  return validate(schedule, options, ws.get());
}

// The same report for a schedule lower() wrote, whose construction proves the checks (only
// its memory is measured); one lower() returned unchanged (it already had communication) is
// checked in full.
[[nodiscard]] inline ValidationReport validate(const LoweredSchedule& lowered, const ValidateOptions& options,
                                               Workspace& ws) {
  if (!lowered.proven()) return detail::validate_into(lowered.schedule(), options, ws);
  return detail::validate_proven(lowered, options, ws.flat());
}
[[nodiscard]] inline ValidationReport validate(const LoweredSchedule& lowered, const ValidateOptions& options = {}) {
  detail::BorrowedWorkspace ws;
  return validate(lowered, options, ws.get());
}

// Validates and throws ppsched::error listing every problem (at most 20 in the message)
// when there is any; returns the report (with its memory figures) otherwise.
inline ValidationReport validate_or_throw(const Schedule& schedule, const ValidateOptions& options = {}) {
  ValidationReport report = validate(schedule, options);
  if (!report.ok()) detail::fail_validation(schedule, report);
  return report;
}
inline ValidationReport validate_or_throw(const LoweredSchedule& lowered, const ValidateOptions& options = {}) {
  ValidationReport report = validate(lowered, options);
  if (!report.ok()) detail::fail_validation(lowered.schedule(), report);
  return report;
}

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/validate/impl/validate.ipp"
#endif
