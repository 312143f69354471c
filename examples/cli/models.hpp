// The models ppsched-plan can plan: per-rank uniform stage costs (--stage-cost), a chain of
// identical layers (--layers), a JSON profile (--profile) and the embedded GPT-style default.
// Each becomes a PlanModel: a description, a time unit, the link between ranks and a
// function that cuts the model for any placement of virtual stages on ranks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "plan.hpp"
#include "plan_options.hpp"
#include "ppsched/error.hpp"

namespace ppsched::cli {

namespace detail {

// Stages per rank of a placement (the v of each rank).
[[nodiscard]] inline std::vector<std::int32_t> stages_per_rank(const std::vector<std::int32_t>& placement) {
  std::int32_t ranks = 0;
  for (const std::int32_t r : placement) ranks = std::max(ranks, r + 1);
  std::vector<std::int32_t> count(static_cast<std::size_t>(ranks), 0);
  for (const std::int32_t r : placement) ++count[static_cast<std::size_t>(r)];
  return count;
}

// The slowest stage, counting the time to receive its input and send its output, as the
// partitioner counts it.
inline void set_bottleneck(PartitionPlan& p) {
  p.bottleneck_time = 0.0;
  p.bottleneck_stage = 0;
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const double in = s == 0 ? 0.0 : p.stages[s - 1].comm_time;
    const double t = (p.stages[s].compute_time + in) + p.stages[s].comm_time;
    if (t > p.bottleneck_time) {
      p.bottleneck_time = t;
      p.bottleneck_stage = s;
    }
  }
}

}  // namespace detail

// --stage-cost F,B,W: each rank's share of the model costs F, BI, BW per micro-batch; a rank
// holding v chunks runs each in 1/v of that, so interleaving changes the granularity and not
// the work (the convention of the closed-form bubbles).
[[nodiscard]] inline PlanModel stage_cost_model(const PlanOptions& options) {
  using ppsched::detail::concat;
  const auto [f, bi, bw] = options.stage_cost;
  PlanModel model;
  model.description = concat("uniform stages: F ", f, ", BI ", bi, ", BW ", bw, " per rank and micro-batch");
  model.unit = "unit";
  model.has_bytes = false;
  model.link.latency = options.comm_latency.value_or(0.0);
  model.partition = [f, bi, bw, latency = model.link.latency](const std::vector<std::int32_t>& placement) {
    const std::vector<std::int32_t> v = detail::stages_per_rank(placement);
    PartitionPlan p;
    p.method = "uniform per-rank costs from --stage-cost; a rank's v chunks cost 1/v each";
    for (std::size_t s = 0; s < placement.size(); ++s) {
      StagePlan st;
      st.rank = placement[s];
      const double share = 1.0 / v[static_cast<std::size_t>(st.rank)];
      st.first_layer = st.last_layer = s;
      st.first_name = st.last_name = concat("stage ", s);
      st.forward = f * share;
      st.backward_input = bi * share;
      st.backward_weight = bw * share;
      st.compute_time = (st.forward + st.backward_input) + st.backward_weight;
      st.comm_time = s + 1 < placement.size() && placement[s + 1] != placement[s] ? latency : 0.0;
      p.stages.push_back(std::move(st));
    }
    detail::set_bottleneck(p);
    return p;
  };
  return model;
}

// The model the options describe.
[[nodiscard]] inline PlanModel make_model(const PlanOptions& options) {
  switch (options.source) {
    case ModelSource::stage_cost: return stage_cost_model(options);
    default: break;
  }
  fail({"model", "this model source is not available yet", "", "use --stage-cost"});
}

}  // namespace ppsched::cli
