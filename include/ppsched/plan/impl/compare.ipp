// The bodies of <ppsched/plan/compare.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

[[nodiscard]] PPSCHED_OUTLINE ScheduleResult evaluate_schedule(Schedule schedule, const PlanModel& model,
                                                      const Partition& partition, const PlanRequest& request,
                                                      Workspace& ws) {
  return detail::evaluate_priced(std::move(schedule), model, partition, request, ws,
                                 cost_model_of(partition, plan_cost_options(model, request.weight_memory_fraction)));
}

[[nodiscard]] PPSCHED_OUTLINE ScheduleResult evaluate_schedule(Schedule schedule, const PlanModel& model,
                                                      const Partition& partition, const PlanRequest& request) {
  Workspace ws;
  return evaluate_schedule(std::move(schedule), model, partition, request, ws);
}

[[nodiscard]] PPSCHED_OUTLINE PlanResult compare_families(const PlanModel& model, const PlanRequest& request) {
  PlanResult plan = detail::start_plan("compare_families", model, request);
  detail::PartitionCache partition_for(model);
  plan.partition = partition_for(one_stage_per_rank_placement(request.ranks));
  const bool free_comm = model.link.is_free();
  Workspace ws;
  detail::for_each_family(request, detail::named_families(request), partition_for, plan.skipped,
                          [&](const FamilyInfo& family, std::int32_t, Schedule schedule,
                              const Partition& partition) {
                            ScheduleResult result = evaluate_schedule(std::move(schedule), model, partition, request, ws);
                            result.family = &family;
                            result = detail::priced_with_memory_policy(std::move(result), model, partition, request, ws);
                            // the closed forms leave communication and memory actions out
                            if (free_comm && !result.memory) detail::add_analytic(result, family, partition, request.ranks);
                            plan.schedules.push_back(std::move(result));
                          });
  const bool capped = !request.cap.unlimited() || !model.device_cap.unlimited();
  plan.recommended = recommend(plan.schedules, capped, request.objective);
  return plan;
}

}  // namespace plan
}  // namespace ppsched
