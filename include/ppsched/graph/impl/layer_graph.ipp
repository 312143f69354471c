// The bodies of <ppsched/graph/layer_graph.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include <functional>
#include <queue>

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::string layer_label(std::span<const Layer> layers, std::size_t i) {
  return detail::concat("layer ", i, " '", layers[i].name, "'");
}

[[nodiscard]] PPSCHED_OUTLINE std::string bad_value_problem(double x) {
  if (x != x) return "is NaN";
  if (x == std::numeric_limits<double>::infinity() || x == -std::numeric_limits<double>::infinity()) {
    return "is infinite";
  }
  return detail::concat("is negative (", x, ")");
}

PPSCHED_OUTLINE void check_layer_field(std::span<const Layer> layers, std::size_t i, const char* field, double value,
                              const std::string& subject) {
  if (finite_nonnegative(value)) return;
  detail::fail({subject, detail::concat("field '", field, "' of ", layer_label(layers, i), ' ', bad_value_problem(value)),
        detail::concat(layer_label(layers, i), " field '", field, "'"),
        "times and byte counts must be finite and >= 0 (use 0 for a cost a layer does not have)"});
}

PPSCHED_OUTLINE void check_boundary_bytes(std::span<const Layer> layers, std::size_t i, const std::string& at, const char* field,
                                 double boundary, const char* kept_field, double kept, const std::string& subject) {
  if (boundary <= kept) return;
  detail::fail({subject,
        detail::concat("field '", at, field, "' of ", layer_label(layers, i), " (", boundary, ") exceeds its ", kept_field, " (",
               kept, ")"),
        detail::concat(layer_label(layers, i), " field '", at, field, "'"),
        detail::concat("a cut lets go of part of what the layer keeps: give at most ", kept_field)});
}

PPSCHED_OUTLINE void check_boundary_weight_bytes(std::span<const Layer> layers, std::size_t i, const std::string& at, double boundary,
                                        const std::optional<double>& weight, const std::string& subject) {
  if (!weight) {
    detail::fail({subject, detail::concat(layer_label(layers, i), " has ", at, "boundary_weight_bytes without ", at, "weight_bytes"),
          detail::concat(layer_label(layers, i), " field '", at, "boundary_weight_bytes'"),
          "give weight_bytes too (what the layer keeps from BI to BW), or leave both out"});
  }
  check_boundary_bytes(layers, i, at, "boundary_weight_bytes", boundary, "weight_bytes", *weight, subject);
}

