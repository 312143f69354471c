// A layer with its profiled costs and an edge between two layers: what a LayerGraph
// (<ppsched/graph/layer_graph.hpp>, whose header comment describes it) is built of. They sit in
// a header of their own so that the internals in graph/detail/layer_graph.hpp build on them
// without including the public header back.
#pragma once

#include <compare>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "ppsched/config.hpp"
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
