// A model the planner can cut for any placement of virtual stages on ranks. Each schedule
// family places its stages differently (one per rank, v looped chunks, a V), so the planner
// does not take one partition: it takes a PlanModel and asks it for the cut of each placement
// it evaluates. Two makers cover the usual cases: `per_rank_cost_model` (every rank's share of
// the model costs the same; a pure schedule study) and `graph_model` (a layer graph on a
// machine, cut by the exact partitioner of partition/partition.hpp). A caller with its own
// partitioner fills PlanModel::partition itself.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/partition/cost_model.hpp"
#include "ppsched/partition/partition.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/schedule/generators.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// A model cut into stages for one placement is a Partition (partition/partition.hpp): stages in
// model order, each a PartitionStage whose rank is the placement's, `method` the PlanModel's
// phrase (partition_method_name for graph_model's). The former plan::PartitionPlan held a
// subset of it; the alias keeps code that names it compiling for one release.
using PartitionPlan [[deprecated("plan::PartitionPlan is ppsched::Partition; its bottleneck_time is Partition::bottleneck")]] =
    Partition;

// One line per stage: rank, layers, F, BI, BW, comm out, static bytes; then the bottleneck. The
// planner's listing of a cut, where to_string(Partition) prints the partitioner's table: a
// cut that places several stages on one rank reads better with the ranks.
[[nodiscard]] inline std::string cut_text(const Partition& p) {
  std::string out = detail::concat("partition (", p.method, "), ", p.stages.size(), " stages\n");
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const PartitionStage& st = p.stages[s];
    out += detail::concat("  stage ", s, " rank ", st.rank, " layers ", st.begin, "-", st.end - 1, " (",
                          st.first_layer_name,
                          st.first_layer_name == st.last_layer_name ? "" : " .. " + st.last_layer_name, "): F ",
                          st.forward, " BI ", st.backward_input, " BW ", st.backward_weight, " comm ", st.send_time,
                          " static ", bytes_text(st.static_bytes), "\n");
  }
  out += detail::concat("  bottleneck ", p.bottleneck, " on stage ", p.bottleneck_stage, "\n");
  return out;
}

// What a PlanModel is asked to cut: the placement (stage s on rank placement[s]) and, when the
// schedule that will run on it states them, the micro-batches whose activations each stage
// keeps at its peak (family_in_flight), which device memory caps are checked with. Built
// implicitly from a placement, so `model.partition(placement)` asks for a cut with the
// model's default counts (1F1B's); and it converts back to the placement, so a partition
// function written for a placement alone still fits PlanModel::partition.
struct CutRequest {
  std::span<const std::int32_t> placement;
  std::span<const double> in_flight;  // per stage; empty: 1F1B's counts
  // Bytes each rank may hold (static + in_flight x activations: `total_bytes`,
  // `rank_total_bytes`; its other limits are a schedule's, and graph_model refuses them), on
  // top of the devices' own caps; one stage per rank only (graph_model). The planner cuts again
  // under its cap with this when memory policies alone do not fit (compare_families,
  // MemoryPolicyMode::automatic).
  MemoryCap cap{};

  template <class Placement>
    requires std::convertible_to<const Placement&, std::span<const std::int32_t>>
  CutRequest(const Placement& p, std::span<const double> counts = {})  // NOLINT: implicit on purpose
      : placement(p), in_flight(counts) {}
  operator std::span<const std::int32_t>() const noexcept { return placement; }  // NOLINT: see above
};

// A model the planner can cut for any placement: `partition(placement)` (or
// `partition({placement, in_flight})`) returns one PartitionStage per virtual stage, stage s on
// rank placement[s], or throws ppsched::error when the model cannot be cut that way (more
// stages than layers, a placement over another rank count than the model's, say).
// One layer as layer-wise recomputation prices it (plan/memory_choice.hpp,
// layerwise_recompute_policy): what its backward needs, and its input, which the stage keeps.
struct LayerMemory {
  double activation_bytes = 0.0;
  double input_bytes = 0.0;  // the outputs of the layers that feed it
  double forward = 0.0;      // at speed 1
  // The profile's part worth recomputing (Layer::recompute_saves_bytes, recompute_time); 0: none.
  double part_saves_bytes = 0.0;
  double part_time = 0.0;

  friend bool operator==(const LayerMemory&, const LayerMemory&) = default;
};

