// The bridge from a partition to the simulator: `cost_model_of` turns the stages a PlanModel
// cut for a placement into the CostModel that lowering, simulation and the schedule search
// take, so every tool and user prices a partition the same way. Also the per-rank figures a
// planner derives from a partition or a schedule: static bytes, chunks per rank, and the M_B
// weight of each stage's stored activation.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/costs/cost_model.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

struct PlanCostOptions {
  TimeUnit unit = "unit";       // CostModel::unit (PlanModel::unit, or the unit after time_scale)
  double weight_memory_fraction = 0.5;  // M_W / M_B: what a BI keeps alive until its BW (CostModel::weight_memory_fraction)
  double time_scale = 1.0;      // every time is multiplied by it (e.g. milliseconds per model unit)
  // Whether transfers cost each stage's send_time. Off, the link is free: what a run of
  // synthetic stages that move no modelled bytes does (ppsched-bubbles).
  bool transfers = true;
  // The runtime's fixed costs (CostModel::fixed_costs), in the model's unit: cost_model_of
  // multiplies action, transfer and step by time_scale like every time, and copies
  // concurrent_slowdown as it is (a factor, not a time).
  FixedCosts fixed_costs{};
  // The first stage's BI priced at 0 and its BW at its whole backward (Profile::first_stage_backward_in_bw).
  bool first_stage_backward_in_bw = false;
};

// The options every planner call prices a cut of `model` with.
[[nodiscard]] inline PlanCostOptions plan_cost_options(const PlanModel& model, double weight_memory_fraction) {
  PlanCostOptions o;
  o.unit = model.unit;
  o.weight_memory_fraction = weight_memory_fraction;
  o.fixed_costs = model.fixed_costs;
  o.first_stage_backward_in_bw = model.first_stage_backward_in_bw;
  return o;
}

// The simulator's cost of one stage of a cut, in the cut's unit: F, BI, BW (and B when
// measured), one stored activation (the stage's, boundary_bytes taken off at its cut:
// PartitionStage::activation_bytes), the bytes it sends on per micro-batch, and, where its
// layers' were measured, the share its BIs keep for BW. The first stage's input needs no
// gradient, so its BI computes nothing and leaves the whole backward to BW on what F kept: 1.
[[nodiscard]] inline StageCost stage_cost_of(const PartitionStage& s, bool first_stage = false) {
  StageCost c{s.forward, s.backward_input, s.backward_weight, s.activation_bytes, s.send_bytes};
  c.backward = s.backward;
  if (s.weight_bytes && s.activation_bytes > 0.0) c.weight_memory_fraction = first_stage ? 1.0 : *s.weight_bytes / s.activation_bytes;
  return c;
}

