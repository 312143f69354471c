// The planner as a library: everything ppsched-plan computes, for a C++ caller.
//
//   PlanModel model = graph_model(profile, "my model", {.ranks = 8, .microbatches = 32});
//   PlanResult plan = compare_families(model, {.ranks = 8, .microbatches = 32});
//   plan.recommended_schedule()->name;                       // the fastest that fits
//   SearchedPlan auto_plan = search_plan(model, {.ranks = 8, .microbatches = 32});
//
// model.hpp: a model cut for any placement (PlanModel, per_rank_cost_model, graph_model);
// costs.hpp: the partition -> CostModel bridge (cost_model_of) and per-rank static bytes;
// compare.hpp: evaluate one schedule, compare families, recommend; search.hpp: the search;
// objective.hpp: what the recommendation minimises (makespan, span, or memory within a time).
// devices.hpp: N devices split into data x pipeline parallelism (plan_devices).
// memory_policy.hpp: per-stage recomputation and offload placed into a schedule (apply_memory_policies);
// memory_choice.hpp: the policies chosen under a memory cap (choose_memory_policies).
// calibrate.hpp: a measured run refits the profile and re-plans (recalibrate_plan).
// docs/plan.md is the guide.
#pragma once

#include "ppsched/plan/calibrate.hpp"
#include "ppsched/plan/compare.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/devices.hpp"
#include "ppsched/plan/memory_choice.hpp"
#include "ppsched/plan/memory_policy.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/plan/plan_search.hpp"
