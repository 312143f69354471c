// Partitioning a layer graph into pipeline stages. The layers are laid out in a topological
// order (the graph's own, or one the caller gives) and cut into contiguous, non-empty stages.
// `partition_optimal` returns the split with the smallest bottleneck — exactly, under speed,
// memory caps and communication costs; `partition_uniform` and `partition_by_params` give the
// splits Megatron-LM and DeepSpeed users know; `evaluate_partition` prices any given split
// with the same cost model, so a manual split can be set beside the optimum. Every result is
// a `Partition`: boundaries plus, per stage, the times and bytes a schedule simulator needs.
//
// The cost of a stage (see docs/partition.md): its layers' forward + backward times divided
// by its device's speed, plus the time to receive every tensor crossing its first cut and to
// send every tensor crossing its last cut. A tensor is one layer's output; it crosses cut b
// when its layer is before b and some layer it feeds is at or after b, so a skip connection
// spanning several stages is paid at every cut it spans (each stage between relays it), once
// per cut however many layers beyond it read it.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/partition/chain.hpp"
#include "ppsched/partition/cost_model.hpp"

namespace ppsched::inline PPSCHED_MODE {

// One stage of a cut: the layers it holds, what one micro-batch costs on it, and the bytes it
// keeps. The partitioner returns it (Partition::stages) and the planner cuts and prices with
// it (PartitionPlan::stages): one type, so nothing is translated between the two. Times are in
// the profile's unit and already divided by the stage's device speed; bytes are per device.
struct PartitionStage {
  // The rank the stage runs on: its index in a Partition (one stage per device), the
  // placement's rank in a PartitionPlan.
  std::int32_t rank = 0;
  std::size_t begin = 0;  // first position (in the layer order) of the stage
  std::size_t end = 0;    // one past its last position
  std::string first_layer_name, last_layer_name;  // the layers at positions begin and end - 1
  double speed = 1.0;
  double forward = 0.0;          // its layers' forward times, summed, / speed
  double backward_input = 0.0;   // likewise for BI
  double backward_weight = 0.0;  // likewise for BW
  // The full backward B, / speed, when a layer of the stage has a measured one (the others
  // count BI + BW); absent when none has.
  std::optional<double> backward{};
  double compute_time = 0.0;     // the cost model's compute term: (P[end] - P[begin]) / speed
  // Receiving the tensors that cross the stage's first cut, and sending those that cross its
  // last. In a PartitionPlan both are 0 between two stages on one rank.
  double recv_time = 0.0;
  double send_time = 0.0;
  double recv_bytes = 0.0;       // the bytes of those tensors, per micro-batch (kept between
  double send_bytes = 0.0;       // two stages on one rank: what the stages hand over)
  double time = 0.0;             // (compute_time + recv_time) + send_time: what the bottleneck is taken over
  double param_bytes = 0.0;      // the parameters alone: what data parallelism all-reduces
  double static_bytes = 0.0;     // optimizer_state_factor * param_bytes: with gradients and optimizer state
  double activation_bytes = 0.0;  // stored per micro-batch
  double in_flight = 0.0;         // micro-batches of activations kept, as the cut was asked to count
  // static_bytes + in_flight * activation_bytes: what memory_cap is checked against. A
  // schedule's own peak (FamilyResult::peak_memory_bytes) is measured on its program instead.
  double peak_bytes = 0.0;
  double memory_cap = std::numeric_limits<double>::infinity();
  // Of activation_bytes, what the stage's BIs leave for BW, when every layer's was measured
  // (Layer::weight_bytes); cost_model_of makes it the stage's weight_memory_fraction.
  std::optional<double> weight_bytes{};

  [[nodiscard]] std::size_t size() const noexcept { return end - begin; }
  [[nodiscard]] double comm_time() const noexcept { return recv_time + send_time; }
  [[nodiscard]] bool fits_memory() const noexcept { return peak_bytes <= memory_cap; }

  friend bool operator==(const PartitionStage&, const PartitionStage&) = default;
};

struct Partition {
  std::string method;                    // "optimal", "uniform", "by-params" or "given"
  std::vector<std::size_t> order;        // order[position] = layer index
  std::vector<std::size_t> boundaries;   // stages + 1 positions, from 0 to the layer count
  std::vector<PartitionStage> stages;
  double bottleneck = 0.0;               // the slowest stage's time
  std::size_t bottleneck_stage = 0;      // the first stage with that time
  double mean_time = 0.0;
  double imbalance = 1.0;                // bottleneck / mean_time (1 when every stage is free)

