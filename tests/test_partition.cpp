// The partitioner: exactness against brute force and an independent dynamic programme on
// random instances (chains and DAGs; speeds, memory caps, cut costs), hand-worked cost
// examples, the compile-time splitter and type lists, the simple splits, and every rejection.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/partition/chain.hpp"
#include "ppsched/partition/cost_model.hpp"
#include "ppsched/partition/partition.hpp"
#include "ppsched/partition/static_partition.hpp"

using namespace ppsched;
using namespace ppsched::compile_time;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ppsched::error& e) {
    return e.what();
  }
  FAIL("expected a ppsched::error");
  return {};
}

Layer layer(const std::string& name, double forward, double param_bytes = 0, double activation_bytes = 0,
            double output_bytes = 0) {
  return Layer{name, forward, 0.0, 0.0, param_bytes, activation_bytes, output_bytes};
}

LayerGraph forward_chain(const std::vector<double>& forward) {
  std::vector<Layer> layers;
  for (std::size_t i = 0; i < forward.size(); ++i) layers.push_back(layer("l" + std::to_string(i), forward[i]));
  return LayerGraph::chain(layers);
}

// ------------------------------------------------------------------ the oracle
//
// The documented cost model written out again, independently of the library: running sums
// over the order, the tensors crossing each cut found from the edges, and every split tried.

struct Instance {
  LayerGraph graph;
  std::size_t stages = 1;
  PartitionCostModel cost;
  std::vector<std::size_t> order;  // empty: the graph's own
};

struct Oracle {
  std::size_t n = 0, k = 0;
  std::vector<double> P, Q, A, comm, speed, cap, inflight;
  double factor = 1.0;

  explicit Oracle(const Instance& in) {
    const LayerGraph& g = in.graph;
    n = g.size();
    k = in.stages;
    const std::vector<std::size_t> order = in.order.empty() ? g.topological_order() : in.order;
    std::vector<std::size_t> position(n);
    for (std::size_t p = 0; p < n; ++p) position[order[p]] = p;
    P.assign(n + 1, 0.0);
    Q.assign(n + 1, 0.0);
    A.assign(n + 1, 0.0);
    for (std::size_t p = 0; p < n; ++p) {
      const Layer& l = g.layers()[order[p]];
      P[p + 1] = P[p] + ((l.forward + l.backward_input) + l.backward_weight);
      Q[p + 1] = Q[p] + l.param_bytes;
      A[p + 1] = A[p] + l.activation_bytes;
    }
    comm.assign(n + 1, 0.0);
    for (std::size_t b = 1; b < n; ++b) {
      double sum = 0.0;
      for (std::size_t p = 0; p < b; ++p) {  // producers in order; each crossing tensor once
        bool crosses = false;
        for (const Edge& e : g.edges()) crosses = crosses || (e.from == order[p] && position[e.to] >= b);
        if (crosses) sum = sum + (in.cost.link.latency + g.layers()[order[p]].output_bytes / in.cost.link.bandwidth);
      }
      comm[b] = sum;
    }
    for (std::size_t j = 0; j < k; ++j) {
      const Device d = in.cost.devices.empty()       ? Device{}
                       : in.cost.devices.size() == 1 ? in.cost.devices[0]
                                                     : in.cost.devices[j];
      speed.push_back(d.speed);
      cap.push_back(d.memory_bytes);
      inflight.push_back(in.cost.inflight.empty() ? static_cast<double>(k - j) : in.cost.inflight[j]);
    }
    factor = in.cost.optimizer_state_factor;
  }

  [[nodiscard]] double time(std::size_t j, std::size_t a, std::size_t b) const {
    return ((P[b] - P[a]) / speed[j] + comm[a]) + comm[b];
  }
  [[nodiscard]] double memory(std::size_t j, std::size_t a, std::size_t b) const {
    return factor * (Q[b] - Q[a]) + inflight[j] * (A[b] - A[a]);
  }

  struct Best {
    bool feasible = false;
    double bottleneck = inf;
    std::vector<std::size_t> boundaries;
    double least_memory = inf;  // over all splits, the smallest fullest-stage memory
  };

  // Every split; among the optimal ones, the documented tie rule: the last cut as late as
  // possible, then the one before it, and so on.
  [[nodiscard]] Best brute_force() const {
    Best best;
    std::vector<std::size_t> b(k + 1, 0);
    b[k] = n;
    std::vector<std::size_t> cuts(k - 1);
    std::iota(cuts.begin(), cuts.end(), std::size_t{1});
    while (true) {
      std::copy(cuts.begin(), cuts.end(), b.begin() + 1);
      double worst = 0.0, fullest = 0.0;
      bool fits = true;
      for (std::size_t j = 0; j < k; ++j) {
        worst = std::max(worst, time(j, b[j], b[j + 1]));
        fullest = std::max(fullest, memory(j, b[j], b[j + 1]));
        fits = fits && memory(j, b[j], b[j + 1]) <= cap[j];
      }
      best.least_memory = std::min(best.least_memory, fullest);
      if (fits) {
        bool better = worst < best.bottleneck;
        if (worst == best.bottleneck) {
          for (std::size_t j = k; j-- > 0;) {
            if (b[j] != best.boundaries[j]) {
              better = b[j] > best.boundaries[j];
              break;
            }
          }
        }
        if (better) {
          best.feasible = true;
          best.bottleneck = worst;
          best.boundaries = b;
        }
      }
      std::size_t i = cuts.size();
      while (i > 0 && cuts[i - 1] == n - (cuts.size() - (i - 1))) --i;
      if (i == 0) break;
      ++cuts[i - 1];
      for (std::size_t t = i; t < cuts.size(); ++t) cuts[t] = cuts[t - 1] + 1;
    }
    return best;
  }

