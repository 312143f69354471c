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
#include "ppsched/plan/detail/calibrate.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// The profile with every layer's times multiplied by the measured-over-predicted ratio of the
// stage of `cut` it ran in, per kind (F, B, BI, BW), and the fixed costs per action and per
// step refitted. The ratio was measured at one micro-batch size and is applied at every size.
// `cut` is the one the calibrated model was made from, in the profile's time unit
// (cost_model_of with time_scale 1).
[[nodiscard]] inline Profile calibrated_profile(const Profile& profile, const Partition& cut, const Calibration& fit) {
  return detail::scaled_profile(profile, detail::layer_scales(profile, cut, fit), fit.after.fixed_costs.action,
                                fit.after.fixed_costs.step);
}

// What a measured run changed: the fit, the calibrated profile, and the plan before and after.
struct Recalibration {
  Calibration fit;    // the first run's (all of them: fits)
  Partition cut;  // the cut the first run's schedule was priced with (all: cuts)
  std::vector<Calibration> fits;    // one per run
  std::vector<Partition> cuts;
  Profile profile;    // calibrated_profile
  DevicePlan before;  // plan_devices on the profile given
  DevicePlan after;   // plan_devices on the calibrated one
};

// One measured run of a pipeline replica, for recalibrate_plan: the timelines of one or more of
// its steps, the rows per micro-batch it ran with (0: the profile's own, Profile::rows), and,
// optionally, its step times as measured around run_step (CalibrationOptions::step_times).
struct MeasuredRun {
  std::vector<Timeline> steps;
  double rows = 0.0;
  std::vector<double> step_times;
};

// Calibrates `profile` from measured runs, each cut by graph_model with options.method as the
// planner would have cut it and refitted by calibrate(), then plans `devices` devices for
// `global_batch` before and after. With several runs, each layer's ratio per kind and the fixed
// cost per step are the medians of the runs' fits, and the fixed cost per action is their
// least-squares fit (each run's weighted by the actions on its longest path, squared): a run of
// few actions puts its whole noise into its own per-action estimate, which must not outweigh a
// run of many. Runs of different shapes (few and many micro-batches, one rank and two) keep one
// shape's accident out of every other's price. Throws ppsched::error when no run is given or a run does not fit
// the profile (more stages than layers, a unit that cannot be converted, no micro-batch size).
[[nodiscard]] inline Recalibration recalibrate_plan(const Profile& profile, const std::vector<MeasuredRun>& runs,
                                                    std::int32_t devices, std::int64_t global_batch,
                                                    const MemoryCap& cap,
                                                    const DevicePlanOptions& options = {}) {
  using detail::concat;
  if (runs.empty()) detail::fail({"recalibrate_plan", "no measured run", "runs", "give at least one run's timelines"});
  Recalibration r;
  std::vector<std::vector<KindScales>> scales;
  std::vector<double> action, step;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const MeasuredRun& m = runs[i];
    const double size = m.rows > 0.0 ? m.rows : profile.rows;
    if (!(size > 0.0)) {
      detail::fail({"recalibrate_plan", detail::concat("run ", i, ": its micro-batch size is not known"), "rows",
            "give the rows per micro-batch the run used, or a profile with \"rows\""});
    }
    if (m.steps.empty()) detail::fail({"recalibrate_plan", detail::concat("run ", i, " has no step"), "MeasuredRun::steps", "give its timelines"});
    const Schedule run = schedule_of_timeline(m.steps.front());
    if (static_cast<std::size_t>(run.stages()) > profile.graph.size()) {
      detail::fail({"recalibrate_plan", detail::concat("run ", i, " has ", run.stages(), " stages, the profile ", profile.graph.size(), " layers"),
            "the measured timeline", "give the timeline of a run of this profile's model"});
    }
    GraphModelOptions g;
    g.ranks = run.ranks;
    g.microbatches = run.microbatches;
    g.optimizer_state_factor = options.optimizer_state_factor;
    g.method = options.method;
    const PlanModel model = graph_model(profile_at_rows(profile, size, options.profile_microbatch_size), "measured run", g);
    r.cuts.push_back(model.partition(run.placement));
    const CostModel cost = cost_model_of(r.cuts.back(), plan_cost_options(model, options.weight_memory_fraction));
    CalibrationOptions co;
    co.step_times = m.step_times;
    r.fits.push_back(calibrate(m.steps, cost, co));
    scales.push_back(detail::layer_scales(profile, r.cuts.back(), r.fits.back()));
    action.push_back(r.fits.back().after.fixed_costs.action);
    step.push_back(r.fits.back().after.fixed_costs.step);
  }
  r.fit = r.fits.front();
  r.cut = r.cuts.front();
  std::vector<KindScales> combined(profile.graph.size());
  for (std::size_t l = 0; l < combined.size(); ++l) {
    for (std::size_t k = 0; k < 4; ++k) {
      std::vector<double> v;
      for (const auto& s : scales) v.push_back(s[l][k]);
      combined[l][k] = detail::median_of(v);
    }
  }
  double weighted = 0.0, weights = 0.0;
  for (std::size_t i = 0; i < r.fits.size(); ++i) {
    const double w = r.fits[i].action_weight * r.fits[i].action_weight;
    weighted += w * action[i];
    weights += w;
  }
  r.profile = detail::scaled_profile(profile, combined, weights > 0.0 ? weighted / weights : detail::median_of(action),
                             detail::median_of(step));
  r.before = plan_devices(profile, devices, global_batch, cap, options);
  r.after = plan_devices(r.profile, devices, global_batch, cap, options);
  return r;
}

// The same from the timeline of one step of one run.
[[nodiscard]] inline Recalibration recalibrate_plan(const Profile& profile, const Timeline& measured, double rows,
                                                    std::int32_t devices, std::int64_t global_batch,
                                                    const MemoryCap& cap,
                                                    const DevicePlanOptions& options = {}) {
  return recalibrate_plan(profile, std::vector<MeasuredRun>{MeasuredRun{{measured}, rows, {}}}, devices, global_batch,
                          cap, options);
}

}  // namespace plan
}  // namespace ppsched