  [[nodiscard]] std::int32_t stage_count() const noexcept { return static_cast<std::int32_t>(stages.size()); }
  // The layer indices of stage s, in order.
  [[nodiscard]] std::vector<std::size_t> layers_of(std::size_t s) const {
    const PartitionStage& st = stages.at(s);
    return {order.begin() + static_cast<std::ptrdiff_t>(st.begin), order.begin() + static_cast<std::ptrdiff_t>(st.end)};
  }
  [[nodiscard]] bool fits_memory() const noexcept {
    return std::all_of(stages.begin(), stages.end(), [](const PartitionStage& s) { return s.fits_memory(); });
  }

  friend bool operator==(const Partition&, const Partition&) = default;
};

namespace detail {

// A graph and a cost model flattened into the solver's arrays, over one topological order.
// The per-layer arrays share one allocation: fewer, larger blocks are what a malloc keeps
// for the next call instead of returning them to the system (and faulting them in again).
// Move-only, since the views point into `storage`.
struct PartitionInput {
  std::size_t layers = 0;
  std::size_t stages = 0;
  std::vector<std::size_t> order;
  std::vector<double> storage;
  std::span<double> compute, params, activations, comm;  // views into storage; comm may be empty
  std::vector<double> speed, cap, inflight;
  double optimizer_state_factor = 1.0;
  double largest_layer = 0.0;
  bool plain_chain = false;  // see is_plain_chain

  PartitionInput() = default;
  PartitionInput(const PartitionInput&) = delete;
  PartitionInput& operator=(const PartitionInput&) = delete;
  PartitionInput(PartitionInput&&) noexcept = default;
  PartitionInput& operator=(PartitionInput&&) noexcept = default;