  // The optimum by dynamic programming over (stage, cut): O(k n^2), for instances too big to
  // enumerate.
  [[nodiscard]] double dynamic_programme() const {
    std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, inf));
    best[0][0] = 0.0;
    for (std::size_t j = 0; j < k; ++j) {
      for (std::size_t a = j; a < n; ++a) {
        if (best[j][a] == inf) continue;
        for (std::size_t b = a + 1; b <= n; ++b) {
          if (memory(j, a, b) > cap[j]) break;  // memory only grows with b
          best[j + 1][b] = std::min(best[j + 1][b], std::max(best[j][a], time(j, a, b)));
        }
      }
    }
    return best[k][n];
  }
};

// ------------------------------------------------------------------ random instances

enum class Costs { integers, floats, heavy_ends, log_uniform };

struct Generator {
  std::mt19937_64 rng;
  explicit Generator(std::uint64_t seed) : rng(seed) {}

  std::size_t below(std::size_t n) { return static_cast<std::size_t>(rng() % n); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
  bool coin(double p = 0.5) { return uniform(0.0, 1.0) < p; }

  double cost(Costs kind, bool heavy) {
    switch (kind) {
      case Costs::integers: return static_cast<double>(below(4));  // zeros and ties
      case Costs::floats: return uniform(0.0, 1.0);
      case Costs::heavy_ends: return heavy ? uniform(10.0, 50.0) : static_cast<double>(below(3));
      case Costs::log_uniform: return coin(0.1) ? 0.0 : std::exp(uniform(-6.0, 3.0));
    }
    return 0.0;
  }

  // n layers; skip edges; sometimes renumbered (so the default order is Kahn's), sometimes
  // cut by a different valid order given by the caller.
  Instance instance(std::size_t n, std::size_t k, Costs kind, bool dag, bool speeds, bool caps, bool cuts) {
    std::vector<Layer> logical(n);
    for (std::size_t i = 0; i < n; ++i) {
      const bool heavy = i == 0 || i + 1 == n;  // an embedding and an LM head
      logical[i] = Layer{"L" + std::to_string(i), cost(kind, heavy), cost(kind, heavy) * 0.5, cost(kind, heavy),
                         static_cast<double>(below(5)), static_cast<double>(below(4)), static_cast<double>(below(4))};
    }
    std::vector<Edge> logical_edges;
    for (std::size_t i = 0; i + 1 < n; ++i) {
      if (!dag || !coin(0.1)) logical_edges.push_back({i, i + 1});
    }
    if (dag && n > 2) {
      for (std::size_t e = below(4); e-- > 0;) {
        const std::size_t from = below(n - 2);
        logical_edges.push_back({from, from + 2 + below(n - from - 2)});
      }
    }
    std::vector<std::size_t> label(n);  // logical position -> layer index
    std::iota(label.begin(), label.end(), std::size_t{0});
    if (dag && coin(0.5)) std::shuffle(label.begin(), label.end(), rng);
    std::vector<Layer> layers(n);
    for (std::size_t i = 0; i < n; ++i) layers[label[i]] = logical[i];
    std::vector<Edge> edges;
    for (const Edge& e : logical_edges) edges.push_back({label[e.from], label[e.to]});
    Instance in;
    in.graph = LayerGraph(layers, edges);
    in.stages = k;
    if (dag && coin(0.3)) in.order = label;  // the logical order is topological too
    if (speeds) {
      const std::size_t count = coin(0.2) ? 1 : k;
      for (std::size_t j = 0; j < count; ++j) {
        const double pick[] = {1.0, 0.5, 2.0, uniform(0.25, 4.0)};
        in.cost.devices.push_back(Device{pick[below(4)], inf});
      }
    }
    if (caps) {
      in.cost.optimizer_state_factor = std::array{1.0, 2.0, 0.5}[below(3)];
      if (coin(0.5)) {
        for (std::size_t j = 0; j < k; ++j) in.cost.inflight.push_back(static_cast<double>(below(5)) * 0.5);
      }
      double total = 0.0;
      for (const Layer& l : layers) total += in.cost.optimizer_state_factor * l.param_bytes + 2.0 * l.activation_bytes;
      if (in.cost.devices.empty()) in.cost.devices.assign(k, Device{});
      if (in.cost.devices.size() == 1) in.cost.devices.assign(k, in.cost.devices[0]);
      for (Device& d : in.cost.devices) d.memory_bytes = std::floor(uniform(0.3, 1.5) * total / static_cast<double>(k) + 1.0);
    }
    if (cuts) {
      const double latency[] = {0.0, 0.25, uniform(0.0, 1.0)};
      const double bandwidth[] = {inf, 2.0, 8.0, uniform(0.5, 10.0)};
      in.cost.link = Interconnect{latency[below(3)], bandwidth[below(4)]};
      if (in.cost.link.latency == 0.0 && in.cost.link.bandwidth == inf) in.cost.link.latency = 0.5;
    }
    return in;
  }
};

std::string describe(const Instance& in) {
  std::ostringstream out;
  out.precision(17);
  out << in.graph.size() << " layers, " << in.stages << " stages; compute:";
  for (const Layer& l : in.graph.layers()) out << ' ' << l.compute();
  out << "; edges:";
  for (const Edge& e : in.graph.edges()) out << ' ' << e.from << "->" << e.to;
  out << "; speeds/caps:";
  for (const Device& d : in.cost.devices) out << ' ' << d.speed << '/' << d.memory_bytes;
  out << "; link " << in.cost.link.latency << ' ' << in.cost.link.bandwidth << "; factor "
      << in.cost.optimizer_state_factor << "; order given: " << !in.order.empty();
  return out.str();
}

std::string boundaries_text(const std::vector<std::size_t>& b) {
  std::string s;
  for (const std::size_t x : b) s += std::to_string(x) + ' ';
  return s;
}

}  // namespace