// The simulator's costs for a partition, one StageCost per stage. A transfer must take exactly
// the partition's cut time, which charges the latency once per tensor crossing the cut (skip
// connections included) and so is not latency + bytes / bandwidth of any single size: the link
// is set to move one "byte" per time unit with no latency, and each stage's output_bytes is its
// cut time. When no cut costs anything the link stays free, which the schedule search
// recognises. With `transfers` off, output_bytes keeps the real bytes and the link is free.
[[nodiscard]] inline CostModel cost_model_of(const Partition& partition, const PlanCostOptions& options = {}) {
  using detail::concat;
  if (!(options.time_scale > 0.0 && options.time_scale <= std::numeric_limits<double>::max())) {
    detail::fail({"cost_model_of", detail::concat("time_scale is ", options.time_scale), "PlanCostOptions::time_scale",
          "give a finite factor > 0 (1 keeps the model's unit)"});
  }
  if (!(options.weight_memory_fraction >= 0.0 && options.weight_memory_fraction <= std::numeric_limits<double>::max())) {
    detail::fail({"cost_model_of", detail::concat("weight_memory_fraction is ", options.weight_memory_fraction), "PlanCostOptions::weight_memory_fraction",
          detail::weight_memory_fraction_hint});
  }
  const double k = options.time_scale;
  CostModel cost;
  cost.unit = options.unit;
  const bool free = !options.transfers || std::all_of(partition.stages.begin(), partition.stages.end(),
                                                      [](const PartitionStage& s) { return s.send_time == 0.0; });
  cost.link = free ? Interconnect{} : Interconnect{0.0, 1.0};
  cost.weight_memory_fraction = options.weight_memory_fraction;
  const FixedCosts& fixed = options.fixed_costs;
  for (const auto& [value, field] : {std::pair{fixed.action, "action"}, std::pair{fixed.transfer, "transfer"},
                                     std::pair{fixed.step, "step"}}) {
    if (!(value >= 0.0 && value <= std::numeric_limits<double>::max())) {
      detail::fail({"cost_model_of", detail::concat("fixed_costs.", field, " is ", value),
                    detail::concat("PlanCostOptions::fixed_costs.", field), "give a finite fixed time >= 0 (0: none)"});
    }
  }
  detail::check_concurrent_slowdown(fixed.concurrent_slowdown, "cost_model_of", "PlanCostOptions::fixed_costs.concurrent_slowdown");
  cost.fixed_costs = FixedCosts{fixed.action * k, fixed.transfer * k, fixed.step * k, fixed.concurrent_slowdown};
  cost.stages.reserve(partition.stages.size());
  for (const PartitionStage& s : partition.stages) {
    StageCost c = stage_cost_of(s, cost.stages.empty());
    if (options.first_stage_backward_in_bw && cost.stages.empty()) {
      c.backward_weight = c.backward.value_or(c.backward_input + c.backward_weight);
      c.backward_input = 0.0;
    }
    c.forward *= k;
    c.backward_input *= k;
    c.backward_weight *= k;
    if (c.backward) *c.backward *= k;
    if (options.transfers) c.output_bytes = s.send_time * k;
    cost.stages.push_back(c);
  }
  // Each stage's optimizer step (PartitionStage::optimizer_step), where any stage has one:
  // without, the model stays as it was, and its predictions with it.
  if (std::any_of(partition.stages.begin(), partition.stages.end(), [](const PartitionStage& s) { return s.optimizer_step != 0.0; })) {
    for (const PartitionStage& s : partition.stages) cost.optimizer_step.push_back(s.optimizer_step * k);
  }
  return cost;
}

// Memory that does not depend on the schedule, per rank 0 .. ranks-1: each stage's parameters
// with their gradients and optimizer state (PartitionStage::static_bytes), summed over its stages.
[[nodiscard]] inline std::vector<double> static_bytes_per_rank(const Partition& partition, std::int32_t ranks) {
  using detail::concat;
  if (ranks < 1) detail::fail({"static_bytes_per_rank", detail::concat("ranks = ", ranks), "", "give at least one rank"});
  std::vector<double> bytes(static_cast<std::size_t>(ranks), 0.0);
  for (std::size_t s = 0; s < partition.stages.size(); ++s) {
    const std::int32_t r = partition.stages[s].rank;
    if (r < 0 || r >= ranks) {
      detail::fail({"static_bytes_per_rank", detail::concat("stage ", s, " is on rank ", r, " of ", ranks),
            detail::concat("stages[", s, "].rank"), "give the rank count the partition was cut for"});
    }
    bytes[static_cast<std::size_t>(r)] += partition.stages[s].static_bytes;
  }
  return bytes;
}

// Stages on each rank of a schedule (its v per rank); a placement entry out of range is not
// counted (validate() reports it).
[[nodiscard]] inline std::vector<std::int32_t> chunks_per_rank(const Schedule& s) {
  std::vector<std::int32_t> per_rank(static_cast<std::size_t>(std::max(s.ranks, 0)), 0);
  for (const std::int32_t r : s.placement) {
    if (r >= 0 && r < s.ranks) ++per_rank[static_cast<std::size_t>(r)];
  }
  return per_rank;
}

// The M_B weight of one stored activation of each stage: 1 / (stages on its rank), so a rank
// with v chunks storing one micro-batch of every chunk holds 1 M_B, as a one-stage-per-rank
// schedule does (the zero-bubble paper's convention); every validate() and simulate() report
// weighs stages so in RankMemory::peak_microbatches. Empty when the placement names a rank the
// schedule does not have (validate reports that).
[[nodiscard]] inline std::vector<double> chunk_weights(const Schedule& s) {
  if (s.ranks < 1) return {};
  for (const std::int32_t r : s.placement) {
    if (r < 0 || r >= s.ranks) return {};
  }
  return stage_weights(s.placement, s.ranks);  // the search's count (plan/search/memory.hpp)
}

}  // namespace plan
}  // namespace ppsched
