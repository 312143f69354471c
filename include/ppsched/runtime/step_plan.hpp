// The plan of one rank's step, worked out once from the lowered schedule so that running a
// step is a walk over a fixed list: which buffer every action reads and writes, which event
// every action waits on, and how many buffers of each size the rank needs at most.
//
// A step is the rank's program cut into *steps*: each compute action, and each communication
// group (consecutive communication actions sharing a nonzero group, or one ungrouped
// action). A step runs on the compute lane or the comm lane. The values a rank holds are
// tensors per (stage, micro-batch): the forward input and output, the gradient arriving for
// the output and the gradient leaving for the input. Each lives from the step that produces
// it to the last step that uses it, in issue order; adjacent stages on one rank share one
// value (the output of F(s) is the input of F(s+1)). Values take physical buffers from
// per-size pools when produced and return them after their last use, so a pool's size is
// the largest number of values of that size alive at once in issue order — exactly what
// the schedule needs, and what the executor allocates once.
//
// Order between the lanes exists only through events (docs/execution-model.md): a step
// waits for the end of the latest step of the other lane that produced a value it reads,
// or that last used a buffer it is about to reuse. Steps on a lane finish in order, so one
// wait on the latest such step covers every earlier one.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/runtime/detail/step_plan.hpp"
#include "ppsched/runtime/rank_plan.hpp"

namespace ppsched::inline PPSCHED_MODE {

// The plan of `rank`'s step in a lowered schedule. Throws ppsched::error when the program
// uses a tensor before the action that provides it, or names stages it does not hold.
[[nodiscard]] inline RankPlan plan_rank(const Schedule& lowered, std::int32_t rank,
                                        std::span<const StageShape> shapes) {
  return detail::RankPlanner(lowered, rank, shapes).run();
}

}  // namespace ppsched
