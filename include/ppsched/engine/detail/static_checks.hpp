// The checks that do not need the programs to run (shape, ranges, placement, completeness,
// orders within one rank, pairs, groups, the bookkeeping of communication), made while the
// flat index is built. lower checks its compute-only input with them, validate reports what
// they find, simulate refuses a schedule they fault; each gets the same index back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE::detail {

// The per-action part of static_checks for a schedule without problems: fills the index
// (owner, rank_begin but its last entry, rank_actions, slots and the flags) and returns
// true, or returns false at the first action the full loop would report.
[[nodiscard]] PPSCHED_OUTLINE bool index_clean_programs(const std::vector<const std::vector<Action>*>& programs,
                                               bool split_backward, FlatSchedule& flat) noexcept;

// True when the completeness and order checks of static_checks have nothing to report.
// Called only once the per-action checks found nothing, so every action sits on its
// stage's rank and "on the same rank" is a property of the two stages.
[[nodiscard]] PPSCHED_OUTLINE bool table_consistent(const FlatSchedule& flat) noexcept;

// Overlapped pairs (docs/execution-model.md): each run of consecutive actions sharing a group
// that holds a compute action must be two compute actions, one F and one B or BI, of two
// micro-batches. Any backward of a micro-batch needs every forward of it (through the loss),
// so a pair of one micro-batch could never start. A run whose id recurs elsewhere on the rank
// is left to the contiguity check, which names both places.
PPSCHED_OUTLINE void check_pairs(const FlatSchedule& flat, ProblemSink& sink);

// Memory actions (docs/execution-model.md, "Memory actions"): per (stage, micro-batch),
// F -> R -> B/BI, F -> OFFLOAD -> RELOAD -> B/BI, or F -> OFFLOAD -> RELOAD -> R -> B/BI (a
// recomputation whose checkpoints are offloaded) on the stage's rank, in program order. A
// duplicate (a second R) is reported by the duplicate check, a missing F by completeness, an
// action on the wrong rank by the per-action checks.
PPSCHED_OUTLINE void check_memory_actions(const FlatSchedule& flat, ProblemSink& sink);

// Checks that do not need the programs to run: shape, ranges, placement, completeness,
// orders within one rank, communication bookkeeping. Builds `flat` as it goes; returns
// false when the shape itself is unusable (nothing else could be checked).
// `skip_comm`: index the compute actions only (a dependency-only run). `proven`: `s` is a
// LoweredSchedule that lower() wrote (lower/lower.hpp), whose checks its construction has
// proven: it is only indexed.
PPSCHED_OUTLINE bool static_checks(const Schedule& s, FlatSchedule& flat, ProblemSink& sink, bool skip_comm = false,
                          bool proven = false);

}  // namespace ppsched::detail

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/engine/impl/static_checks.ipp"
#endif
