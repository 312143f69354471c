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
#include "ppsched/error.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/profile_json.hpp"
#include "ppsched/plan/devices.hpp"

namespace ppsched::cli {

// The model's profile and its one-line description, --comm and --bandwidth applied.
[[nodiscard]] inline std::pair<Profile, std::string> device_profile(const PlanOptions& options) {
  using ppsched::detail::concat;
  std::pair<Profile, std::string> out;
  switch (options.source) {
    case ModelSource::uniform_layers:
      out = {uniform_layers_profile(options), concat(options.layers, " identical layers (F = BI = BW = 1)")};
      break;
    case ModelSource::profile:
      out.first = load_profile(options.profile_path);
      out.second = concat("profile '", options.profile_path, "': ", out.first.graph.size(), " layers");
      break;
    case ModelSource::embedded_gpt: out = {gpt_profile(), std::string(gpt_description)}; break;
    case ModelSource::stage_cost:
      fail({"flag --devices", "--stage-cost has no layers", "", "use --layers or --profile (or the default model)"});
  }
  if (options.comm_latency) out.first.link.latency = *options.comm_latency;
  if (options.bandwidth) out.first.link.bandwidth = *options.bandwidth;
  return out;
}

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
                      ppsched::detail::concat("--devices ", options.devices, " (pipelines up to ", largest.ranks, " stages, ",
                                              largest.microbatches, " micro-batches)"));
  }
  DevicePlanOptions o;
  o.description = std::move(description);
  if (options.stages_given) o.pipeline_sizes = {options.stages};
  if (options.microbatches_given) o.microbatch_counts = {options.microbatches};
  o.families = options.schedules;
  o.chunks = options.chunks;
  o.optimizer_state_factor = options.optimizer_state_factor;
  o.w_memory_ratio = options.w_memory_ratio;
  o.method = options.partition;
  o.algorithm = options.all_reduce;
  if (options.all_reduce_bandwidth) o.all_reduce_link = Interconnect{profile.link.latency, *options.all_reduce_bandwidth};
  return plan_devices(profile, options.devices, options.global_batch, options.memory_cap_bytes, o);
}

[[nodiscard]] inline nlohmann::ordered_json device_split_json(const DeviceSplit& s) {
  return {{"pipeline", s.pipeline},
          {"replicas", s.replicas},
          {"microbatches", s.microbatches},
          {"microbatch_size", s.microbatch_size},
          {"schedule", s.schedule},
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
          {"unit", p.unit},
          {"devices", p.devices},
          {"global_batch", p.global_batch},
          {"memory_cap_bytes", p.memory_cap_bytes ? nlohmann::ordered_json(*p.memory_cap_bytes) : nlohmann::ordered_json(nullptr)},
          {"chosen", p.chosen ? device_split_json(*p.chosen) : nlohmann::ordered_json(nullptr)},
          {"alternatives", alternatives},
          {"per_pipeline", p.per_pipeline},
          {"reason", p.reason},
          {"evaluated", p.evaluated}};
}

}  // namespace ppsched::cli
