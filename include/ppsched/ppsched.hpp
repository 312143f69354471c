// The umbrella header, kept thin so that including it stays cheap (docs/performance.md has
// the compile times): the layer graph and partitioner, the schedules (generators, lowering,
// validation), the simulator and the timeline with its statistics, comparison and ASCII view.
// The heavier parts are included on purpose, each by its own header:
//   <ppsched/runtime.hpp>           running a schedule: stages, Executor, World, CPU backend
//   <ppsched/plan/plan.hpp>         the planner and the schedule search
//   <ppsched/trace/chrome_trace.hpp>, svg.hpp, csv.hpp   the timeline writers
//   <ppsched/schedule/csv.hpp>      schedules as PyTorch-format CSV
//   <ppsched/partition/frameworks.hpp>   a cut as Megatron's layout string, torchtitan's module lists
//   <ppsched/all.hpp>               all of the above in one include
// Two parts need more than a C++20 compiler and stay outside even all.hpp:
// <ppsched/graph/profile_json.hpp> (nlohmann-json) and <ppsched/backend/cuda.hpp> (CUDA, NCCL).
#pragma once

#include "ppsched/error.hpp"

#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/tensor.hpp"
#include "ppsched/graph/time_unit.hpp"

#include "ppsched/partition/chain.hpp"
#include "ppsched/partition/cost_model.hpp"
#include "ppsched/partition/partition.hpp"
#include "ppsched/partition/static_partition.hpp"

#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/schedule.hpp"

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/validate/validate.hpp"

#include "ppsched/trace/ascii.hpp"
#include "ppsched/trace/compare.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/timeline.hpp"

#include "ppsched/sim/analytic.hpp"
#include "ppsched/sim/boundaries.hpp"
#include "ppsched/sim/data_parallel.hpp"
#include "ppsched/sim/simulate.hpp"