// ------------------------------------------------------------------ exactness

TEST_CASE("the optimum equals brute force on 12,000 random small instances, tie rule included", "[partition][exact]") {
  Generator gen(20240611);
  std::size_t infeasible = 0, non_uniform_cuts = 0, heterogeneous = 0, mismatches = 0;
  std::array<std::size_t, 4> per_kind{};
  for (int it = 0; it < 12000; ++it) {
    const std::size_t n = 1 + gen.below(9), k = 1 + gen.below(std::min<std::size_t>(n, 6));
    const auto kind = static_cast<Costs>(it % 4);
    const Instance in = gen.instance(n, k, kind, gen.coin(0.4), gen.coin(0.5), gen.coin(0.5), gen.coin(0.5));
    const Oracle oracle(in);
    const Oracle::Best best = oracle.brute_force();
    ++per_kind[static_cast<std::size_t>(kind)];
    for (std::size_t b = 2; b < n; ++b) non_uniform_cuts += oracle.comm[b] != oracle.comm[1] ? 1 : 0;
    for (std::size_t j = 0; j < k; ++j) heterogeneous += oracle.speed[j] != oracle.speed[0] ? 1 : 0;
    if (!best.feasible) {
      ++infeasible;
      const std::string message = error_of([&] { (void)partition_optimal(in.graph, k, in.cost, in.order); });
      const detail::SmallestCap need =
          detail::smallest_uniform_cap(detail::prepare_partition(in.graph, k, in.cost, in.order, "test"));
      if (need.bytes != best.least_memory || message.find("no split of") == std::string::npos ||
          message.find(detail::concat("needs ", bytes_text(need.bytes), " on its")) == std::string::npos) {
        ++mismatches;
        FAIL_CHECK(describe(in) << "\nbrute force least memory " << best.least_memory << ", got " << need.bytes
                                << "\n" << message);
      }
      continue;
    }
    const Partition p = partition_optimal(in.graph, k, in.cost, in.order);
    bool same = p.bottleneck == best.bottleneck && p.boundaries == best.boundaries && p.fits_memory();
    for (std::size_t j = 0; j < k && same; ++j) {
      same = p.stages[j].time == oracle.time(j, p.boundaries[j], p.boundaries[j + 1]) &&
             p.stages[j].peak_bytes == oracle.memory(j, p.boundaries[j], p.boundaries[j + 1]);
    }
    if (!same) {
      ++mismatches;
      FAIL_CHECK(describe(in) << "\nbrute force " << best.bottleneck << " at " << boundaries_text(best.boundaries)
                              << "\npartition  " << p.bottleneck << " at " << boundaries_text(p.boundaries));
    }
    if (mismatches > 20) break;
  }
  CHECK(mismatches == 0);
  // The instances covered what they were meant to.
  CHECK(infeasible > 200);
  CHECK(non_uniform_cuts > 1000);
  CHECK(heterogeneous > 1000);
  for (const std::size_t count : per_kind) CHECK(count >= 2900);
}

TEST_CASE("the optimum equals an independent dynamic programme on larger random instances", "[partition][exact]") {
  Generator gen(77);
  std::size_t mismatches = 0, feasible = 0;
  for (int it = 0; it < 400; ++it) {
    const std::size_t n = 20 + gen.below(100), k = 2 + gen.below(15);
    const Instance in = gen.instance(n, k, static_cast<Costs>(it % 4), gen.coin(0.4), gen.coin(0.5), gen.coin(0.5),
                                     gen.coin(0.5));
    const Oracle oracle(in);
    const double optimum = oracle.dynamic_programme();
    if (optimum == inf) {
      if (error_of([&] { (void)partition_optimal(in.graph, k, in.cost, in.order); }).find("no split of") ==
          std::string::npos) {
        ++mismatches;
      }
      continue;
    }
    ++feasible;
    const Partition p = partition_optimal(in.graph, k, in.cost, in.order);
    double worst = 0.0;
    for (std::size_t j = 0; j < k; ++j) worst = std::max(worst, oracle.time(j, p.boundaries[j], p.boundaries[j + 1]));
    if (p.bottleneck != optimum || worst != optimum || !p.fits_memory()) {
      ++mismatches;
      FAIL_CHECK(describe(in) << "\ndynamic programme " << optimum << ", partition " << p.bottleneck);
    }
  }
  CHECK(mismatches == 0);
  CHECK(feasible > 200);
}

