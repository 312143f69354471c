// ppsched-plan --devices N: the flags become plan_devices' arguments (plan/devices.hpp), and
// its DevicePlan is printed as the library writes it or as JSON. The model comes from the same
// flags as a pipeline plan; --stages, --microbatches and --schedule narrow what is tried.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "models.hpp"
#include "plan.hpp"
#include "plan_options.hpp"
#include "plan_report.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/profile_json.hpp"
#include "ppsched/plan/calibrate.hpp"
#include "ppsched/plan/devices.hpp"
#include "ppsched/trace/csv.hpp"
#include "ppsched/graph/text_input.hpp"
#include "text.hpp"

namespace ppsched::cli {
using namespace ppsched::plan;  // the planner library, which these tools only parse for and print

// The model's profile and its one-line description, --comm and --bandwidth applied.
[[nodiscard]] inline std::pair<Profile, std::string> device_profile(const PlanOptions& options) {
  std::pair<Profile, std::string> out;
  switch (options.source) {
    case ModelSource::uniform_layers:
      out = {uniform_layers_profile(options), concat(options.layers, " identical layers (F = BI = BW = 1)")};
      break;
    case ModelSource::profile:
      out.first = load_profile(options.profile_path);
      out.second = concat("profile '", options.profile_path, "': ", out.first.graph.size(), " layers",
                          runtime_text(out.first));
      break;
    case ModelSource::embedded_gpt: out = {gpt_profile(), std::string(gpt_description)}; break;
    case ModelSource::stage_cost:
      fail({"flag --devices", "--stage-cost has no layers", "", "use --layers or --profile (or the default model)"});
  }
  if (options.comm_latency) out.first.link.latency = *options.comm_latency;
  if (options.bandwidth) out.first.link.bandwidth = *options.bandwidth;
  return out;
}

[[nodiscard]] inline DevicePlanOptions device_plan_options(const PlanOptions& options, const Profile& profile,
                                                          std::string description);

[[nodiscard]] inline DevicePlan make_device_plan(const PlanOptions& options) {
  auto [profile, description] = device_profile(options);
  {
    // The largest single comparison plan_devices makes: the deepest pipeline the model can be
    // cut into, and the most micro-batches it tries.
    PlanRequest largest;
    largest.ranks = options.stages_given
                        ? options.stages
                        : static_cast<std::int32_t>(std::min<std::size_t>(static_cast<std::size_t>(options.devices),
                                                                          std::max<std::size_t>(profile.graph.size(), 1)));
    largest.microbatches = options.microbatches_given
                               ? options.microbatches
                               : static_cast<std::int32_t>(std::min<std::int64_t>(DevicePlanOptions{}.max_microbatches,
                                                                                  options.global_batch));
    largest.chunks = options.chunks;
    largest.families = options.schedules;
    check_plan_memory(largest, false,
                      concat("--devices ", options.devices, " (pipelines up to ", largest.ranks, " stages, ",
                                              largest.microbatches, " micro-batches)"));
  }
  return plan_devices(profile, options.devices, options.global_batch, memory_cap_of(options),
                      device_plan_options(options, profile, std::move(description)));
}

[[nodiscard]] inline DevicePlanOptions device_plan_options(const PlanOptions& options, const Profile& profile,
                                                          std::string description) {
  DevicePlanOptions o;
  o.description = std::move(description);
  if (options.stages_given) o.pipeline_sizes = {options.stages};
  if (options.microbatches_given) o.microbatch_counts = {options.microbatches};
  o.families = options.schedules;
  o.chunks = options.chunks;
  o.optimizer_state_factor = options.optimizer_state_factor;
  o.weight_memory_fraction = options.w_memory_ratio;
  o.method = options.partition;
  o.algorithm = options.all_reduce;
  if (options.all_reduce_bandwidth) o.all_reduce_link = Interconnect{profile.link.latency, *options.all_reduce_bandwidth};
  return o;
}

// --calibrate: the measured timelines refit the profile, and the plan is made before and after.
// Each file is one run (one step) at its own micro-batch size.
[[nodiscard]] inline Recalibration make_recalibration(const PlanOptions& options) {
  auto [profile, description] = device_profile(options);
  std::vector<MeasuredRun> runs;
  for (std::size_t i = 0; i < options.calibrate_paths.size(); ++i) {
    const std::string& path = options.calibrate_paths[i];
    MeasuredRun run;
    run.steps.push_back(load_timeline_csv(path, max_profile_bytes));
    if (!options.calibrate_rows.empty()) run.rows = options.calibrate_rows[options.calibrate_rows.size() == 1 ? 0 : i];
    runs.push_back(std::move(run));
  }
  return recalibrate_plan(profile, runs, options.devices, options.global_batch, memory_cap_of(options),
                          device_plan_options(options, profile, std::move(description)));
}

// What the calibration changed, for a person: each run's fit, then the plans.
[[nodiscard]] inline std::string recalibration_report(const Recalibration& r) {
  std::string out;
  for (std::size_t i = 0; i < r.fits.size(); ++i) {
    const Calibration& c = r.fits[i];
    const std::string which = r.fits.size() == 1 ? std::string() : concat(" ", i + 1, " of ", r.fits.size());
    out += concat("calibration from the measured step", which, " (", c.schedule.stages(), " stages on ", c.schedule.ranks,
                  " ranks, ", c.schedule.microbatches, " micro-batches), times in ", c.before.unit.text(), ":\n");
    out += concat("  measured step ", c.measured_makespan, "; predicted before ", c.predicted_before, " (",
                  100.0 * c.error_before(), "%), re-predicted ", c.predicted_after, " (", 100.0 * c.error_after(), "%)\n");
    out += concat("  fixed cost per action ", c.before.fixed_costs.action, " -> ", c.after.fixed_costs.action,
                  "; per transfer ", c.after.fixed_costs.transfer, " (kept)\n");
    for (std::size_t s = 0; s < c.scale.size(); ++s) {
      out += concat("  stage ", s, " (layers ", r.cuts[i].stages[s].begin, "-", r.cuts[i].stages[s].end - 1,
                    "): measured / predicted F ", c.scale[s][0], ", B ", c.scale[s][1], ", BI ", c.scale[s][2], ", BW ",
                    c.scale[s][3], "\n");
    }
  }
  if (r.fits.size() > 1) {
    out += concat("combined (per layer and kind the median of the runs' ratios): fixed cost per action ",
                  r.profile.fixed_costs.action, ", per step ", r.profile.fixed_costs.step, "\n");
  }
  out += "before calibration:\n" + to_string(r.before) + "after calibration:\n" + to_string(r.after);
  const auto pick = [](const DevicePlan& p) { return p.chosen ? to_string(*p.chosen) : std::string("nothing fits"); };
  out += pick(r.before) == pick(r.after) ? std::string("the pick is unchanged\n")
                                         : concat("the pick changed: ", pick(r.before), " -> ", pick(r.after), "\n");
  return out;
}

[[nodiscard]] inline nlohmann::ordered_json device_split_json(const DeviceSplit& s) {
  return {{"pipeline", s.pipeline},
          {"replicas", s.replicas},
          {"microbatches", s.microbatches},
          {"microbatch_size", s.microbatch_size},
          {"schedule", s.family != nullptr ? std::string(s.family->name) : std::string()},
          {"chunks", s.chunks},
          {"pipeline_time", s.pipeline_time},
          {"bubble_fraction", s.bubble_fraction},
          {"all_reduce_longest", s.all_reduce_longest},
          {"all_reduce_exposed", s.all_reduce_exposed},
          {"step_time", s.step_time},
          {"peak_memory_bytes", s.peak_memory_bytes}};
}

// `tool` and `version` first, as in every ppsched-plan JSON (docs/cli.md).
[[nodiscard]] inline nlohmann::ordered_json device_plan_json(const DevicePlan& p, std::string_view version) {
  nlohmann::ordered_json alternatives = nlohmann::ordered_json::array();
  for (const DeviceSplit& s : p.alternatives) alternatives.push_back(device_split_json(s));
  return {{"tool", "ppsched-plan"},
          {"version", version},
          {"model", p.model},
          {"unit", p.unit.text()},
          {"devices", p.devices},
          {"global_batch", p.global_batch},
          {"memory_cap_bytes", finite_or_null(p.cap.total_bytes)},
          {"chosen", p.chosen ? device_split_json(*p.chosen) : nlohmann::ordered_json(nullptr)},
          {"alternatives", alternatives},
          {"per_pipeline", p.per_pipeline},
          {"reason", p.reason},
          {"evaluated", p.evaluated}};
}

}  // namespace ppsched::cli
