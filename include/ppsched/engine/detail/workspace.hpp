// Internals of <ppsched/engine/workspace.hpp>, which includes this file: the transfer records
// lowering sorts (one side of a transfer: its key and the action that produces its data). They
// are in ppsched::detail and not part of the API: no example or page uses them, and they may
// change in any release (docs/architecture.md).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// One side of a transfer as lowering orders it (lower/lower.hpp): the key, and the compute
// action that produces the data, whose index is also the transfer's identity (the same on both
// sides) for breaking ties.
struct CommEntry {
  double key;
  std::int32_t producer;
  std::int32_t receive;  // 0: the send, 1: the receive
};

struct LoweringBuffers {
  scratch_vector<std::int32_t> receivers;
  scratch_vector<CommEntry> comm;
  scratch_vector<CommEntry> merged;
  scratch_vector<CommEntry> scratch;
  // Each action's compute time in the compute-only schedule, asked once and read by every run.
  scratch_vector<double> durations;
  // The index of a lowered candidate that lowering runs to compare it with another (lower.hpp),
  // kept apart from the compute-only schedule's, which the next candidate is lowered from.
  FlatSchedule candidate;
};

}  // namespace detail

}  // namespace ppsched