  [[nodiscard]] ChainModel model() const noexcept {
    ChainModel m;
    m.layers = layers;
    m.stages = stages;
    m.compute = compute;
    m.params = params;
    m.activations = activations;
    m.comm = comm;
    m.speed = speed;
    m.memory_cap = cap;
    m.inflight = inflight;
    m.optimizer_state_factor = optimizer_state_factor;
    return m;
  }
};

inline void check_partition_shape(const LayerGraph& graph, std::int32_t stages, std::string_view subject) {
  if (graph.empty()) {
    fail({std::string(subject), "the layer graph has no layers", "graph", "give at least one layer"});
  }
  if (stages <= 0) fail({std::string(subject), concat(stages, " stages requested"), "stages", "ask for at least one stage"});
  if (static_cast<std::size_t>(stages) > graph.size()) {
    fail({std::string(subject), concat(stages, " stages requested for ", graph.size(), " layers; a stage cannot be empty"),
          "stages", concat("ask for at most ", graph.size(), " stages, or split layers finer")});
  }
}

inline void check_running_sum(double total, std::string_view subject, const char* what) {
  if (!chain_value_ok(total)) {
    fail({std::string(subject), concat("the layers' ", what, " add up to more than the largest double"), what,
          "rescale the profile (a larger time unit, or fewer bytes per unit)"});
  }
}

// For each cut b, the sum of per_tensor(output_bytes) over the tensors crossing it, in the
// order of their producing layers (0 at both ends).
template <class PerTensor>
void sum_over_crossing_tensors(const LayerGraph& graph, std::span<const std::size_t> order, bool plain_chain,
                               std::span<double> sums, PerTensor per_tensor) {
  const std::size_t n = graph.size();
  const Layer* layers = graph.layers().data();
  sums[0] = sums[n] = 0.0;
  if (plain_chain) {  // one tensor per cut: the previous layer's output
    for (std::size_t b = 1; b < n; ++b) sums[b] = 0.0 + per_tensor(layers[b - 1].output_bytes);
    return;
  }
  std::vector<std::size_t> position(n);
  for (std::size_t p = 0; p < n; ++p) position[order[p]] = p;
  // last_reader[p]: the position of the last layer reading position p's output, or p if none.
  std::vector<std::size_t> last_reader(n);
  for (std::size_t p = 0; p < n; ++p) last_reader[p] = p;
  for (const Edge& e : graph.edges()) {
    const std::size_t from = position[e.from];
    last_reader[from] = std::max(last_reader[from], position[e.to]);
  }
  std::vector<std::size_t> live;  // positions whose output crosses the current cut, ascending
  for (std::size_t b = 1; b < n; ++b) {
    if (last_reader[b - 1] >= b) live.push_back(b - 1);
    std::erase_if(live, [&](std::size_t p) { return last_reader[p] < b; });
    double sum = 0.0;
    for (const std::size_t p : live) sum = sum + per_tensor(layers[order[p]].output_bytes);
    sums[b] = sum;
  }
}

// True when the graph is a chain cut in its own numbering: then the tensor crossing cut b is
// simply layer b-1's output.
[[nodiscard]] inline bool is_plain_chain(const LayerGraph& graph, std::span<const std::size_t> order) {
  for (std::size_t p = 0; p < order.size(); ++p) {
    if (order[p] != p) return false;
  }
  return graph.is_chain();
}

[[nodiscard]] inline PartitionInput prepare_partition(const LayerGraph& graph, std::int32_t stage_count,
                                                      const PartitionCostModel& cost, std::span<const std::size_t> order,
                                                      std::string_view subject) {
  check_partition_shape(graph, stage_count, subject);
  const auto stages = static_cast<std::size_t>(stage_count);
  check_partition_cost_model(cost, stages);
  PartitionInput in;
  in.layers = graph.size();
  in.stages = stages;
  if (order.empty()) {
    in.order = graph.topological_order();
  } else {
    detail::check_topological_order(graph, order);
    in.order.assign(order.begin(), order.end());
  }
  const std::size_t n = in.layers;
  const bool with_comm = !cost.link.is_free();
  in.storage.resize((with_comm ? 4 : 3) * (n + 1));
  in.compute = std::span<double>(in.storage).subspan(0, n + 1);
  in.params = std::span<double>(in.storage).subspan(n + 1, n + 1);
  in.activations = std::span<double>(in.storage).subspan(2 * (n + 1), n + 1);
  {
    // Locals and raw pointers: the sums stay in registers instead of being reloaded through
    // stores the compiler must assume alias them.
    double* compute = in.compute.data();
    double* params = in.params.data();
    double* activations = in.activations.data();
    const Layer* layers = graph.layers().data();
    const std::size_t* order_at = in.order.data();
    double c = 0.0, q = 0.0, a = 0.0, largest = 0.0;
    compute[0] = params[0] = activations[0] = 0.0;
    for (std::size_t p = 0; p < n; ++p) {
      const Layer& l = layers[order_at[p]];
      const double next = c + l.compute();
      largest = std::max(largest, next - c);
      c = next;
      q = q + l.param_bytes;
      a = a + l.activation_bytes;
      compute[p + 1] = c;
      params[p + 1] = q;
      activations[p + 1] = a;
    }
    in.largest_layer = largest;
  }
  check_running_sum(in.compute[n], subject, "compute times");
  check_running_sum(in.params[n], subject, "parameter bytes");
  check_running_sum(in.activations[n], subject, "activation bytes");

  in.plain_chain = is_plain_chain(graph, in.order);
  if (with_comm) {
    in.comm = std::span<double>(in.storage).subspan(3 * (n + 1), n + 1);
    sum_over_crossing_tensors(graph, in.order, in.plain_chain, in.comm,
                              [&](double bytes) { return cost.link.transfer_time(bytes); });
    double priciest = 0.0;
    for (const double c : in.comm) priciest = std::max(priciest, c);
    check_running_sum(priciest, subject, "transfer times at one cut");
    if (priciest == 0.0) in.comm = {};
  }
  bool any_speed = false, any_cap = false;
  for (const Device& d : cost.devices) {
    any_speed = any_speed || d.speed != 1.0;
    any_cap = any_cap || d.memory_bytes != std::numeric_limits<double>::infinity();
  }
  auto device = [&](std::size_t j) -> const Device& { return cost.devices.size() == 1 ? cost.devices[0] : cost.devices[j]; };
  if (any_speed) {
    for (std::size_t j = 0; j < stages; ++j) in.speed.push_back(device(j).speed);
  }
  if (any_cap) {
    for (std::size_t j = 0; j < stages; ++j) in.cap.push_back(device(j).memory_bytes);
  }
  in.inflight = cost.inflight.empty() ? inflight_1f1b(stage_count) : cost.inflight;
  in.optimizer_state_factor = cost.optimizer_state_factor;
  const double most_inflight = *std::max_element(in.inflight.begin(), in.inflight.end());
  check_running_sum(in.optimizer_state_factor * in.params[n] + most_inflight * in.activations[n], subject,
                    "memory needs (parameters x optimizer_state_factor + activations x in-flight)");
  double slowest = 1.0, priciest_cut = 0.0;
  for (const double s : in.speed) slowest = std::min(slowest, s);
  for (const double c : in.comm) priciest_cut = std::max(priciest_cut, c);
  check_running_sum(in.compute[n] / slowest + 2.0 * priciest_cut, subject,
                    "stage times (compute on the slowest device plus two cuts)");
  return in;
}

// Prices `boundaries` and hands over the input's order (so the input is spent).
[[nodiscard]] inline Partition make_partition(const LayerGraph& graph, PartitionInput&& in,
                                              std::vector<std::size_t> boundaries, std::string method) {
  const ChainModel m = in.model();
  std::vector<double> bytes;  // per cut; a plain chain reads its layers directly
  if (!in.plain_chain) {
    bytes.resize(in.layers + 1);
    sum_over_crossing_tensors(graph, in.order, false, bytes, [](double b) { return b; });
  }
  auto bytes_at = [&](std::size_t cut) {
    if (cut == 0 || cut == in.layers) return 0.0;
    return in.plain_chain ? graph.layers()[cut - 1].output_bytes : bytes[cut];
  };
  Partition p;
  p.method = std::move(method);
  p.boundaries = std::move(boundaries);
  double total = 0.0;
  for (std::size_t j = 0; j < in.stages; ++j) {
    const std::size_t a = p.boundaries[j], b = p.boundaries[j + 1];
    PartitionStage st;
    st.rank = static_cast<std::int32_t>(j);
    st.begin = a;
    st.end = b;
    st.first_layer_name = graph.layers()[in.order[a]].name;
    st.last_layer_name = graph.layers()[in.order[b - 1]].name;
    st.speed = in.speed.empty() ? 1.0 : in.speed[j];
    double forward = 0.0, backward_input = 0.0, backward_weight = 0.0, backward = 0.0, weight = 0.0;
    bool measured_backward = false, measured_weight = true;
    const Layer* layers = graph.layers().data();
    for (std::size_t x = a; x < b; ++x) {
      const Layer& l = layers[in.order[x]];
      forward += l.forward;
      backward_input += l.backward_input;
      backward_weight += l.backward_weight;
      backward += l.full_backward();
      measured_backward = measured_backward || l.backward.has_value();
      weight += l.weight_bytes.value_or(0.0);
      measured_weight = measured_weight && l.weight_bytes.has_value();
    }
    if (measured_weight) st.weight_bytes = weight;
    if (measured_backward) st.backward = backward / st.speed;
    st.forward = forward / st.speed;
    st.backward_input = backward_input / st.speed;
    st.backward_weight = backward_weight / st.speed;
    st.compute_time = m.compute_time(j, a, b);
    st.recv_time = in.comm.empty() ? 0.0 : in.comm[a];
    st.send_time = in.comm.empty() ? 0.0 : in.comm[b];
    st.recv_bytes = bytes_at(a);
    st.send_bytes = bytes_at(b);
    st.time = m.time(j, a, b);
    st.param_bytes = in.params[b] - in.params[a];
    st.static_bytes = in.optimizer_state_factor * st.param_bytes;
    st.activation_bytes = in.activations[b] - in.activations[a];
    st.in_flight = in.inflight[j];
    st.peak_bytes = m.memory(j, a, b);
    st.memory_cap = in.cap.empty() ? std::numeric_limits<double>::infinity() : in.cap[j];
    if (j == 0 || st.time > p.bottleneck) {
      p.bottleneck = st.time;
      p.bottleneck_stage = j;
    }
    total += st.time;
    p.stages.push_back(std::move(st));
  }
  p.order = std::move(in.order);
  p.mean_time = total / static_cast<double>(in.stages);
  p.imbalance = p.mean_time > 0.0 ? p.bottleneck / p.mean_time : 1.0;
  return p;
}

// The least memory cap that, given to every device, admits a split (time ignored), and the
// stage that needs it in such a split. The search runs over doubles, like the time search.
struct SmallestCap {
  double bytes = 0.0;
  std::size_t stage = 0;
};

[[nodiscard]] inline SmallestCap smallest_uniform_cap(const PartitionInput& in) {
  ChainModel m = in.model();
  m.comm = {};
  std::vector<double> caps(in.stages);
  m.memory_cap = caps;
  std::vector<std::size_t> split;
  // The fullest stage of the least-memory split that fits when every device has `cap`.
  auto fits_all = [&](double cap, SmallestCap& fullest) {
    std::fill(caps.begin(), caps.end(), cap);
    MonotoneProbe probe(m, in.largest_layer);
    NextEvent unused;
    if (!probe.run(chain_infinity, unused)) return false;
    probe.split(split);
    fullest = {m.memory(0, split[0], split[1]), 0};
    for (std::size_t j = 1; j < in.stages; ++j) {
      const double need = m.memory(j, split[j], split[j + 1]);
      if (need > fullest.bytes) fullest = {need, j};
    }
    return true;
  };
  double lo = 0.0, hi = 0.0;
  for (std::size_t j = 0; j < in.stages; ++j) hi = std::max(hi, m.memory(j, 0, in.layers));  // every split fits
  SmallestCap fullest;
  while (lo < hi) {
    const double mid = double_midpoint(lo, hi);
    if (fits_all(mid, fullest)) {
      hi = fullest.bytes;
    } else {
      lo = std::nextafter(mid, chain_infinity);
    }
  }
  (void)fits_all(hi, fullest);
  return fullest;
}

[[noreturn]] inline void fail_memory(const PartitionInput& in, std::string_view subject) {
  const SmallestCap need = smallest_uniform_cap(in);
  std::string caps;
  for (std::size_t j = 0; j < in.cap.size(); ++j) caps += concat(j == 0 ? "" : ", ", bytes_text(in.cap[j]));
  fail({std::string(subject),
        concat("no split of ", in.layers, " layers into ", in.stages, " stages fits the devices' memory caps (",
               caps, ")"),
        "devices[].memory_bytes",
        concat("the split needing the least memory needs ", bytes_text(need.bytes), " on its fullest stage (stage ",
               need.stage, "): give every device at least that much, or lower optimizer_state_factor or the "
               "in-flight counts, or use more stages")});
}

inline void check_boundaries(const LayerGraph& graph, std::span<const std::size_t> boundaries) {
  const std::string subject = "evaluate_partition";
  const std::string fix = concat("boundaries run from 0 to ", graph.size(), " (the layer count), strictly increasing, "
                                 "one more than the stage count");
  if (boundaries.size() < 2) {
    fail({subject, concat("got ", boundaries.size(), " boundaries; at least one stage needs 2"), "boundaries", fix});
  }
  if (boundaries.front() != 0) fail({subject, concat("the first boundary is ", boundaries.front(), ", not 0"), "boundaries[0]", fix});
  if (boundaries.back() != graph.size()) {
    fail({subject, concat("the last boundary is ", boundaries.back(), ", not the layer count ", graph.size()),
          concat("boundaries[", boundaries.size() - 1, "]"), fix});
  }
  for (std::size_t j = 0; j + 1 < boundaries.size(); ++j) {
    if (boundaries[j] >= boundaries[j + 1]) {
      fail({subject, concat("stage ", j, " would be empty or reversed (", boundaries[j], " .. ", boundaries[j + 1], ")"),
            concat("boundaries[", j + 1, "]"), fix});
    }
  }
}

}  // namespace detail

// The split with the smallest bottleneck (see chain.hpp for the exact cost formulas and the
// tie rule). `order` is a topological order to cut; empty means the graph's own.
// Throws when no split fits the memory caps, saying what cap would.
[[nodiscard]] inline Partition partition_optimal(const LayerGraph& graph, std::int32_t stages,
                                                 const PartitionCostModel& cost = {},
                                                 std::span<const std::size_t> order = {}) {
  detail::PartitionInput in = detail::prepare_partition(graph, stages, cost, order, "partition_optimal");
  ChainSplit split = detail::solve_chain(in.model(), in.largest_layer);
  if (split.boundaries.empty()) detail::fail_memory(in, "partition_optimal");
  return detail::make_partition(graph, std::move(in), std::move(split.boundaries), "optimal");
}

// Equal layer counts, as Megatron-LM splits; when the count does not divide, the first
// (layers % stages) stages get one layer more (as DeepSpeed's partition_method="uniform").
[[nodiscard]] inline Partition partition_uniform(const LayerGraph& graph, std::int32_t stages,
                                                 const PartitionCostModel& cost = {},
                                                 std::span<const std::size_t> order = {}) {
  detail::PartitionInput in = detail::prepare_partition(graph, stages, cost, order, "partition_uniform");
  const std::size_t k = in.stages;
  std::vector<std::size_t> boundaries(k + 1, 0);
  const std::size_t base = in.layers / k, extra = in.layers % k;
  for (std::size_t j = 0; j < k; ++j) boundaries[j + 1] = boundaries[j] + base + (j < extra ? 1 : 0);
  return detail::make_partition(graph, std::move(in), std::move(boundaries), "uniform");
}

// Balanced parameter bytes, as DeepSpeed's partition_method="parameters" intends: the split
// whose largest stage holds the fewest parameter bytes (exact, same tie rule), then priced
// with the full cost model.
[[nodiscard]] inline Partition partition_by_params(const LayerGraph& graph, std::int32_t stages,
                                                   const PartitionCostModel& cost = {},
                                                   std::span<const std::size_t> order = {}) {
  detail::PartitionInput in = detail::prepare_partition(graph, stages, cost, order, "partition_by_params");
  detail::ChainModel by_params;
  by_params.layers = in.layers;
  by_params.stages = in.stages;
  by_params.compute = in.params;
  double largest = 0.0;
  for (std::size_t x = 0; x < in.layers; ++x) largest = std::max(largest, in.params[x + 1] - in.params[x]);
  ChainSplit split = detail::solve_chain(by_params, largest);
  return detail::make_partition(graph, std::move(in), std::move(split.boundaries), "by-params");
}

// Prices a given split: stage j holds positions boundaries[j] .. boundaries[j+1]-1 of the
// order. Memory caps are reported (PartitionStage::fits_memory), not enforced.
[[nodiscard]] inline Partition evaluate_partition(const LayerGraph& graph, std::span<const std::size_t> boundaries,
                                                  const PartitionCostModel& cost = {},
                                                  std::span<const std::size_t> order = {}) {
  if (graph.empty()) detail::check_partition_shape(graph, 1, "evaluate_partition");
  detail::check_boundaries(graph, boundaries);
  detail::PartitionInput in = detail::prepare_partition(graph, boundaries.size() - 1, cost, order, "evaluate_partition");
  return detail::make_partition(graph, std::move(in), {boundaries.begin(), boundaries.end()}, "given");
}

// A table, one row per stage:
//   partition (optimal): 12 layers, 4 stages, bottleneck 6.5 at stage 2, mean 6.1, imbalance 1.066
//   stage  positions  layers  first .. last  speed  compute  comm  time  memory  cap
inline std::ostream& operator<<(std::ostream& out, const Partition& p) {
  std::ostringstream t;
  t << std::setprecision(6);
  t << "partition (" << p.method << "): " << p.order.size() << " layers, " << p.stages.size() << " stages, bottleneck "
    << p.bottleneck << " at stage " << p.bottleneck_stage << ", mean " << p.mean_time << ", imbalance "
    << p.imbalance << '\n';
  t << std::right << std::setw(5) << "stage" << std::setw(16) << "positions" << std::setw(7) << "layers" << "  "
    << std::left << std::setw(28) << "first .. last" << std::right << std::setw(7) << "speed" << std::setw(12)
    << "compute" << std::setw(11) << "comm" << std::setw(12) << "time" << std::setw(13) << "memory" << std::setw(13)
    << "cap" << '\n';
  for (std::size_t j = 0; j < p.stages.size(); ++j) {
    const PartitionStage& s = p.stages[j];
    std::string names = s.first_layer_name;
    if (s.size() > 1) names += " .. " + s.last_layer_name;
    if (names.size() > 27) names = names.substr(0, 24) + "...";
    const std::string cap = s.memory_cap == std::numeric_limits<double>::infinity() ? "-" : detail::concat(s.memory_cap);
    t << std::right << std::setw(5) << j << std::setw(16) << detail::concat(s.begin, "-", s.end - 1) << std::setw(7)
      << s.size() << "  " << std::left << std::setw(28) << names << std::right << std::setw(7) << s.speed
      << std::setw(12) << s.compute_time << std::setw(11) << s.comm_time() << std::setw(12) << s.time << std::setw(13)
      << s.peak_bytes << std::setw(13) << cap << (s.fits_memory() ? "" : "  OVER CAP") << '\n';
  }
  return out << t.str();
}

[[nodiscard]] inline std::string to_string(const Partition& p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

}  // namespace ppsched