PPSCHED_OUTLINE void check_layers(std::span<const Layer> layers, const std::string& subject) {
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    check_layer_field(layers, i, "forward", l.forward, subject);
    check_layer_field(layers, i, "backward_input", l.backward_input, subject);
    check_layer_field(layers, i, "backward_weight", l.backward_weight, subject);
    check_layer_field(layers, i, "param_bytes", l.param_bytes, subject);
    check_layer_field(layers, i, "activation_bytes", l.activation_bytes, subject);
    check_layer_field(layers, i, "output_bytes", l.output_bytes, subject);
    if (l.backward) check_layer_field(layers, i, "backward", *l.backward, subject);
    if (l.weight_bytes) check_layer_field(layers, i, "weight_bytes", *l.weight_bytes, subject);
    if (l.boundary_bytes) {
      check_layer_field(layers, i, "boundary_bytes", *l.boundary_bytes, subject);
      check_boundary_bytes(layers, i, "", "boundary_bytes", *l.boundary_bytes, "activation_bytes", l.activation_bytes, subject);
    }
    if (l.boundary_weight_bytes) {
      check_layer_field(layers, i, "boundary_weight_bytes", *l.boundary_weight_bytes, subject);
      check_boundary_weight_bytes(layers, i, "", *l.boundary_weight_bytes, l.weight_bytes, subject);
    }
    for (std::size_t k = 0; k < l.points.size(); ++k) {
      const CostPoint& p = l.points[k];
      const std::string at = detail::concat("points[", k, "].");
      for (const auto& [field, value] : {std::pair{"rows", p.rows}, std::pair{"forward", p.forward},
                                         std::pair{"backward_input", p.backward_input},
                                         std::pair{"backward_weight", p.backward_weight},
                                         std::pair{"backward", p.backward.value_or(0.0)},
                                         std::pair{"activation_bytes", p.activation_bytes},
                                         std::pair{"output_bytes", p.output_bytes},
                                         std::pair{"weight_bytes", p.weight_bytes.value_or(0.0)},
                                         std::pair{"boundary_bytes", p.boundary_bytes.value_or(0.0)},
                                         std::pair{"boundary_weight_bytes", p.boundary_weight_bytes.value_or(0.0)},
                                         std::pair{"spread", p.spread}}) {
        check_layer_field(layers, i, (at + field).c_str(), value, subject);
      }
      if (!(p.rows > 0.0) || (k > 0 && !(p.rows > l.points[k - 1].rows))) {
        detail::fail({subject, detail::concat(layer_label(layers, i), " has a measured point at ", p.rows, " rows",
                              k > 0 ? detail::concat(" after one at ", l.points[k - 1].rows) : std::string()),
              detail::concat(layer_label(layers, i), " field '", at, "rows'"),
              "list the measured sizes in increasing order, each > 0 and measured once"});
      }
      if (p.backward.has_value() != l.points.front().backward.has_value()) {
        detail::fail({subject, detail::concat(layer_label(layers, i), " has a full backward at some measured sizes and not at others"),
              detail::concat(layer_label(layers, i), " field '", at, "backward'"),
              "measure the full backward at every size, or at none"});
      }
      if (p.weight_bytes.has_value() != l.points.front().weight_bytes.has_value()) {
        detail::fail({subject, detail::concat(layer_label(layers, i), " has weight_bytes at some measured sizes and not at others"),
              detail::concat(layer_label(layers, i), " field '", at, "weight_bytes'"), "measure them at every size, or at none"});
      }
      if (p.boundary_bytes.has_value() != l.points.front().boundary_bytes.has_value()) {
        detail::fail({subject, detail::concat(layer_label(layers, i), " has boundary_bytes at some measured sizes and not at others"),
              detail::concat(layer_label(layers, i), " field '", at, "boundary_bytes'"), "measure them at every size, or at none"});
      }
      if (p.boundary_bytes) {
        check_boundary_bytes(layers, i, at, "boundary_bytes", *p.boundary_bytes, "activation_bytes", p.activation_bytes, subject);
      }
      if (p.boundary_weight_bytes.has_value() != l.points.front().boundary_weight_bytes.has_value()) {
        detail::fail({subject, detail::concat(layer_label(layers, i), " has boundary_weight_bytes at some measured sizes and not at others"),
              detail::concat(layer_label(layers, i), " field '", at, "boundary_weight_bytes'"), "measure them at every size, or at none"});
      }
      if (p.boundary_weight_bytes) check_boundary_weight_bytes(layers, i, at, *p.boundary_weight_bytes, p.weight_bytes, subject);
    }
  }
}

[[nodiscard]] PPSCHED_OUTLINE std::vector<std::size_t> lowest_index_first_order(std::size_t layers,
                                                                       std::span<const Edge> edges) {
  const bool numbered_in_order =
      std::all_of(edges.begin(), edges.end(), [](const Edge& e) { return e.from < e.to; });
  std::vector<std::size_t> order;
  order.reserve(layers);
  if (numbered_in_order) {
    for (std::size_t i = 0; i < layers; ++i) order.push_back(i);
    return order;
  }
  std::vector<std::size_t> indegree(layers, 0), first_out(layers + 1, 0), targets(edges.size());
  for (const Edge& e : edges) {
    ++indegree[e.to];
    ++first_out[e.from + 1];
  }
  for (std::size_t i = 0; i < layers; ++i) first_out[i + 1] += first_out[i];
  std::vector<std::size_t> fill(first_out.begin(), first_out.end() - 1);
  for (const Edge& e : edges) targets[fill[e.from]++] = e.to;
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < layers; ++i) {
    if (indegree[i] == 0) ready.push(i);
  }
  while (!ready.empty()) {
    const std::size_t u = ready.top();
    ready.pop();
    order.push_back(u);
    for (std::size_t t = first_out[u]; t < first_out[u + 1]; ++t) {
      if (--indegree[targets[t]] == 0) ready.push(targets[t]);
    }
  }
  return order;
}