TEST_CASE("a slow device that cannot take a heavy layer: the greedy split fails, the exact one does not",
          "[partition][exact]") {
  // Filling stage 0 (speed 1) with two layers leaves the heavy layer to stage 1 (speed 1),
  // which needs 10 > 1.1. The optimum gives it to the fast device: 1 | 1 | 10 1 at 11 / 10.
  const LayerGraph g = forward_chain({1, 1, 10, 1});
  PartitionCostModel cost;
  cost.devices = {{1.0, inf}, {1.0, inf}, {10.0, inf}};
  const Partition p = partition_optimal(g, 3, cost);
  CHECK(p.boundaries == std::vector<std::size_t>{0, 1, 2, 4});
  CHECK(p.bottleneck == 11.0 / 10.0);
  const Partition uniform = partition_uniform(g, 3, cost);
  CHECK(uniform.boundaries == std::vector<std::size_t>{0, 2, 3, 4});
  CHECK(uniform.bottleneck == 10.0);
}

// ------------------------------------------------------------------ the cost model by hand

TEST_CASE("cut costs: a skip connection is paid at every cut it spans, once per tensor", "[partition][cost]") {
  // a -> b -> c -> d, plus a -> c and a -> d. Transfers cost 1 + bytes / 100: a's output 2,
  // b's 3, c's 4. Cut 1: a's tensor (read by b, c, d) = 2. Cut 2: a's and b's = 5. Cut 3: a's
  // and c's = 6.
  GraphBuilder builder;
  builder.then(layer("a", 1, 0, 0, 100));
  builder.then(layer("b", 2, 0, 0, 200));
  builder.then(layer("c", 3, 0, 0, 300));
  builder.then(layer("d", 4, 0, 0, 400));
  builder.connect(0, 2).connect(0, 3);
  const LayerGraph g = builder.build();
  PartitionCostModel cost;
  cost.link = {1.0, 100.0};

  const Partition all = evaluate_partition(g, std::vector<std::size_t>{0, 1, 2, 3, 4}, cost);
  const std::vector<std::array<double, 3>> expected = {{0, 2, 3}, {2, 5, 9}, {5, 6, 14}, {6, 0, 10}};  // recv, send, time
  for (std::size_t j = 0; j < 4; ++j) {
    CHECK(all.stages[j].recv_time == expected[j][0]);
    CHECK(all.stages[j].send_time == expected[j][1]);
    CHECK(all.stages[j].time == expected[j][2]);
  }
  // The bytes a simulator charges per micro-batch: 100, then 100 + 200, then 100 + 300.
  const std::vector<double> cut_bytes = {0, 100, 300, 400, 0};
  for (std::size_t j = 0; j < 4; ++j) {
    CHECK(all.stages[j].recv_bytes == cut_bytes[j]);
    CHECK(all.stages[j].send_bytes == cut_bytes[j + 1]);
  }
  CHECK(all.bottleneck == 14.0);
  CHECK(all.bottleneck_stage == 2);
  CHECK(all.mean_time == 9.0);
  CHECK(all.imbalance == 14.0 / 9.0);

  // Two stages: a | b c d costs max(1 + 2, 9 + 2) = 11; a b | c d costs 12; a b c | d costs 12.
  const Partition best = partition_optimal(g, 2, cost);
  CHECK(best.boundaries == std::vector<std::size_t>{0, 1, 4});
  CHECK(best.bottleneck == 11.0);
  CHECK(evaluate_partition(g, std::vector<std::size_t>{0, 2, 4}, cost).bottleneck == 12.0);
}

TEST_CASE("stage times are divided by the device speed, per pass", "[partition][cost]") {
  const LayerGraph g = LayerGraph::chain({Layer{"x", 2, 4, 6, 0, 0, 0}, Layer{"y", 1, 1, 1, 0, 0, 0}});
  PartitionCostModel cost;
  cost.devices = {{2.0, inf}, {0.5, inf}};
  const Partition p = evaluate_partition(g, std::vector<std::size_t>{0, 1, 2}, cost);
  CHECK(p.stages[0].forward == 1.0);
  CHECK(p.stages[0].backward_input == 2.0);
  CHECK(p.stages[0].backward_weight == 3.0);
  CHECK(p.stages[0].compute_time == 6.0);
  CHECK(p.stages[1].forward == 2.0);
  CHECK(p.stages[1].compute_time == 6.0);
  CHECK(p.stages[1].speed == 0.5);
  CHECK(p.stages[0].first_layer_name == "x");
  CHECK(p.layers_of(1) == std::vector<std::size_t>{1});
}

