// The umbrella header: everything in ppsched that needs no GPU toolkit and no third-party
// library — the layer graph and partitioner, the schedules (generators, CSV, lowering,
// validation), the simulator, the timeline writers, the schedule search, the runtime and
// the CPU backend. Two parts are opt-in on purpose: <ppsched/graph/profile_json.hpp> (the
// JSON profile loader, needs nlohmann-json) and <ppsched/backend/cuda.hpp> (CUDA and NCCL).
#pragma once

#include "ppsched/error.hpp"

#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"

#include "ppsched/partition/chain.hpp"
#include "ppsched/partition/cost_model.hpp"
#include "ppsched/partition/partition.hpp"
#include "ppsched/partition/static_partition.hpp"

#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/csv.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/validate/validate.hpp"

#include "ppsched/sim/analytic.hpp"
#include "ppsched/sim/data_parallel.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/sim/simulate.hpp"

#include "ppsched/trace/ascii.hpp"
#include "ppsched/trace/chrome_trace.hpp"
#include "ppsched/trace/compare.hpp"
#include "ppsched/trace/csv.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/svg.hpp"
#include "ppsched/trace/timeline.hpp"

#include "ppsched/plan/search/search.hpp"

#include "ppsched/plan/plan.hpp"

#include "ppsched/runtime/backend.hpp"
#include "ppsched/runtime/data_parallel.hpp"
#include "ppsched/runtime/executor.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/runtime/synthetic.hpp"
#include "ppsched/runtime/world.hpp"

#include "ppsched/backend/cpu.hpp"
