// LayerGraph: a model as the partitioner sees it. Each layer carries its profiled costs
// (forward, backward-for-input and backward-for-weights time; parameter bytes, activation
// bytes kept per micro-batch for backward, output bytes), and edges say which layer's output
// feeds which layer. The edges form a DAG, so skip connections are allowed; a graph built
// without edges is a chain. A LayerGraph is validated when it is built — every cost finite
// and non-negative, every edge in range, no cycle — so everything downstream may trust it.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/rows.hpp"
#include "ppsched/graph/detail/layer_graph.hpp"
#include "ppsched/graph/layer.hpp"

namespace ppsched::inline PPSCHED_MODE {

class LayerGraph {
 public:
  LayerGraph() = default;

  // A chain: layer i feeds layer i + 1.
  explicit LayerGraph(std::vector<Layer> layers);

  // Exactly these edges (an empty list means the layers do not feed one another).
  LayerGraph(std::vector<Layer> layers, std::vector<Edge> edges);

  [[nodiscard]] static LayerGraph chain(std::vector<Layer> layers) { return LayerGraph(std::move(layers)); }

  [[nodiscard]] std::size_t size() const noexcept { return layers_.size(); }
  [[nodiscard]] bool empty() const noexcept { return layers_.empty(); }
  [[nodiscard]] const std::vector<Layer>& layers() const noexcept { return layers_; }
  [[nodiscard]] const Layer& layer(std::size_t i) const { return layers_.at(i); }
  [[nodiscard]] const std::vector<Edge>& edges() const noexcept { return edges_; }

  // The order the partitioner cuts by default: Kahn's algorithm, lowest-numbered ready layer
  // first (so a graph numbered in topological order keeps its numbering).
  [[nodiscard]] const std::vector<std::size_t>& topological_order() const noexcept { return order_; }

  // True when the edges are exactly 0 -> 1 -> ... -> n-1.
  [[nodiscard]] bool is_chain() const noexcept {
    if (edges_.size() + 1 != layers_.size() && !(layers_.empty() && edges_.empty())) return false;
    for (std::size_t i = 0; i < edges_.size(); ++i) {
      if (edges_[i].from != i || edges_[i].to != i + 1) return false;
    }
    return true;
  }

  friend bool operator==(const LayerGraph& a, const LayerGraph& b) {
    return a.layers_ == b.layers_ && a.edges_ == b.edges_;
  }

 private:
  void validate();  // the checks the class comment lists; throws ppsched::error

  std::vector<Layer> layers_;
  std::vector<Edge> edges_;
  std::vector<std::size_t> order_;
};

// Builds a graph one layer at a time. `add` starts a layer with no inputs; `then` adds a layer
// fed by the previous one (so a run of `then` calls is a chain); `connect` adds any other edge,
// such as a skip connection. `build` validates, as the LayerGraph constructor does.
class GraphBuilder {
 public:
  std::size_t add(Layer layer) {
    layers_.push_back(std::move(layer));
    return layers_.size() - 1;
  }
  std::size_t then(Layer layer) {
    const std::size_t i = add(std::move(layer));
    if (i > 0) edges_.push_back({i - 1, i});
    return i;
  }
  GraphBuilder& connect(std::size_t from, std::size_t to) {
    edges_.push_back({from, to});
    return *this;
  }
  [[nodiscard]] std::size_t size() const noexcept { return layers_.size(); }
  [[nodiscard]] LayerGraph build() const& { return LayerGraph(layers_, edges_); }
  [[nodiscard]] LayerGraph build() && { return LayerGraph(std::move(layers_), std::move(edges_)); }

 private:
  std::vector<Layer> layers_;
  std::vector<Edge> edges_;
};

namespace detail {

// Throws unless `order` lists every layer once and puts every edge's source before its target.
PPSCHED_OUTLINE void check_topological_order(const LayerGraph& graph, std::span<const std::size_t> order);

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/graph/impl/layer_graph.ipp"
#endif
