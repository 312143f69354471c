// The models ppsched-plan can plan, from its flags: per-rank uniform stage costs
// (--stage-cost), a chain of identical layers (--layers), a JSON profile (--profile) and the
// embedded GPT-style default. Each becomes the library's PlanModel (ppsched/plan/model.hpp):
// the flags only choose and describe it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "default_model.hpp"
#include "plan_options.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/profile_json.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "text.hpp"

namespace ppsched::cli {
using namespace ppsched::plan;  // the planner library, which these tools only parse for and print

// --stage-cost F,B,W: each rank's share of the model costs F, BI, BW per micro-batch
// (per_rank_cost_model), a transfer --comm (no bytes to move, so latency alone).
[[nodiscard]] inline PlanModel stage_cost_model(const PlanOptions& options) {
  const auto [f, bi, bw] = options.stage_cost;
  PlanModel model =
      per_rank_cost_model(StageCost{f, bi, bw, 0.0, 0.0}, Interconnect{options.comm_latency.value_or(0.0)});
  // The report says where the costs came from, in the flag's name.
  model.partition = [cut = std::move(model.partition)](const CutRequest& request) {
    Partition p = cut(request);
    p.method = "uniform per-rank costs from --stage-cost; a rank's v chunks cost 1/v each";
    return p;
  };
  return model;
}

// What a measured profile says of the runtime besides its layers, for the model's line: the
// fixed costs, how ranks sharing the cores slow each other, where the first stage runs its
// backward. Empty when the profile says none of it, so a hand-written profile reads as before.
[[nodiscard]] inline std::string runtime_text(const Profile& p) {
  std::string out;
  const auto add = [&](const std::string& part) { out += concat(out.empty() ? "; measured runtime: " : ", ", part); };
  const std::string unit = p.time_unit.empty() ? "" : concat(" ", p.time_unit.text());
  if (p.fixed_costs.action > 0.0) add(concat(p.fixed_costs.action, unit, " per action"));
  if (p.fixed_costs.transfer > 0.0) add(concat(p.fixed_costs.transfer, unit, " per transfer"));
  if (p.fixed_costs.step > 0.0) add(concat(p.fixed_costs.step, unit, " per step"));
  for (std::size_t k = 1; k < p.fixed_costs.concurrent_slowdown.size(); ++k) {
    add(concat(k + 1, " ranks computing at once ", p.fixed_costs.concurrent_slowdown[k], "x slower"));
  }
  if (p.first_stage_backward_in_bw) add("the first stage's whole backward in BW");
  return out;
}

// A profile on its machine, cut by the partitioner the flags name; --comm and --bandwidth
// replace the profile's link.
[[nodiscard]] inline PlanModel graph_model(Profile profile, std::string description, const PlanOptions& options) {
  if (options.comm_latency) profile.link.latency = *options.comm_latency;
  if (options.bandwidth) profile.link.bandwidth = *options.bandwidth;
  GraphModelOptions o;
  o.ranks = options.stages;
  o.microbatches = options.microbatches;
  o.optimizer_state_factor = options.optimizer_state_factor;
  o.method = options.partition;
  return ppsched::plan::graph_model(std::move(profile), std::move(description), o);
}

// --layers N: a chain of identical layers, each F = BI = BW = 1 unit, holding 1 MiB of
// parameters and 1 MiB of activations and handing 1 MiB to the next layer.
[[nodiscard]] inline Profile uniform_layers_profile(const PlanOptions& options) {
  std::vector<Layer> layers;
  for (std::int32_t i = 0; i < options.layers; ++i) {
    layers.push_back(Layer{concat("layer ", i), 1.0, 1.0, 1.0, 1048576.0, 1048576.0, 1048576.0});
  }
  Profile profile;
  profile.graph = LayerGraph(std::move(layers));
  return profile;
}
[[nodiscard]] inline PlanModel uniform_layers_model(const PlanOptions& options) {
  return graph_model(uniform_layers_profile(options), concat(options.layers, " identical layers (F = BI = BW = 1)"),
                     options);
}

// The embedded default (default_model.hpp) on its machine: a 25 GB/s link with 20 us
// latency between ranks, as one HDR InfiniBand port per GPU gives.
[[nodiscard]] inline Profile gpt_profile() {
  Profile profile;
  profile.graph = LayerGraph(gpt_layers());
  profile.time_unit = "ms";
  profile.link = Interconnect{0.02, 25e9 / 1e3};
  return profile;
}

inline constexpr std::string_view gpt_description =
    "GPT-style default: embedding, 32 transformer blocks, LM head (hidden 4096, sequence 2048, micro-batch 1, "
    "bf16, 156 TFLOP/s per device)";

// The model the options describe. A profile that lists its devices sets the rank count when
// --stages is not given.
[[nodiscard]] inline PlanModel make_model(PlanOptions& options) {
  switch (options.source) {
    case ModelSource::stage_cost: return stage_cost_model(options);
    case ModelSource::uniform_layers: return uniform_layers_model(options);
    case ModelSource::embedded_gpt: return graph_model(gpt_profile(), std::string(gpt_description), options);
    case ModelSource::profile: break;
  }
  Profile profile = load_profile(options.profile_path);
  if (profile.devices.size() > 1) {
    const auto listed = static_cast<std::int32_t>(profile.devices.size());
    if (!options.stages_given) {
      options.stages = listed;
    } else if (options.stages != listed) {
      fail({concat("profile '", options.profile_path, "'"),
            concat("lists ", listed, " devices but --stages is ", options.stages), "devices",
            concat("drop --stages (the profile's devices set it to ", listed, ") or list one device per rank")});
    }
  }
  std::string description = concat("profile '", options.profile_path, "': ", profile.graph.size(), " layers");
  if (!profile.graph.is_chain()) description += concat(", ", profile.graph.edges().size(), " edges");
  if (!profile.devices.empty()) description += concat(", ", profile.devices.size(), " devices");
  description += runtime_text(profile);
  return graph_model(std::move(profile), std::move(description), options);
}

}  // namespace ppsched::cli