TEST_CASE("memory: parameters times the optimizer factor plus activations times the in-flight count",
          "[partition][memory]") {
  // params 4 1 1 4, activations 1 each, factor 2, 1F1B in flight {2, 1}:
  //   0|1..3: 2*4 + 2*1 = 10 and 2*6 + 1*3 = 15
  //   0..1|2..3: 2*5 + 2*2 = 14 and 2*5 + 1*2 = 12
  //   0..2|3: 2*6 + 2*3 = 18 and 2*4 + 1*1 = 9
  const LayerGraph g = LayerGraph::chain({layer("a", 1, 4, 1), layer("b", 1, 1, 1), layer("c", 1, 1, 1), layer("d", 1, 4, 1)});
  PartitionCostModel cost;
  cost.optimizer_state_factor = 2.0;
  const Partition free = evaluate_partition(g, std::vector<std::size_t>{0, 2, 4}, cost);
  CHECK(free.stages[0].peak_bytes == 14.0);
  CHECK(free.stages[1].peak_bytes == 12.0);
  CHECK(free.stages[0].in_flight == 2.0);
  CHECK(free.stages[0].static_bytes == 10.0);  // the parameters' share of peak_bytes
  CHECK(free.stages[1].rank == 1);
  CHECK(free.stages[0].param_bytes == 5.0);
  CHECK(free.stages[1].activation_bytes == 2.0);

  cost.devices = {{1.0, 10.0}, {1.0, 15.0}};  // only 0|1..3 fits
  const Partition tight = partition_optimal(g, 2, cost);
  CHECK(tight.boundaries == std::vector<std::size_t>{0, 1, 4});
  CHECK(tight.bottleneck == 3.0);
  CHECK(tight.fits_memory());

  cost.devices = {{1.0, 13.0}};  // the least-memory split needs 14 on stage 0
  const std::string message = error_of([&] { (void)partition_optimal(g, 2, cost); });
  INFO(message);
  CHECK_THAT(message, Catch::Contains("no split of 4 layers into 2 stages fits the devices' memory caps"));
  CHECK_THAT(message, Catch::Contains("memory caps (13 B, 13 B)"));
  CHECK_THAT(message, Catch::Contains("needs 14 B on its fullest stage (stage 0)"));

  cost.inflight = {1.0, 1.0};  // GPipe-like counts change the arithmetic: 0..1|2..3 needs 12 and 12
  cost.devices = {{1.0, 12.0}};
  CHECK(partition_optimal(g, 2, cost).boundaries == std::vector<std::size_t>{0, 2, 4});
  CHECK(inflight_1f1b(3) == std::vector<double>{3, 2, 1});
  CHECK(inflight_1f1b(4, 2) == std::vector<double>{2, 2, 2, 1});
  CHECK(inflight_gpipe(2, 8) == std::vector<double>{8, 8});

  const Partition over = evaluate_partition(g, std::vector<std::size_t>{0, 3, 4}, cost);
  CHECK_FALSE(over.stages[0].fits_memory());
  CHECK_FALSE(over.fits_memory());
  CHECK_THAT(to_string(over), Catch::Contains("OVER CAP"));
}

TEST_CASE("a stage ending where a cut lets go of its last layer's boundary_bytes holds that much less", "[partition][memory]") {
  // Activations 10 20 30 40; b keeps 5 of them only for c, d 7 (the model's last: no cut follows
  // it). Of weight_bytes 12 22 32 42, a cut after b lets 3 go, after d (none follows) 4.
  std::vector<Layer> layers{layer("a", 1, 1, 10), layer("b", 1, 1, 20), layer("c", 1, 1, 30), layer("d", 1, 1, 40)};
  for (std::size_t i = 0; i < layers.size(); ++i) layers[i].weight_bytes = 12.0 + 10.0 * static_cast<double>(i);
  const std::vector<Layer> plain = layers;
  layers[1].boundary_bytes = 5.0;
  layers[3].boundary_bytes = 7.0;
  layers[1].boundary_weight_bytes = 3.0;
  layers[3].boundary_weight_bytes = 4.0;
  const LayerGraph g = LayerGraph::chain(layers), without = LayerGraph::chain(plain);
  PartitionCostModel cost;
  cost.optimizer_state_factor = 2.0;
  cost.inflight = {2.0, 1.0};
  // The cut right after b: stage 0 holds 10 + 20 - 5; stage 1 runs to the model's end.
  const Partition at_b = evaluate_partition(g, std::vector<std::size_t>{0, 2, 4}, cost);
  CHECK(at_b.stages[0].activation_bytes == 25.0);
  CHECK(at_b.stages[0].weight_bytes == std::optional<double>(31.0));
  CHECK(at_b.stages[1].activation_bytes == 70.0);
  CHECK(at_b.stages[1].weight_bytes == std::optional<double>(74.0));
  // The memory cap's figure keeps the plain sum (an over-estimate by the term, never under).
  CHECK(at_b.stages[0].peak_bytes == 2.0 * 2.0 + 2.0 * 30.0);
  // Elsewhere the term changes nothing: the cuts after a and after c end in layers without it.
  for (const std::vector<std::size_t>& boundaries : {std::vector<std::size_t>{0, 1, 4}, std::vector<std::size_t>{0, 3, 4}}) {
    INFO("cut at " << boundaries[1]);
    CHECK(evaluate_partition(g, boundaries, cost).stages == evaluate_partition(without, boundaries, cost).stages);
  }
  CHECK(evaluate_partition(g, std::vector<std::size_t>{0, 4}).stages[0].activation_bytes == 100.0);
  // Without the field every stage holds its layers' sum, as it always has; the solver's cut is
  // the same with and without it (its check keeps the plain sum).
  const Partition plain_at_b = evaluate_partition(without, std::vector<std::size_t>{0, 2, 4}, cost);
  CHECK(plain_at_b.stages[0].activation_bytes == 30.0);
  CHECK(plain_at_b.stages[0].weight_bytes == std::optional<double>(34.0));
  cost.devices = {{1.0, 74.0}};  // only the cut after b fits: 2 * 2 + 2 * 30 and 2 * 2 + 70
  CHECK(partition_optimal(g, 2, cost).boundaries == std::vector<std::size_t>{0, 2, 4});
  CHECK(partition_optimal(without, 2, cost).boundaries == std::vector<std::size_t>{0, 2, 4});
}

