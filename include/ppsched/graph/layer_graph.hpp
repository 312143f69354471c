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

namespace ppsched::inline PPSCHED_MODE {

struct Layer {
  std::string name;
  double forward = 0.0;           // time of the forward pass for one micro-batch
  double backward_input = 0.0;    // time of the backward pass for the input gradient (BI)
  double backward_weight = 0.0;   // time of the backward pass for the weight gradient (BW)
  double param_bytes = 0.0;       // parameters (scaled by the optimizer-state factor when partitioning)
  double activation_bytes = 0.0;  // kept per micro-batch from forward until backward frees it
  double output_bytes = 0.0;      // the tensor this layer hands to the layers it feeds
  // The full backward B (input and weight gradients in one pass), when it is measured: a
  // fused backward often costs less than BI + BW, and families that do not split the backward
  // (1F1B, GPipe, interleaved) run it. Absent, B costs BI + BW.
  std::optional<double> backward{};
  // Costs measured at several micro-batch sizes, in increasing rows; empty when only the
  // fields above were measured. The fields above are the costs at the profile's size
  // (Profile::rows); layer_at_rows prices any other size from these points.
  std::vector<CostPoint> points{};
  // A part of the layer worth recomputing (selective recomputation, issue 23): the activation
  // bytes it keeps from forward to backward, which recomputing it saves, and the time of
  // recomputing it. Both or neither; at most activation_bytes.
  std::optional<double> recompute_saves_bytes{};
  std::optional<double> recompute_time{};
  // Of activation_bytes, what a BI leaves for its BW (may exceed it: a BI that keeps the graph
  // and adds the gradients it captured), measured on a stage that computes its input gradient.
  // A stage whose layers all have it prices its own StageCost::weight_memory_fraction from
  // them; the first stage's input needs no gradient, so its BI leaves the whole backward to BW
  // on what F kept (1). Absent: the cost model's weight_memory_fraction.
  std::optional<double> weight_bytes{};
  // Of activation_bytes, the part of this layer's output that only the next layer keeps (a
  // transformer block's output, which the next block's layer norm saves): held while the next
  // layer runs in the same stage, and not at all where a cut falls right after this layer (the
  // next stage saves its input, which is the executor's buffer). A stage that ends at this
  // layer, before the model's last, keeps its layers' activation_bytes (and weight_bytes) less
  // this, per micro-batch. At most activation_bytes. Absent: 0, the per-layer sums as they are.
  std::optional<double> boundary_bytes{};
  // The same for weight_bytes: what such a stage keeps from BI to BW less than its layers'
  // weight_bytes sum. It may differ from boundary_bytes: a stage cut there keeps the output's
  // gradient for BW, which the layer's BW may not need when the next layer runs with it (a
  // transformer block, whose output comes from a sum: 0). At most weight_bytes, which it needs.
  std::optional<double> boundary_weight_bytes{};
  // The time of this layer's part of the optimizer step, once per step after the rank's last
  // action (StageFunctions::optimizer_step; profile_stages measures it): a stage pays its
  // layers' sum (PartitionStage::optimizer_step, CostModel::optimizer_step). It does not
  // depend on the micro-batch size. 0: none.
  double optimizer_step = 0.0;

  // The time of B as the families that do not split the backward pay it.
  [[nodiscard]] constexpr double full_backward() const noexcept {
    return backward ? *backward : backward_input + backward_weight;
  }

  // The time one micro-batch spends in this layer, summed in this fixed order so that every
  // part of ppsched adds the same three numbers the same way.
  [[nodiscard]] constexpr double compute() const noexcept { return (forward + backward_input) + backward_weight; }

  friend bool operator==(const Layer&, const Layer&) = default;
};

// `from`'s output is an input of `to` (indices into the graph's layers).
struct Edge {
  std::size_t from = 0;
  std::size_t to = 0;

  friend constexpr bool operator==(const Edge&, const Edge&) = default;
  friend constexpr auto operator<=>(const Edge&, const Edge&) = default;
};

}  // namespace ppsched

#include "ppsched/graph/detail/layer_graph.hpp"  // the internals below build on the types above

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
