// Re-planning from a measured run: the run's timeline refits the cost model of the cut it ran
// (sim/calibrate.hpp), the refit goes back into the profile layer by layer, and the planner
// runs again on it, so a user sees what the measurement changed: the step predicted for the
// run before and after, and the plan chosen before and after. `ppsched-plan --calibrate` is
// this call.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/devices.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/sim/calibrate.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

// The profile with every layer's times (plain and at each measured size) multiplied by the
// measured-over-predicted ratio of the stage of `cut` it ran in, per kind (F, B, BI, BW), and
// the fixed cost per action refitted. The ratio was measured at one micro-batch size and is
// applied at every size. `cut` is the one the calibrated model was made from, in the profile's
// time unit (cost_model_of with time_scale 1).
[[nodiscard]] inline Profile calibrated_profile(const Profile& profile, const PartitionPlan& cut, const Calibration& fit) {
  using detail::concat;
  if (cut.stages.size() != fit.scale.size()) {
    fail({"calibrated_profile", concat("the cut has ", cut.stages.size(), " stages, the calibration ", fit.scale.size()),
          "cut", "give the cut the calibrated model was made from"});
  }
  std::vector<Layer> layers = profile.graph.layers();
  const std::vector<std::size_t>& order = profile.graph.topological_order();
  for (std::size_t s = 0; s < cut.stages.size(); ++s) {
    const KindScales& k = fit.scale[s];
    for (std::size_t pos = cut.stages[s].first_layer; pos <= cut.stages[s].last_layer && pos < order.size(); ++pos) {
      Layer& l = layers[order[pos]];
      l.forward *= k[0];
      l.backward_input *= k[2];
      l.backward_weight *= k[3];
      if (l.backward) *l.backward *= k[1];
      for (CostPoint& p : l.points) {
        p.forward *= k[0];
        p.backward_input *= k[2];
        p.backward_weight *= k[3];
        if (p.backward) *p.backward *= k[1];
      }
    }
  }
  Profile out = profile;
  out.graph = LayerGraph(std::move(layers), profile.graph.edges());
  out.action_overhead = fit.after.action_overhead;
  return out;
}

// What a measured run changed: the fit, the calibrated profile, and the plan before and after.
struct Recalibration {
  Calibration fit;
  PartitionPlan cut;  // the cut the run's schedule was priced with
  Profile profile;    // calibrated_profile
  DevicePlan before;  // plan_devices on the profile given
  DevicePlan after;   // plan_devices on the calibrated one
};

// Calibrates `profile` from the measured timeline of one step of one pipeline replica, run with
// `rows` samples per micro-batch (0: the profile's own size, Profile::rows) and cut by
// graph_model with options.method, then plans `devices` devices for `global_batch` before and
// after. Throws ppsched::error when the timeline does not fit the profile (more stages than
// layers, a unit that cannot be converted).
[[nodiscard]] inline Recalibration recalibrate_plan(const Profile& profile, const Timeline& measured, double rows,
                                                    std::int32_t devices, std::int64_t global_batch,
                                                    std::optional<double> memory_cap_bytes,
                                                    const DevicePlanOptions& options = {}) {
  using detail::concat;
  const double size = rows > 0.0 ? rows : profile.rows;
  if (!(size > 0.0)) {
    fail({"recalibrate_plan", "the run's micro-batch size is not known", "rows",
          "give the rows per micro-batch the run used, or a profile with \"rows\""});
  }
  const Schedule run = schedule_of_timeline(measured);
  if (static_cast<std::size_t>(run.stages()) > profile.graph.size()) {
    fail({"recalibrate_plan", concat("the run has ", run.stages(), " stages, the profile ", profile.graph.size(), " layers"),
          "the measured timeline", "give the timeline of a run of this profile's model"});
  }
  GraphModelOptions g;
  g.ranks = run.ranks;
  g.microbatches = run.microbatches;
  g.optimizer_state_factor = options.optimizer_state_factor;
  g.method = options.method;
  const PlanModel model = graph_model(profile_at_rows(profile, size, options.profile_microbatch_size), "measured run", g);
  Recalibration r;
  r.cut = model.partition(run.placement);
  const CostModel cost = cost_model_of(r.cut, plan_cost_options(model, options.weight_memory_fraction));
  r.fit = calibrate(measured, cost);
  r.profile = calibrated_profile(profile, r.cut, r.fit);
  r.before = plan_devices(profile, devices, global_batch, memory_cap_bytes, options);
  r.after = plan_devices(r.profile, devices, global_batch, memory_cap_bytes, options);
  return r;
}

}  // namespace ppsched
