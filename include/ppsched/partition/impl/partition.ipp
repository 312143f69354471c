// The bodies of <ppsched/partition/partition.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include <iomanip>

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const Partition& p) {
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

[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const Partition& p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void check_partition_shape(const LayerGraph& graph, std::int32_t stages, std::string_view subject) {
  if (graph.empty()) {
    detail::fail({std::string(subject), "the layer graph has no layers", "graph", "give at least one layer"});
  }
  if (stages <= 0) detail::fail({std::string(subject), detail::concat(stages, " stages requested"), "stages", "ask for at least one stage"});
  if (static_cast<std::size_t>(stages) > graph.size()) {
    detail::fail({std::string(subject), detail::concat(stages, " stages requested for ", graph.size(), " layers; a stage cannot be empty"),
          "stages", detail::concat("ask for at most ", graph.size(), " stages, or split layers finer")});
  }
}

PPSCHED_OUTLINE void check_running_sum(double total, std::string_view subject, const char* what) {
  if (!chain_value_ok(total)) {
    detail::fail({std::string(subject), detail::concat("the layers' ", what, " add up to more than the largest double"), what,
          "rescale the profile (a larger time unit, or fewer bytes per unit)"});
  }
}

[[nodiscard]] PPSCHED_OUTLINE bool is_plain_chain(const LayerGraph& graph, std::span<const std::size_t> order) {
  for (std::size_t p = 0; p < order.size(); ++p) {
    if (order[p] != p) return false;
  }
  return graph.is_chain();
}

[[nodiscard]] PPSCHED_OUTLINE PartitionInput prepare_partition(const LayerGraph& graph, std::int32_t stage_count,
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

[[nodiscard]] PPSCHED_OUTLINE Partition make_partition(const LayerGraph& graph, PartitionInput&& in,
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
    double forward = 0.0, backward_input = 0.0, backward_weight = 0.0, backward = 0.0, weight = 0.0, optimizer = 0.0;
    bool measured_backward = false, measured_weight = true;
    const Layer* layers = graph.layers().data();
    for (std::size_t x = a; x < b; ++x) {
      const Layer& l = layers[in.order[x]];
      forward += l.forward;
      backward_input += l.backward_input;
      backward_weight += l.backward_weight;
      backward += l.full_backward();
      optimizer += l.optimizer_step;
      measured_backward = measured_backward || l.backward.has_value();
      weight += l.weight_bytes.value_or(0.0);
      measured_weight = measured_weight && l.weight_bytes.has_value();
    }
    // A cut right after the stage's last layer lets go of what only the next layer keeps of its
    // output (Layer::boundary_bytes); the model's last layer has no next layer. The solver and
    // peak_bytes keep the plain sum, which over-estimates by this term: the safe direction for
    // a memory cap, and the chain solver's exactness argument stays as it is.
    const Layer& last = layers[in.order[b - 1]];
    const double boundary = b < in.layers ? last.boundary_bytes.value_or(0.0) : 0.0;
    const double boundary_weight = b < in.layers ? last.boundary_weight_bytes.value_or(0.0) : 0.0;
    if (measured_weight) st.weight_bytes = boundary_weight > 0.0 ? std::max(0.0, weight - boundary_weight) : weight;
    if (measured_backward) st.backward = backward / st.speed;
    st.forward = forward / st.speed;
    st.backward_input = backward_input / st.speed;
    st.backward_weight = backward_weight / st.speed;
    st.optimizer_step = optimizer / st.speed;
    st.compute_time = m.compute_time(j, a, b);
    st.recv_time = in.comm.empty() ? 0.0 : in.comm[a];
    st.send_time = in.comm.empty() ? 0.0 : in.comm[b];
    st.recv_bytes = bytes_at(a);
    st.send_bytes = bytes_at(b);
    st.time = m.time(j, a, b);
    st.param_bytes = in.params[b] - in.params[a];
    st.static_bytes = in.optimizer_state_factor * st.param_bytes;
    st.activation_bytes = boundary > 0.0 ? std::max(0.0, (in.activations[b] - in.activations[a]) - boundary)
                                         : in.activations[b] - in.activations[a];
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

[[nodiscard]] PPSCHED_OUTLINE SmallestCap smallest_uniform_cap(const PartitionInput& in) {
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

PPSCHED_OUTLINE void check_boundaries(const LayerGraph& graph, std::span<const std::size_t> boundaries) {
  const std::string subject = "evaluate_partition";
  const std::string fix = detail::concat("boundaries run from 0 to ", graph.size(), " (the layer count), strictly increasing, "
                                 "one more than the stage count");
  if (boundaries.size() < 2) {
    detail::fail({subject, detail::concat("got ", boundaries.size(), " boundaries; at least one stage needs 2"), "boundaries", fix});
  }
  if (boundaries.front() != 0) detail::fail({subject, detail::concat("the first boundary is ", boundaries.front(), ", not 0"), "boundaries[0]", fix});
  if (boundaries.back() != graph.size()) {
    detail::fail({subject, detail::concat("the last boundary is ", boundaries.back(), ", not the layer count ", graph.size()),
          detail::concat("boundaries[", boundaries.size() - 1, "]"), fix});
  }
  for (std::size_t j = 0; j + 1 < boundaries.size(); ++j) {
    if (boundaries[j] >= boundaries[j + 1]) {
      detail::fail({subject, detail::concat("stage ", j, " would be empty or reversed (", boundaries[j], " .. ", boundaries[j + 1], ")"),
            detail::concat("boundaries[", j + 1, "]"), fix});
    }
  }
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Partition partition_optimal(const LayerGraph& graph, std::int32_t stages,
                                                 const PartitionCostModel& cost,
                                                 std::span<const std::size_t> order) {
  detail::PartitionInput in = detail::prepare_partition(graph, stages, cost, order, "partition_optimal");
  ChainSplit split = detail::solve_chain(in.model(), in.largest_layer);
  if (split.boundaries.empty()) detail::fail_memory(in, "partition_optimal");
  return detail::make_partition(graph, std::move(in), std::move(split.boundaries), "optimal");
}

[[nodiscard]] PPSCHED_OUTLINE Partition partition_uniform(const LayerGraph& graph, std::int32_t stages,
                                                 const PartitionCostModel& cost,
                                                 std::span<const std::size_t> order) {
  detail::PartitionInput in = detail::prepare_partition(graph, stages, cost, order, "partition_uniform");
  const std::size_t k = in.stages;
  std::vector<std::size_t> boundaries(k + 1, 0);
  const std::size_t base = in.layers / k, extra = in.layers % k;
  for (std::size_t j = 0; j < k; ++j) boundaries[j + 1] = boundaries[j] + base + (j < extra ? 1 : 0);
  return detail::make_partition(graph, std::move(in), std::move(boundaries), "uniform");
}

[[nodiscard]] PPSCHED_OUTLINE Partition partition_by_params(const LayerGraph& graph, std::int32_t stages,
                                                   const PartitionCostModel& cost,
                                                   std::span<const std::size_t> order) {
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

[[nodiscard]] PPSCHED_OUTLINE Partition evaluate_partition(const LayerGraph& graph, std::span<const std::size_t> boundaries,
                                                  const PartitionCostModel& cost,
                                                  std::span<const std::size_t> order) {
  if (graph.empty()) detail::check_partition_shape(graph, 1, "evaluate_partition");
  detail::check_boundaries(graph, boundaries);
  detail::PartitionInput in = detail::prepare_partition(graph, boundaries.size() - 1, cost, order, "evaluate_partition");
  return detail::make_partition(graph, std::move(in), {boundaries.begin(), boundaries.end()}, "given");
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[noreturn]] PPSCHED_OUTLINE void fail_memory(const PartitionInput& in, std::string_view subject) {
  const SmallestCap need = smallest_uniform_cap(in);
  std::string caps;
  for (std::size_t j = 0; j < in.cap.size(); ++j) caps += detail::concat(j == 0 ? "" : ", ", bytes_text(in.cap[j]));
  detail::fail({std::string(subject),
        detail::concat("no split of ", in.layers, " layers into ", in.stages, " stages fits the devices' memory caps (",
               caps, ")"),
        "devices[].memory_bytes",
        detail::concat("the split needing the least memory needs ", bytes_text(need.bytes), " on its fullest stage (stage ",
               need.stage, "): give every device at least that much, or lower optimizer_state_factor or the "
               "in-flight counts, or use more stages")});
}

}  // namespace detail
}  // namespace ppsched
