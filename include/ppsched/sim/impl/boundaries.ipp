// The bodies of <ppsched/sim/boundaries.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// `c` as a per-(stage, micro-batch) table of `stages` x `m` entries (a single-entry or scaled
// model expanded), for one output_bytes per entry.
inline CostModel per_microbatch_table(CostModel c, std::size_t stages, std::int32_t microbatches, const char* who) {
  const auto m = static_cast<std::size_t>(microbatches);
  if (c.per_microbatch.empty() && c.stages.size() != 1 && c.stages.size() != stages) {
    detail::fail({who, detail::concat("the cost model has ", c.stages.size(), " stages but ", stages, " boundaries were given"),
                  "CostModel::stages", "Give one output size per stage of the model"});
  }
  if (c.per_microbatch.empty()) {
    if (c.stages.size() == 1) c.stages.assign(stages, c.stages.front());
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
    detail::fail({who, detail::concat("the cost model's per-micro-batch table has ", c.per_microbatch.size(), " entries; ",
                                      stages, " stages x ", m, " micro-batches need ", stages * m),
                  "CostModel::per_microbatch", "Give the table stage-major, stages x micro-batches"});
  }
  return c;
}

}  // namespace detail

[[nodiscard]] PPSCHED_OUTLINE CostModel with_boundary_bytes(CostModel c, std::span<const std::vector<TensorSpec>> outputs,
                                                   std::int32_t microbatches) {
  const std::size_t stages = outputs.size();
  if (stages == 0 || microbatches < 1) {
    detail::fail({"with_boundary_bytes", detail::concat("got ", stages, " boundaries and ", microbatches, " micro-batches"), "",
          "Give one output tensor list per stage and at least one micro-batch"});
  }
  if (c.per_microbatch.empty() && c.stages.size() != 1 && c.stages.size() != stages) {
    detail::fail({"with_boundary_bytes", detail::concat("the cost model has ", c.stages.size(), " stages but ", stages,
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
  c = detail::per_microbatch_table(std::move(c), stages, microbatches, "with_boundary_bytes");
  for (std::size_t s = 0; s < stages; ++s) {
    for (std::size_t mb = 0; mb < m; ++mb) {
      c.per_microbatch[s * m + mb].output_bytes = static_cast<double>(payload_bytes(outputs[s]));
    }
  }
  return c;
}

[[nodiscard]] PPSCHED_OUTLINE CostModel with_boundary_floats(CostModel c, std::span<const std::size_t> output_floats,
                                                            std::int32_t microbatches) {
  const auto m = static_cast<std::size_t>(std::max(microbatches, 0));
  if (m == 0 || output_floats.empty() || output_floats.size() % m != 0) {
    detail::fail({"with_boundary_floats",
                  detail::concat("got ", output_floats.size(), " output sizes for ", microbatches, " micro-batches"), "",
                  "Give each stage's output floats of every micro-batch, stage s's micro-batch k at [s * m + k]"});
  }
  const std::size_t stages = output_floats.size() / m;
  c = detail::per_microbatch_table(std::move(c), stages, microbatches, "with_boundary_floats");
  for (std::size_t i = 0; i < output_floats.size(); ++i) {
    c.per_microbatch[i].output_bytes = static_cast<double>(output_floats[i]) * static_cast<double>(sizeof(float));
  }
  return c;
}

}  // namespace ppsched