[[nodiscard]] PPSCHED_OUTLINE std::string describe_cycle(std::span<const Layer> layers, std::span<const Edge> edges,
                                                std::span<const std::size_t> placed_order) {
  std::vector<bool> placed(layers.size(), false);
  for (const std::size_t i : placed_order) placed[i] = true;
  std::vector<std::size_t> unplaced_predecessor(layers.size(), layers.size());
  for (const Edge& e : edges) {
    if (!placed[e.from] && !placed[e.to]) unplaced_predecessor[e.to] = e.from;
  }
  std::size_t start = 0;
  while (placed[start]) ++start;
  std::vector<std::size_t> seen_at(layers.size(), layers.size());
  std::vector<std::size_t> walk;
  std::size_t cur = start;
  while (seen_at[cur] == layers.size()) {
    seen_at[cur] = walk.size();
    walk.push_back(cur);
    cur = unplaced_predecessor[cur];
  }
  // walk[seen_at[cur]..] runs against the edges; print it along them.
  std::vector<std::size_t> cycle(walk.begin() + static_cast<std::ptrdiff_t>(seen_at[cur]), walk.end());
  std::reverse(cycle.begin(), cycle.end());
  std::string text;
  for (const std::size_t i : cycle) text += detail::concat(layer_label(layers, i), " -> ");
  return text + layer_label(layers, cycle.front());
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void check_topological_order(const LayerGraph& graph, std::span<const std::size_t> order) {
  const std::string subject = "topological order";
  const std::size_t n = graph.size();
  if (order.size() != n) {
    detail::fail({subject, detail::concat("lists ", order.size(), " layers, but the graph has ", n), "the order's length",
          "give every layer index exactly once"});
  }
  std::vector<std::size_t> position(n, n);
  for (std::size_t p = 0; p < n; ++p) {
    if (order[p] >= n) {
      detail::fail({subject, detail::concat("names layer ", order[p], ", but the graph has ", n, " layers"),
            detail::concat("position ", p), detail::concat("layer indices run from 0 to ", n, " - 1")});
    }
    if (position[order[p]] != n) {
      detail::fail({subject,
            detail::concat("lists ", detail::layer_label(graph.layers(), order[p]), " twice (positions ",
                           position[order[p]], " and ", p, ")"),
            detail::concat("position ", p), "give every layer index exactly once"});
    }
    position[order[p]] = p;
  }
  for (std::size_t e = 0; e < graph.edges().size(); ++e) {
    const Edge& edge = graph.edges()[e];
    if (position[edge.from] > position[edge.to]) {
      detail::fail({subject,
            detail::concat("puts ", detail::layer_label(graph.layers(), edge.to), " (position ", position[edge.to],
                           ") before its input ", detail::layer_label(graph.layers(), edge.from), " (position ",
                           position[edge.from], ")"),
            detail::concat("edge ", e), "every layer must come after the layers that feed it"});
    }
  }
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE void LayerGraph::validate() {
  const std::string subject = "layer graph";
  detail::check_layers(layers_, subject);
  for (std::size_t e = 0; e < edges_.size(); ++e) {
    const Edge& edge = edges_[e];
    if (edge.from >= layers_.size() || edge.to >= layers_.size()) {
      detail::fail({subject,
            detail::concat("edge ", e, " (", edge.from, " -> ", edge.to, ") names layer ",
                           edge.from >= layers_.size() ? edge.from : edge.to, ", but there are only ",
                           layers_.size(), " layers"),
            detail::concat("edge ", e), detail::concat("layer indices run from 0 to ", layers_.size(), " - 1")});
    }
    if (edge.from == edge.to) {
      detail::fail({subject, detail::concat("edge ", e, " feeds ", detail::layer_label(layers_, edge.from), " into itself"),
            detail::concat("edge ", e), "remove it: a layer cannot consume its own output"});
    }
  }
  order_ = detail::lowest_index_first_order(layers_.size(), edges_);
  if (order_.size() != layers_.size()) {
    detail::fail({subject, "the edges form a cycle: " + detail::describe_cycle(layers_, edges_, order_), "edges",
          "a layer graph must be acyclic; remove or reverse one edge on the cycle"});
  }
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE LayerGraph::LayerGraph(std::vector<Layer> layers)
    : layers_(std::move(layers)) {
  edges_.reserve(layers_.empty() ? 0 : layers_.size() - 1);
  for (std::size_t i = 1; i < layers_.size(); ++i) edges_.push_back({i - 1, i});
  validate();
}

PPSCHED_OUTLINE LayerGraph::LayerGraph(std::vector<Layer> layers, std::vector<Edge> edges)
    : layers_(std::move(layers)), edges_(std::move(edges)) {
  validate();
}

}  // namespace ppsched
