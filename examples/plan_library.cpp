// The planner as a library: what ppsched-plan prints, computed by a C++ program. A small
// transformer-like chain is cut for every family's placement on 4 ranks, each family is
// proven, simulated and measured against an 11 GB cap, one is recommended, and the schedule
// search is asked whether it can do better; then 8 such devices are split into data x pipeline
// parallelism and the chosen split is run through the simulator as it comes back, with no
// re-planning. docs/plan.md walks through it.
#include <algorithm>
#include <cstdio>
#include <string>

#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/plan/plan.hpp"
#include "ppsched/schedule/generators.hpp"

int main() {
  using namespace ppsched;
  using namespace ppsched::plan;  // the planner library
  // example-begin plan
  // The model: an embedding, 14 blocks and a head; times in ms, sizes in bytes.
  GraphBuilder layers;
  layers.then({"embed", 1.0, 0.5, 0.5, 4e8, 2e7, 1.6e7});  // name, F, BI, BW, params, activations, output
  for (int i = 0; i < 14; ++i) layers.then({"block " + std::to_string(i), 2.0, 2.0, 1.5, 2e8, 2e8, 1.6e7});
  layers.then({"head", 3.0, 3.0, 1.0, 4e8, 4e8, 0.0});
  Profile profile;
  profile.graph = layers.build();
  profile.link = Interconnect{0.02, 25e6};  // 20 us + bytes / (25 GB/s), in ms
  profile.time_unit = "ms";

  // A model the planner can cut for any placement (one stage per rank, looped chunks, a V), for
  // 4 ranks and 16 micro-batches; each parameter byte holds 8 bytes with its gradient and Adam
  // state (default_optimizer_state_factor).
  const PlanModel model = graph_model(profile, "16-layer chain", {.ranks = 4, .microbatches = 16});

  PlanRequest request;  // the same sizes as the model's: a request that disagrees is an error
  request.ranks = model.ranks;
  request.microbatches = model.microbatches;
  request.cap.total_bytes = 11e9;  // per rank: parameters with optimizer state plus peak activations
  const PlanResult plan = compare_families(model, request);

  for (const ScheduleResult& r : plan.schedules) {
    const double peak =
        r.peak_memory_bytes.empty() ? 0.0 : *std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end());
    std::printf("%-17s v=%d makespan %7.2f ms  bubble %5s  peak %9s  %s\n", r.name.c_str(), r.chunks, r.makespan,
                percent_of(r.bubble_fraction).c_str(), bytes_text(peak).c_str(), r.fits ? "fits" : r.fit_problem.c_str());
  }
  if (const ScheduleResult* best = plan.recommended_schedule()) {
    std::printf("recommended: %s (%s)\n", best->name.c_str(), plan.recommended.reason.c_str());
  }

  // The schedule search over the same model and caps: never slower than the best family.
  const SearchedPlan searched = search_plan(model, request);
  std::printf("search: %s\n", searched.plan.recommended.reason.c_str());
  if (!searched.plan.schedules.empty()) std::printf("  %s\n", to_string(searched.plan.schedules.front()).c_str());

  // The bridge on its own: the simulator's costs for the model cut into zb-v's V.
  const Schedule zbv = make_schedule("zb-v", {4, 16, family_info("zb-v").chunks_for(1)});
  const CostModel costs = cost_model_of(model.partition(zbv.placement), {.unit = "ms"});
  std::printf("zb-v cut: %zu stages, stage 0 forward %.2f ms\n", costs.stages.size(), costs.stages[0].forward);

  // 8 devices for a global batch of 64 (the profile's times are for one sample), each holding
  // at most 11 GB: the chosen split carries its schedule and cut, so it runs as it comes back.
  DevicePlanOptions options;
  options.profile_microbatch_size = 1.0;
  const DevicePlan devices = plan_devices(profile, 8, 64, MemoryCap{.total_bytes = 11e9}, options);
  if (devices.chosen) {
    const DeviceSplit& split = *devices.chosen;
    const CostModel split_costs = cost_model_of(split, profile, options);
    const LoweredSchedule program =
        lower(split.schedule, lower_options_for(split_costs, split.schedule.stages(), split.schedule.microbatches));
    const SimResult run = simulate(program, split_costs);  // or World / Executor with the same two
    std::printf("devices: %s\n  simulated again: one replica's step %.2f ms\n", to_string(split).c_str(), run.makespan);
  }
  // example-end plan
  return plan.recommended_schedule() != nullptr && !searched.plan.schedules.empty() && devices.chosen ? 0 : 1;
}
