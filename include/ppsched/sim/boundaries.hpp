// The simulator's transfer sizes from typed stage boundaries (graph/tensor.hpp). The runtime
// moves a boundary's whole payload — the count header and every tensor at its declared
// maximum — whatever a micro-batch actually carries, so that is what a transfer costs here:
// a model with per-micro-batch scales (variable-length micro-batches) keeps its scaled
// times, but not scaled transfer bytes.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/tensor.hpp"

namespace ppsched::inline PPSCHED_MODE {

// `c` with stage s's output_bytes set to payload_bytes(outputs[s]) for every stage and
// micro-batch; `outputs` has one tensor list per stage (the last one's is never sent).
// A single-entry or scaled model becomes a per-(stage, micro-batch) table.
[[nodiscard]] inline CostModel with_boundary_bytes(CostModel c, std::span<const std::vector<TensorSpec>> outputs,
                                                   std::int32_t microbatches) {
  const std::size_t stages = outputs.size();
  if (stages == 0 || microbatches < 1) {
    fail({"with_boundary_bytes", detail::concat("got ", stages, " boundaries and ", microbatches, " micro-batches"), "",
          "Give one output tensor list per stage and at least one micro-batch"});
  }
  if (c.per_microbatch.empty() && c.stages.size() != 1 && c.stages.size() != stages) {
    fail({"with_boundary_bytes", detail::concat("the cost model has ", c.stages.size(), " stages but ", stages,
                                                " boundaries were given"),
          "CostModel::stages", "Give one output tensor list per stage of the model"});
  }
  for (std::size_t s = 0; s < stages; ++s) detail::check_tensor_specs(outputs[s], detail::concat("stage ", s, " outputs"));
  const auto m = static_cast<std::size_t>(microbatches);
  if (c.per_microbatch.empty() && c.microbatch_scale.empty()) {
    if (c.stages.size() == 1) c.stages.assign(stages, c.stages.front());
    for (std::size_t s = 0; s < stages; ++s) c.stages[s].output_bytes = static_cast<double>(payload_bytes(outputs[s]));
    return c;
  }
  if (c.per_microbatch.empty()) {
    std::vector<StageCost> table;
    table.reserve(stages * m);
    for (std::size_t s = 0; s < stages; ++s) {
      for (std::size_t mb = 0; mb < m; ++mb) {
        table.push_back(stage_cost(c, static_cast<std::int32_t>(s), static_cast<std::int32_t>(mb), microbatches));
      }
    }
    c.per_microbatch = std::move(table);
    c.microbatch_scale.clear();
  }
  if (c.per_microbatch.size() != stages * m) {
    fail({"with_boundary_bytes", detail::concat("the cost model's per-micro-batch table has ", c.per_microbatch.size(),
                                                " entries; ", stages, " stages x ", m, " micro-batches need ", stages * m),
          "CostModel::per_microbatch", "Give the table stage-major, stages x micro-batches"});
  }
  for (std::size_t s = 0; s < stages; ++s) {
    for (std::size_t mb = 0; mb < m; ++mb) {
      c.per_microbatch[s * m + mb].output_bytes = static_cast<double>(payload_bytes(outputs[s]));
    }
  }
  return c;
}

}  // namespace ppsched
