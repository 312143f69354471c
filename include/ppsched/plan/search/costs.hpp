// The model's costs as the schedule search needs them: for every placement it tries (one
// stage per rank, a V, v looped chunks per rank) the model is cut into a different number of
// virtual stages, so the search asks a `PlacementCosts` callable for the CostModel of each
// placement instead of taking one fixed CostModel. A caller with its own partitioner answers
// with that partitioner's cut for the placement (the planner's search_plan, plan/plan_search.hpp,
// answers with cost_model_of of its PlanModel's cut); a caller with one cost per rank uses
// `evenly_split`, which cuts each rank's share of the model into equal consecutive chunks.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/costs/cost_model.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// The costs of the model cut for `placement` (placement[s] = rank of virtual stage s, stages in
// model order): one StageCost per virtual stage, or per (stage, micro-batch).
using PlacementCosts = std::function<CostModel(std::span<const std::int32_t> placement)>;

// `base` describes the model cut into `base_stages` stages (one entry per stage, a single entry
// for all of them, or a per-(stage, micro-batch) table over `microbatches`); the result cuts
// each of those stages into stages / base_stages equal consecutive parts. Times and stored
// activation bytes divide by the number of parts; the bytes a part sends on are the base
// stage's output bytes (the tensor between two layers of a stage is taken to be the size of
// the one it hands on). Throws ppsched::error when `stages` is not a multiple of
// `base_stages` or `base` does not fit `base_stages` and `microbatches`.
[[nodiscard]] inline CostModel split_stage_costs(const CostModel& base, std::int32_t base_stages, std::int32_t stages,
                                                 std::int32_t microbatches) {
  using detail::concat;
  if (base_stages < 1 || stages < 1 || microbatches < 1) {
    detail::fail({"split_stage_costs",
          detail::concat("base_stages = ", base_stages, ", stages = ", stages, ", microbatches = ", microbatches), "",
          "give at least one stage and one micro-batch"});
  }
  if (stages % base_stages != 0) {
    detail::fail({"split_stage_costs",
          detail::concat("cannot cut ", base_stages, " stages into ", stages, ": ", stages, " is not a multiple of ",
                 base_stages),
          "stages", detail::concat("ask for a multiple of ", base_stages, " stages")});
  }
  check_cost_model(base, base_stages, microbatches);
  const std::int32_t parts = stages / base_stages;
  const double share = 1.0 / parts;
  const auto cut = [share](StageCost c) {
    c.forward *= share;
    c.backward_input *= share;
    c.backward_weight *= share;
    if (c.backward) *c.backward *= share;
    c.activation_bytes *= share;
    return c;
  };
  CostModel out = base;
  const auto S = static_cast<std::size_t>(stages);
  const auto M = static_cast<std::size_t>(microbatches), v = static_cast<std::size_t>(parts);
  if (!base.per_microbatch.empty()) {
    out.per_microbatch.assign(S * M, StageCost{});
    for (std::size_t s = 0; s < S; ++s) {
      for (std::size_t mb = 0; mb < M; ++mb)
        out.per_microbatch[s * M + mb] = cut(base.per_microbatch[(s / v) * M + mb]);
    }
    return out;
  }
  out.stages.assign(S, StageCost{});
  for (std::size_t s = 0; s < S; ++s)
    out.stages[s] = cut(base.stages.size() == 1 ? base.stages.front() : base.stages[s / v]);
  return out;
}

// PlacementCosts for a model given with one cost per rank (`base` fits `ranks` stages and
// `microbatches`): a placement of ranks * v stages gets each rank's share cut into v parts.
// The placement's stage count must be a multiple of `ranks`, which every placement the search
// builds is.
[[nodiscard]] inline PlacementCosts evenly_split(CostModel base, std::int32_t ranks, std::int32_t microbatches) {
  check_cost_model(base, ranks, microbatches);
  return [base = std::move(base), ranks, microbatches](std::span<const std::int32_t> placement) {
    return split_stage_costs(base, ranks, static_cast<std::int32_t>(placement.size()), microbatches);
  };
}

}  // namespace plan
}  // namespace ppsched
