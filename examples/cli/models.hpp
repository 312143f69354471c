// The models ppsched-plan can plan: per-rank uniform stage costs (--stage-cost), a chain of
// identical layers (--layers), a JSON profile (--profile) and the embedded GPT-style default.
// Each becomes a PlanModel: a description, a time unit, the link between ranks and a
// function that cuts the model for any placement of virtual stages on ranks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "default_model.hpp"
#include "plan.hpp"
#include "plan_options.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/profile_json.hpp"
#include "ppsched/partition/cost_model.hpp"
#include "ppsched/partition/partition.hpp"

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

namespace detail {

[[nodiscard]] inline std::string method_name(PartitionMethod m) {
  switch (m) {
    case PartitionMethod::optimal: return "exact min-bottleneck";
    case PartitionMethod::uniform: return "uniform layer counts";
    case PartitionMethod::by_params: return "balanced parameters";
  }
  return "?";
}

}  // namespace detail

// A layer graph on a machine (devices in pipeline order, one per rank, and a link), cut by
// ppsched's partitioner for each placement. Device speeds apply to the stages on that
// device's rank. Device memory caps constrain the one-stage-per-rank partition (with 1F1B's
// in-flight counts); with chunks the partitioner sees speeds only, and each schedule's
// simulated peak is checked against the caps afterwards.
[[nodiscard]] inline PlanModel graph_model(Profile profile, std::string description, const PlanOptions& options) {
  PlanModel model;
  model.description = std::move(description);
  model.unit = profile.time_unit.empty() ? "unit" : profile.time_unit;
  model.layers = profile.graph.size();
  model.has_bytes = true;
  Interconnect link = profile.link;
  if (options.comm_latency) link.latency = *options.comm_latency;
  if (options.bandwidth) link.bandwidth = *options.bandwidth;
  model.link = link;
  const std::int32_t ranks = options.stages;
  std::vector<Device> devices = profile.devices;
  if (devices.size() == 1) devices.assign(static_cast<std::size_t>(ranks), devices.front());
  for (const Device& d : devices) {
    if (d.memory_bytes != std::numeric_limits<double>::infinity()) {
      model.rank_memory_cap.clear();
      for (const Device& e : devices) model.rank_memory_cap.push_back(e.memory_bytes);
      break;
    }
  }
  model.partition = [graph = std::move(profile.graph), devices, link, ranks, factor = options.optimizer_state_factor,
                     method = options.partition, microbatches = options.microbatches](
                        const std::vector<std::int32_t>& placement) {
    const std::size_t stages = placement.size();
    const bool one_per_rank = stages == static_cast<std::size_t>(ranks);
    PartitionCostModel cost;
    cost.link = link;
    cost.optimizer_state_factor = factor;
    for (const std::int32_t r : placement) {
      Device d = devices.empty() ? Device{} : devices[static_cast<std::size_t>(r)];
      if (!one_per_rank) d.memory_bytes = std::numeric_limits<double>::infinity();
      cost.devices.push_back(d);
    }
    cost.inflight = inflight_1f1b(stages, static_cast<std::size_t>(microbatches));
    const Partition cut = method == PartitionMethod::uniform     ? partition_uniform(graph, stages, cost)
                          : method == PartitionMethod::by_params ? partition_by_params(graph, stages, cost)
                                                                 : partition_optimal(graph, stages, cost);
    PartitionPlan p;
    p.method = detail::method_name(method);
    for (std::size_t s = 0; s < stages; ++s) {
      const PartitionStage& st = cut.stages[s];
      StagePlan plan;
      plan.rank = placement[s];
      plan.first_layer = st.begin;
      plan.last_layer = st.end - 1;
      plan.first_name = st.first_layer;
      plan.last_name = st.last_layer;
      plan.forward = st.forward;
      plan.backward_input = st.backward_input;
      plan.backward_weight = st.backward_weight;
      plan.compute_time = st.compute;
      // No transfer happens between two stages on one rank (the V's turn in zb-v).
      const bool same_rank = s + 1 < stages && placement[s + 1] == placement[s];
      plan.comm_time = same_rank ? 0.0 : st.send;
      plan.memory_bytes = factor * st.param_bytes;
      plan.activation_bytes = st.activation_bytes;
      plan.output_bytes = st.send_bytes;
      p.stages.push_back(std::move(plan));
    }
    detail::set_bottleneck(p);
    return p;
  };
  return model;
}

// --layers N: a chain of identical layers, each F = BI = BW = 1 unit, holding 1 MiB of
// parameters and 1 MiB of activations and handing 1 MiB to the next layer.
[[nodiscard]] inline PlanModel uniform_layers_model(const PlanOptions& options) {
  std::vector<Layer> layers;
  for (std::int32_t i = 0; i < options.layers; ++i) {
    layers.push_back(Layer{ppsched::detail::concat("layer ", i), 1.0, 1.0, 1.0, 1048576.0, 1048576.0, 1048576.0});
  }
  Profile profile;
  profile.graph = LayerGraph(std::move(layers));
  return graph_model(std::move(profile), ppsched::detail::concat(options.layers, " identical layers (F = BI = BW = 1)"),
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
  using ppsched::detail::concat;
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
  return graph_model(std::move(profile), std::move(description), options);
}

}  // namespace ppsched::cli