TEST_CASE("the documentation's example", "[partition][docs]") {
  // example-begin partition
  ppsched::GraphBuilder model;
  model.then({"embed", 3.0, 3.0, 0.5, 2e8, 4e6, 4e6});  // name, F, BI, BW, params, activations, output
  for (int i = 0; i < 6; ++i) {
    model.then({"block" + std::to_string(i), 1.0, 1.0, 1.0, 5e7, 4e6, 4e6});
  }
  model.then({"head", 3.0, 3.0, 0.5, 2e8, 4e6, 0.0});

  ppsched::PartitionCostModel cost;
  cost.devices = {{1.0, 2e9}};               // four identical devices, 2 GB each
  cost.link = {0.01, 4e8};                   // 10 us + bytes / (400 MB per ms): times in ms
  cost.optimizer_state_factor = 8.0;         // mixed-precision Adam: 16 bytes per 2-byte parameter
  const ppsched::Partition best = ppsched::partition_optimal(model.build(), 4, cost);
  const std::string table = ppsched::to_string(best);  // one row per stage
  // example-end partition

  // Embed and head (6.5 each) are heavier than two blocks (6), so any stage that adds a
  // block to them costs 9.5 + a cut; alone they leave 6 blocks for 2 stages: 3 each, 9 + two
  // cuts. Every cut carries one 4 MB tensor: 0.01 + 4e6 / 4e8.
  const double cut = 0.01 + 4e6 / 4e8;
  CHECK(best.boundaries == std::vector<std::size_t>{0, 1, 4, 7, 8});
  CHECK(best.bottleneck == (9.0 + cut) + cut);
  CHECK(best.bottleneck_stage == 1);
  CHECK(best.stages[0].time == 6.5 + cut);
  // Stage 0 keeps 4 micro-batches (1F1B): 8 * 2e8 + 4 * 4e6; stage 1: 8 * 1.5e8 + 3 * 1.2e7.
  CHECK(best.stages[0].peak_bytes == 8.0 * 2e8 + 4.0 * 4e6);
  CHECK(best.stages[1].peak_bytes == 8.0 * 1.5e8 + 3.0 * 1.2e7);
  CHECK(best.fits_memory());
  CHECK(best.stages[0].send_bytes == 4e6);
  CHECK(best.stages[3].send_bytes == 0.0);
  CHECK(best.stages[3].recv_bytes == 4e6);
  CHECK_THAT(table, Catch::Contains("block0 .. block2"));
}

// ------------------------------------------------------------------ simple splits

