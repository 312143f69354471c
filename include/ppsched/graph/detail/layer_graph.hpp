// Internals of <ppsched/graph/layer_graph.hpp>: the graph's checks and its topological order.
// They are in ppsched::detail and not part of the API: no example or page uses them, and they may
// change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/graph/layer.hpp> holds.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/layer.hpp"
#include "ppsched/graph/rows.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] constexpr bool finite_nonnegative(double x) noexcept {
  return x >= 0.0 && x <= std::numeric_limits<double>::max();  // false for NaN and infinity
}

// "layer 3 'attn'": how every message points at a layer.
[[nodiscard]] PPSCHED_OUTLINE std::string layer_label(std::span<const Layer> layers, std::size_t i);

// Why a cost is rejected, in words: "is NaN", "is infinite", "is negative (-2)".
[[nodiscard]] PPSCHED_OUTLINE std::string bad_value_problem(double x);

PPSCHED_OUTLINE void check_layer_field(std::span<const Layer> layers, std::size_t i, const char* field, double value,
                              const std::string& subject);

// A cut lets go of part of what the layer keeps, never more: a stage's bytes stay >= 0.
PPSCHED_OUTLINE void check_boundary_bytes(std::span<const Layer> layers, std::size_t i, const std::string& at, const char* field,
                                 double boundary, const char* kept_field, double kept, const std::string& subject);

PPSCHED_OUTLINE void check_boundary_weight_bytes(std::span<const Layer> layers, std::size_t i, const std::string& at, double boundary,
                                        const std::optional<double>& weight, const std::string& subject);

PPSCHED_OUTLINE void check_layers(std::span<const Layer> layers, const std::string& subject);

// Kahn's algorithm taking the lowest-numbered ready layer first, so the order is unique and a
// graph already numbered in topological order keeps its numbering. Returns fewer than
// layers.size() entries when the edges contain a cycle.
[[nodiscard]] PPSCHED_OUTLINE std::vector<std::size_t> lowest_index_first_order(std::size_t layers,
                                                                       std::span<const Edge> edges);

// One cycle among the layers Kahn's algorithm could not place, as "a -> b -> ... -> a".
// Every such layer has a predecessor that is also unplaced, so walking predecessors from any
// of them must revisit a layer; the revisited stretch is a cycle.
[[nodiscard]] PPSCHED_OUTLINE std::string describe_cycle(std::span<const Layer> layers, std::span<const Edge> edges,
                                                std::span<const std::size_t> placed_order);

}  // namespace detail

}  // namespace ppsched