struct PlanModel {
  std::string description;  // one line for a report
  TimeUnit unit = "unit";     // time unit of every cost: the profile's, "unit" (the model's own) when none is named
  // The pipeline's ranks and micro-batches the model was built for (graph_model: its
  // options'); 0: any (per_rank_cost_model). compare_families and search_plan refuse a
  // PlanRequest that disagrees, naming both fields, rather than cutting for another size.
  std::int32_t ranks = 0;
  std::int32_t microbatches = 0;
  std::size_t layers = 0;     // 0 when the model has no layers (per_rank_cost_model)
  bool has_bytes = false;     // activation and parameter sizes are known
  Interconnect link{};
  // What the hardware holds per rank: graph_model sets `rank_total_bytes` from the profile's
  // devices' memory; unlimited: no cap.
  MemoryCap device_cap{};
  // The runtime's fixed costs per compute action, per transfer and per step, and the slowdown of
  // ranks sharing the host's cores, in `unit`; graph_model takes them from the profile.
  FixedCosts fixed_costs{};
  bool first_stage_backward_in_bw = false;    // Profile::first_stage_backward_in_bw
  std::function<Partition(const CutRequest& cut)> partition;
  // Per position of the layer order the partition cuts (PartitionStage::begin..end),
  // from the profile's layers (graph_model); empty without layers.
  std::vector<LayerMemory> layer_memory;
};

// The micro-batches whose activations each stage of `family` keeps at its peak on p ranks with
// m micro-batches, one stage per rank, as FamilyInfo::peak_in_flight states them; a stage
// without a stated bound takes 1F1B's (p - s). Empty for a family that places several stages
// on a rank (its peak is measured per schedule instead) or states no bound at all.
[[nodiscard]] inline std::vector<double> family_in_flight(const FamilyInfo& family, std::int32_t p, std::int32_t m) {
  if (family.placement != PlacementKind::one_per_rank || family.peak_in_flight == nullptr || p < 1 || m < 1) return {};
  std::vector<double> counts(static_cast<std::size_t>(p));
  for (std::int32_t s = 0; s < p; ++s) {
    const std::int32_t stated = family.peak_in_flight(p, m, s);
    counts[static_cast<std::size_t>(s)] = stated >= 0 ? stated : std::min(p - s, m);
  }
  return counts;
}

// How graph_model cuts a layer graph (partition/partition.hpp).
enum class PartitionMethod : std::uint8_t {
  optimal,    // exact minimum bottleneck (partition_optimal)
  uniform,    // equal layer counts (partition_uniform), as Megatron-LM and DeepSpeed
  by_params,  // balanced parameter bytes (partition_by_params)
};