TEST_CASE("uniform splits give the first stages the extra layers", "[partition][simple]") {
  const LayerGraph g = forward_chain(std::vector<double>(10, 1.0));
  CHECK(partition_uniform(g, 4).boundaries == std::vector<std::size_t>{0, 3, 6, 8, 10});
  CHECK(partition_uniform(g, 5).boundaries == std::vector<std::size_t>{0, 2, 4, 6, 8, 10});
  CHECK(partition_uniform(g, 10).boundaries == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  CHECK(partition_uniform(g, 4).method == "uniform");
}

TEST_CASE("by-parameter splits balance parameter bytes exactly, then are priced by time", "[partition][simple]") {
  // params 4 1 1 4: 0..1 | 2..3 holds 5 and 5; time is priced on forward 1 8 1 1.
  const LayerGraph g = LayerGraph::chain({layer("a", 1, 4), layer("b", 8, 1), layer("c", 1, 1), layer("d", 1, 4)});
  const Partition p = partition_by_params(g, 2);
  CHECK(p.boundaries == std::vector<std::size_t>{0, 2, 4});
  CHECK(p.stages[0].param_bytes == 5.0);
  CHECK(p.bottleneck == 9.0);
  CHECK(p.method == "by-params");
  // By time the same split is optimal here: 1 8 | 1 1 at 9; the other two splits cost 10.
  CHECK(partition_optimal(g, 2).boundaries == p.boundaries);
}

TEST_CASE("a manual split is priced exactly like the optimum, and never beats it", "[partition][simple]") {
  Generator gen(5);
  for (int it = 0; it < 200; ++it) {
    const Instance in = gen.instance(12, 4, Costs::floats, true, true, false, true);
    const Partition best = partition_optimal(in.graph, 4, in.cost, in.order);
    const Partition again = evaluate_partition(in.graph, best.boundaries, in.cost, in.order);
    CHECK(again.bottleneck == best.bottleneck);
    CHECK(again.stages == best.stages);
    CHECK(partition_uniform(in.graph, 4, in.cost, in.order).bottleneck >= best.bottleneck);
    CHECK(partition_by_params(in.graph, 4, in.cost, in.order).bottleneck >= best.bottleneck);
  }
}

TEST_CASE("a large chain: the optimum sits between the classic bounds", "[partition][exact]") {
  // max(total / k, largest layer) <= optimum <= total / k + largest layer (greedy overshoots
  // the mean by less than one layer).
  std::mt19937_64 rng(3);
  std::vector<double> costs(100000);
  for (double& c : costs) c = std::uniform_real_distribution<double>(0.5, 1.5)(rng);
  const double total = std::accumulate(costs.begin(), costs.end(), 0.0);
  const double largest = *std::max_element(costs.begin(), costs.end());
  for (const std::size_t k : {8U, 64U, 1024U}) {
    const ChainSplit s = partition_chain(costs, k);
    const double mean = total / static_cast<double>(k);
    CHECK(s.bottleneck >= std::max(mean, largest) * (1 - 1e-9));
    CHECK(s.bottleneck <= (mean + largest) * (1 + 1e-9));
    REQUIRE(s.boundaries.size() == k + 1);
    CHECK(std::adjacent_find(s.boundaries.begin(), s.boundaries.end(), std::greater_equal<>()) == s.boundaries.end());
  }
}

// ------------------------------------------------------------------ compile time

namespace {

struct Embed {
  static constexpr double cost = 4.0;
};
struct Block {
  static constexpr double forward = 1.0, backward_input = 1.0, backward_weight = 1.0;
};
struct Head {
  static constexpr double cost = 5.0;
};

// 4 3 3 3 5 into 3: stage 0 alone (4) leaves 3 3 3 5 for two stages (>= 8), so 4 3 | 3 3 | 5
// at 7 is optimal, and no other split reaches 7.
using Split = static_partition<3, layer_list<Embed, Block, Block, Block, Head>>;

}  // namespace

// 3 1 1 1 into 2: 3 | 1 1 1 at 3 beats 3 1 | 1 1 at 4.
static_assert(partition_chain<2>(std::array{3.0, 1.0, 1.0, 1.0}).boundaries == std::array<std::size_t, 3>{0, 1, 4});
static_assert(partition_chain<2>(std::array{3.0, 1.0, 1.0, 1.0}).bottleneck == 3.0);
// 1 2 3 4 5 into 3: 1 2 3 | 4 | 5 at 6; a first stage of 1 2 leaves 3 4 5 for two stages (>= 7).
static_assert(partition_chain<3>(std::array{1.0, 2.0, 3.0, 4.0, 5.0}).boundaries ==
              std::array<std::size_t, 4>{0, 3, 4, 5});
// 2 0 0 2 into 2: three splits reach 2; the tie rule puts the last cut as late as possible.
static_assert(partition_chain<2>(std::array{2.0, 0.0, 0.0, 2.0}).boundaries == std::array<std::size_t, 3>{0, 3, 4});
static_assert(partition_chain<1>(std::array{2.5}).bottleneck == 2.5);

static_assert(static_layer_cost_v<Block> == 3.0);
static_assert(StaticLayer<Embed> && StaticLayer<Block> && !StaticLayer<int>);
static_assert(Split::bottleneck == 7.0);
static_assert(Split::boundaries == std::array<std::size_t, 4>{0, 2, 4, 5});
static_assert(std::is_same_v<Split::stages,
                             stage_list<layer_list<Embed, Block>, layer_list<Block, Block>, layer_list<Head>>>);
static_assert(std::is_same_v<stage_t<Split, 2>, layer_list<Head>>);
static_assert(std::is_same_v<rebind_t<std::tuple, stage_t<Split, 0>>, std::tuple<Embed, Block>>);
static_assert(Split::stages::size == 3);

TEST_CASE("a compile-time split is the run-time split", "[partition][constexpr]") {
  const ChainSplit run_time = partition_chain(std::vector<double>{4, 3, 3, 3, 5}, 3);
  CHECK(run_time.boundaries == std::vector<std::size_t>(Split::boundaries.begin(), Split::boundaries.end()));
  CHECK(run_time.bottleneck == Split::bottleneck);
  // A stage as a tuple of layer objects: no run-time dispatch to reach them.
  using Stage1 = rebind_t<std::tuple, stage_t<Split, 1>>;
  CHECK(std::tuple_size_v<Stage1> == 2);
  CHECK(std::is_default_constructible_v<Stage1>);
}

// ------------------------------------------------------------------ bad input

TEST_CASE("bad chains are rejected with the index and the fix", "[partition][errors]") {
  CHECK_THAT(error_of([] { (void)partition_chain(std::vector<double>{}, 1); }), Catch::Contains("no layers"));
  CHECK_THAT(error_of([] { (void)partition_chain(std::vector<double>{1, 2}, 0); }), Catch::Contains("0 stages"));
  CHECK_THAT(error_of([] { (void)partition_chain(std::vector<double>{1, 2}, -1); }), Catch::Contains("-1 stages"));
  CHECK_THAT(error_of([] { (void)partition_chain(std::vector<double>{1, 2}, 3); }),
             Catch::Contains("ask for at most 2 stages"));
  CHECK_THAT(error_of([] { (void)partition_chain(std::vector<double>{1, std::nan(""), 2}, 2); }),
             Catch::Contains("cost 1 is NaN (at costs[1])"));
  CHECK_THAT(error_of([] { (void)partition_chain(std::vector<double>{1, 2, -3}, 2); }),
             Catch::Contains("cost 2 is negative"));
  CHECK_THAT(error_of([] { (void)partition_chain(std::vector<double>{inf, 2}, 2); }),
             Catch::Contains("cost 0 is infinite"));
  CHECK_THAT(error_of([] { (void)partition_chain(std::vector<double>{1e308, 1e308}, 2); }),
             Catch::Contains("add up to more than the largest double"));
}

TEST_CASE("bad graphs, stage counts, cost models and orders are rejected", "[partition][errors]") {
  const LayerGraph g = forward_chain({1, 2, 3});
  const auto message = [&](PartitionCostModel cost, std::int32_t stages = 2, std::vector<std::size_t> order = {}) {
    return error_of([&] { (void)partition_optimal(g, stages, cost, order); });
  };
  CHECK_THAT(error_of([] { (void)partition_optimal(LayerGraph{}, 1); }), Catch::Contains("has no layers"));
  CHECK_THAT(message({}, 0), Catch::Contains("0 stages requested"));
  CHECK_THAT(error_of([&] { (void)partition_uniform(g, -2); }), Catch::Contains("-2 stages requested"));
  CHECK_THAT(error_of([] { (void)inflight_1f1b(-1); }), Catch::Contains("-1 stages"));
  CHECK_THAT(error_of([] { (void)inflight_gpipe(2, -3); }), Catch::Contains("-3 micro-batches"));
  CHECK_THAT(message({}, 4), Catch::Contains("4 stages requested for 3 layers"));
  CHECK_THAT(message({}, 4), Catch::Contains("ask for at most 3 stages"));

  PartitionCostModel c;
  c.devices.assign(3, Device{});
  CHECK_THAT(message(c), Catch::Contains("lists 3 devices for 2 stages"));
  for (const double speed : {0.0, -1.0, inf, std::nan("")}) {
    c.devices = {Device{speed, inf}};
    CHECK_THAT(message(c), Catch::Contains("(at devices[0].speed)"));
  }
  for (const double cap : {-1.0, std::nan("")}) {
    c.devices = {Device{1.0, cap}};
    CHECK_THAT(message(c), Catch::Contains("(at devices[0].memory_bytes)"));
  }
  c = {};
  for (const double latency : {-1.0, inf, std::nan("")}) {
    c.link = {latency, 1.0};
    CHECK_THAT(message(c), Catch::Contains("(at link.latency)"));
  }
  for (const double bandwidth : {0.0, -1.0, std::nan("")}) {
    c.link = {0.0, bandwidth};
    CHECK_THAT(message(c), Catch::Contains("(at link.bandwidth)"));
  }
  c = {};
  for (const double factor : {-1.0, inf, std::nan("")}) {
    c.optimizer_state_factor = factor;
    CHECK_THAT(message(c), Catch::Contains("(at optimizer_state_factor)"));
  }
  c = {};
  c.inflight = {1.0};
  CHECK_THAT(message(c), Catch::Contains("lists in-flight counts for 1 stages, but there are 2"));
  c.inflight = {1.0, -2.0};
  CHECK_THAT(message(c), Catch::Contains("(at inflight[1])"));
  CHECK_THAT(message({}, 2, {0, 2, 1}), Catch::Contains("before its input"));
  CHECK_THAT(message({}, 2, {0, 1}), Catch::Contains("lists 2 layers"));

  const LayerGraph huge = LayerGraph::chain({layer("a", 1e308), layer("b", 1e308)});
  CHECK_THAT(error_of([&] { (void)partition_optimal(huge, 2); }), Catch::Contains("compute times add up"));
  PartitionCostModel slow;
  slow.devices = {Device{1e-300, inf}};
  CHECK_THAT(error_of([&] { (void)partition_optimal(forward_chain({1e10, 1}), 2, slow); }),
             Catch::Contains("stage times"));
}

TEST_CASE("bad boundaries for evaluate_partition are rejected", "[partition][errors]") {
  const LayerGraph g = forward_chain({1, 2, 3});
  const auto message = [&](std::vector<std::size_t> b) { return error_of([&] { (void)evaluate_partition(g, b); }); };
  CHECK_THAT(message({0}), Catch::Contains("got 1 boundaries"));
  CHECK_THAT(message({1, 3}), Catch::Contains("the first boundary is 1, not 0"));
  CHECK_THAT(message({0, 2}), Catch::Contains("the last boundary is 2, not the layer count 3"));
  CHECK_THAT(message({0, 2, 2, 3}), Catch::Contains("stage 1 would be empty"));
  CHECK_THAT(message({0, 2, 1, 3}), Catch::Contains("(at boundaries[2])"));
  CHECK_THAT(error_of([] { (void)evaluate_partition(LayerGraph{}, std::vector<std::size_t>{0, 0}); }),
             Catch::Contains("no layers"));
}

// ------------------------------------------------------------------ printing

TEST_CASE("a partition prints as a table with one row per stage", "[partition][print]") {
  GraphBuilder b;
  b.then(layer("embed", 3));
  for (int i = 0; i < 4; ++i) b.then(layer("block" + std::to_string(i), 1));
  b.then(layer("head", 3));
  // 3 1 1 1 1 3 into 3: no split reaches 3 (3 | 1 1 1 | 1 3 ends at 4); at 4 the tie rule leaves
  // the head alone, then gives the middle stage as little as possible: 3 1 | 1 1 1 | 3.
  const Partition p = partition_optimal(b.build(), 3);
  const std::string table = to_string(p);
  INFO(table);
  CHECK_THAT(table, Catch::StartsWith("partition (optimal): 6 layers, 3 stages, bottleneck 4 at stage 0"));
  CHECK(std::count(table.begin(), table.end(), '\n') == 2 + 3);
  CHECK_THAT(table, Catch::Contains("embed .. block0"));
  CHECK_THAT(table, Catch::Contains("block1 .. block3"));
  CHECK_THAT(table, Catch::Contains("head"));
  CHECK_THAT(table, !Catch::Contains("OVER CAP"));
}

TEST_CASE("a stage's full backward sums its layers' measured B (BI + BW where none), / speed", "[partition][cost]") {
  Layer fused{"fused", 1, 3, 3, 0, 0, 0};
  fused.backward = 4.0;
  const Layer split{"split", 1, 1, 1, 0, 0, 0};
  const LayerGraph g = LayerGraph::chain({fused, split, split});
  PartitionCostModel cost;
  cost.devices = {{2.0, inf}, {1.0, inf}};
  const Partition p = evaluate_partition(g, std::vector<std::size_t>{0, 2, 3}, cost);
  REQUIRE(p.stages[0].backward.has_value());
  CHECK(*p.stages[0].backward == (4.0 + 2.0) / 2.0);
  CHECK_FALSE(p.stages[1].backward.has_value());  // no layer measured one: the stage's B stays BI + BW
}