[[nodiscard]] constexpr std::string_view partition_method_name(PartitionMethod m) noexcept {
  switch (m) {
    case PartitionMethod::optimal: return "exact min-bottleneck";
    case PartitionMethod::uniform: return "uniform layer counts";
    case PartitionMethod::by_params: return "balanced parameters";
  }
  return "?";
}

}  // namespace plan
namespace detail {

// Sets each stage's recv_time to the previous stage's send_time (which a planner zeroes between
// two stages on one rank) and its time to the sum, as the partitioner counts it; then the
// bottleneck, its first stage, the mean and the imbalance as make_partition sets them, so a
// planner's cut reads like the partitioner's.
inline void set_bottleneck(Partition& p) {
  p.bottleneck = 0.0;
  p.bottleneck_stage = 0;
  double total = 0.0;
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    PartitionStage& st = p.stages[s];
    st.recv_time = s == 0 ? 0.0 : p.stages[s - 1].send_time;
    st.time = (st.compute_time + st.recv_time) + st.send_time;
    if (st.time > p.bottleneck) {
      p.bottleneck = st.time;
      p.bottleneck_stage = s;
    }
    total += st.time;
  }
  p.mean_time = p.stages.empty() ? 0.0 : total / static_cast<double>(p.stages.size());
  p.imbalance = p.mean_time > 0.0 ? p.bottleneck / p.mean_time : 1.0;
}

}  // namespace detail
namespace plan {

// A model without layers: every rank's share costs `per_rank.forward`, `backward_input` and
// `backward_weight` per micro-batch, and a rank holding v chunks runs each in 1/v of that, so
// interleaving changes the granularity and not the work (the convention of the closed-form
// bubbles, sim/analytic.hpp). A transfer between ranks takes
// link.transfer_time(per_rank.output_bytes); none is charged between two chunks on one rank.
// Activation and parameter bytes are not known (PlanModel::has_bytes is false).
[[nodiscard]] inline PlanModel per_rank_cost_model(const StageCost& per_rank, const Interconnect& link = {}) {
  using detail::concat;
  const double f = per_rank.forward, bi = per_rank.backward_input, bw = per_rank.backward_weight;
  for (const auto& [value, field] :
       {std::pair{f, "per_rank.forward"}, std::pair{bi, "per_rank.backward_input"},
        std::pair{bw, "per_rank.backward_weight"}, std::pair{per_rank.output_bytes, "per_rank.output_bytes"},
        std::pair{link.latency, "link.latency"}}) {
    if (!(value >= 0.0 && value <= std::numeric_limits<double>::max())) {
      detail::fail({"per_rank_cost_model", detail::concat(field, " is ", value), field, "times and sizes are finite and >= 0"});
    }
  }
  if (!(link.bandwidth > 0.0)) {
    detail::fail({"per_rank_cost_model", detail::concat("link.bandwidth is ", link.bandwidth), "link.bandwidth",
          "a bandwidth is bytes per time unit > 0, or infinity for free bytes"});
  }
  const double latency = link.transfer_time(per_rank.output_bytes);
  PlanModel model;
  model.description = detail::concat("uniform stages: F ", f, ", BI ", bi, ", BW ", bw, " per rank and micro-batch");
  model.unit = "unit";
  model.link = link;
  model.partition = [f, bi, bw, latency](const CutRequest& cut) {
    const std::span<const std::int32_t> placement = cut.placement;
    const std::int32_t ranks = placement.empty() ? 0 : *std::max_element(placement.begin(), placement.end()) + 1;
    const std::vector<std::int32_t> v = stages_per_rank(placement, ranks);
    Partition p;
    p.method = "uniform per-rank costs; a rank's v chunks cost 1/v each";
    // No layers: a position of the order is a stage's share, so stage s holds position s, and
    // layers_of(s) is {s}.
    p.boundaries.push_back(0);
    for (std::size_t s = 0; s < placement.size(); ++s) {
      p.order.push_back(s);
      p.boundaries.push_back(s + 1);
      PartitionStage st;
      st.rank = placement[s];
      const double share = 1.0 / v[static_cast<std::size_t>(st.rank)];
      st.begin = s;
      st.end = s + 1;
      st.first_layer_name = st.last_layer_name = detail::concat("stage ", s);
      st.forward = f * share;
      st.backward_input = bi * share;
      st.backward_weight = bw * share;
      st.compute_time = (st.forward + st.backward_input) + st.backward_weight;
      st.send_time = s + 1 < placement.size() && placement[s + 1] != placement[s] ? latency : 0.0;
      p.stages.push_back(std::move(st));
    }
    detail::set_bottleneck(p);
    return p;
  };
  return model;
}

// How graph_model prices and cuts the graph.
struct GraphModelOptions {
  // The pipeline's size, given here once: PlanModel::ranks and ::microbatches, which a
  // PlanRequest must match. Profile::devices has one device per rank, one, or none.
  std::int32_t ranks = 1;
  std::int32_t microbatches = 1;  // for the in-flight counts under the devices' memory caps
  // Bytes a rank holds per parameter byte (PartitionCostModel::optimizer_state_factor): 1 for
  // the weights alone, 8 (the default) for bf16 weights and gradients with fp32 Adam state.
  double optimizer_state_factor = default_optimizer_state_factor;
  PartitionMethod method = PartitionMethod::optimal;
};

// A layer graph on a machine (Profile::devices in pipeline order, one per rank or one for all,
// and Profile::link), cut by ppsched's partitioner for each placement. A device's speed applies
// to every stage on its rank. Device memory caps constrain the one-stage-per-rank cut, with the
// cut request's in-flight counts (the family's, family_in_flight; 1F1B's when it gives none);
// with chunks the partitioner sees speeds only, and each schedule's peak is checked against the
// caps afterwards (PlanModel::device_cap). A placement must use exactly `options.ranks`
// ranks: a cut for fewer would drop the caps of the others. No transfer is charged between two
// stages on one rank (the V's turn).
[[nodiscard]] inline PlanModel graph_model(Profile profile, std::string description, const GraphModelOptions& options) {
  using detail::concat;
  if (options.ranks < 1 || options.microbatches < 1) {
    detail::fail({"graph_model", detail::concat("ranks = ", options.ranks, ", microbatches = ", options.microbatches),
          "GraphModelOptions", "give at least one rank and one micro-batch"});
  }
  if (!(options.optimizer_state_factor >= 0.0 && options.optimizer_state_factor <= std::numeric_limits<double>::max())) {
    detail::fail({"graph_model", detail::concat("optimizer_state_factor is ", options.optimizer_state_factor),
          "GraphModelOptions::optimizer_state_factor", "give the finite bytes held per parameter byte, >= 0"});
  }
  std::vector<Device> devices = profile.devices;
  if (devices.size() == 1) devices.assign(static_cast<std::size_t>(options.ranks), devices.front());
  if (!devices.empty() && devices.size() != static_cast<std::size_t>(options.ranks)) {
    detail::fail({"graph_model", detail::concat("the profile lists ", devices.size(), " devices for ", options.ranks, " ranks"),
          "Profile::devices", "list one device per rank, one for all ranks, or none"});
  }
  PlanModel model;
  model.description = std::move(description);
  model.unit = profile.time_unit.empty() ? "unit" : profile.time_unit;
  model.layers = profile.graph.size();
  model.has_bytes = true;
  model.ranks = options.ranks;
  model.microbatches = options.microbatches;
  model.link = profile.link;
  model.fixed_costs = profile.fixed_costs;
  model.first_stage_backward_in_bw = profile.first_stage_backward_in_bw;
  if (std::any_of(devices.begin(), devices.end(),
                  [](const Device& d) { return d.memory_bytes != std::numeric_limits<double>::infinity(); })) {
    for (const Device& d : devices) model.device_cap.rank_total_bytes.push_back(d.memory_bytes);
  }
  {
    std::vector<double> input(profile.graph.size(), 0.0);
    for (const Edge& e : profile.graph.edges()) input[e.to] += profile.graph.layer(e.from).output_bytes;
    for (const std::size_t i : profile.graph.topological_order()) {
      const Layer& l = profile.graph.layer(i);
      model.layer_memory.push_back(LayerMemory{l.activation_bytes, input[i], l.forward, l.recompute_saves_bytes.value_or(0.0),
                                               l.recompute_time.value_or(0.0)});
    }
  }
  model.partition = [graph = std::move(profile.graph), devices, link = profile.link, options](
                        const CutRequest& request) {
    const std::span<const std::int32_t> placement = request.placement;
    const auto stages = static_cast<std::int32_t>(placement.size());
    PartitionCostModel cost;
    cost.link = link;
    cost.optimizer_state_factor = options.optimizer_state_factor;
    for (const std::int32_t r : placement) {
      if (r < 0 || r >= options.ranks) {
        detail::fail({"placement", detail::concat("names rank ", r, " of ", options.ranks), "",
              "map each stage to a rank in 0 .. GraphModelOptions::ranks - 1"});
      }
    }
    const std::int32_t used = placement.empty() ? 0 : *std::max_element(placement.begin(), placement.end()) + 1;
    if (used != options.ranks) {
      detail::fail({"placement", detail::concat("uses ", used, " ranks, but GraphModelOptions::ranks is ", options.ranks), "",
            detail::concat("cut for a placement over all ", options.ranks,
                   " ranks (PlanRequest::ranks equal to GraphModelOptions::ranks), or build the model for ", used,
                   " ranks")});
    }
    if (!request.cap.totals_only()) {
      detail::fail({"cut request", "caps M_B or activation bytes, which a cut cannot keep to", "CutRequest::cap",
            "give the bytes a rank may hold (total_bytes, rank_total_bytes); check the schedule against the other limits"});
    }
    const bool one_per_rank = stages == options.ranks;
    for (const std::int32_t r : placement) {
      Device d = devices.empty() ? Device{} : devices[static_cast<std::size_t>(r)];
      d.memory_bytes = one_per_rank ? std::min(d.memory_bytes, request.cap.total_bytes_of(r)) : std::numeric_limits<double>::infinity();
      cost.devices.push_back(d);
    }
    if (!request.in_flight.empty() && request.in_flight.size() != placement.size()) {
      detail::fail({"cut request", detail::concat("gives in-flight counts for ", request.in_flight.size(), " stages of ", stages), "",
            "give one count per stage (family_in_flight), or none for 1F1B's"});
    }
    cost.inflight = request.in_flight.empty()
                        ? inflight_1f1b(stages, options.microbatches)
                        : std::vector<double>(request.in_flight.begin(), request.in_flight.end());
    Partition cut = options.method == PartitionMethod::uniform     ? partition_uniform(graph, stages, cost)
                          : options.method == PartitionMethod::by_params ? partition_by_params(graph, stages, cost)
                                                                         : partition_optimal(graph, stages, cost);
    // The partitioner's cut as it is (order, boundaries, stages), named the planner's way, on
    // the placement's ranks; the times set again where a V's turn sends nothing.
    cut.method = std::string(partition_method_name(options.method));
    for (std::size_t s = 0; s < placement.size(); ++s) {
      cut.stages[s].rank = placement[s];
      // The V's turn: the next stage is on the same rank, so nothing crosses a link.
      if (s + 1 < placement.size() && placement[s + 1] == placement[s]) cut.stages[s].send_time = 0.0;
    }
    detail::set_bottleneck(cut);
    return cut;
  };
  return model;
}

}  // namespace plan
}  // namespace ppsched
