// The exact min-bottleneck splitter for a chain: cut n layers, in order, into k non-empty
// contiguous stages so that the slowest stage is as fast as possible. Stage j runs on device
// j, so speeds, memory caps and in-flight micro-batch counts may differ per stage; cutting
// between two layers may cost communication time. This is the engine behind every partition
// in ppsched (a DAG is cut as a chain over a topological order), and it runs in `constexpr`,
// so a model whose layer costs are known at compile time is split at compile time.
//
// The cost model, exactly (P, Q, A are running sums over the layers' compute time, parameter
// bytes and activation bytes; comm[b] is the time to move every tensor crossing cut b, with
// comm[0] = comm[n] = 0; all arithmetic is IEEE double in this order):
//   time(j, a, b)   = ((P[b] - P[a]) / speed[j] + comm[a]) + comm[b]
//   memory(j, a, b) = factor * (Q[b] - Q[a]) + inflight[j] * (A[b] - A[a])
// A split is feasible at bottleneck B when every stage has time <= B and memory <= its cap.
// The returned bottleneck is the least B at which some split is feasible — the true optimum
// for these formulas, not an approximation: the search runs over double values, and every
// comparison is made on the very numbers a brute force over all splits would compute.
//
// Ties: among optimal splits, the one whose last cut is as late as possible, then the one
// before it, and so on. With identical devices and no cut costs this is the familiar greedy
// split: every stage but the last filled as far as the bottleneck allows.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/partition/detail/chain.hpp"
#include "ppsched/partition/chain_split.hpp"

namespace ppsched::inline PPSCHED_MODE {

// The exact min-bottleneck split of a chain of layer costs into `stages` non-empty stages on
// identical devices with free communication. Usable in constant expressions.
[[nodiscard]] constexpr ChainSplit partition_chain(std::span<const double> costs, std::int32_t stages) {
  if (costs.empty() || stages <= 0 || static_cast<std::size_t>(stages) > costs.size()) {
    detail::check_chain_stages(costs.size(), stages);
  }
  double largest = 0.0;
  const std::vector<double> prefix = detail::chain_prefix(costs, largest);
  detail::ChainModel m;
  m.layers = costs.size();
  m.stages = static_cast<std::size_t>(stages);
  m.compute = prefix;
  return detail::solve_chain(m, largest);
}

// The same, with the stage count and the layer count fixed at compile time:
//   constexpr auto s = ppsched::partition_chain<2>(std::array{3.0, 1.0, 1.0, 1.0});
//   static_assert(s.boundaries == std::array<std::size_t, 3>{0, 1, 4});
template <std::size_t Stages, std::size_t N>
[[nodiscard]] constexpr StaticChainSplit<Stages> partition_chain(const std::array<double, N>& costs) {
  const ChainSplit split = partition_chain(std::span<const double>(costs), Stages);
  StaticChainSplit<Stages> out;
  for (std::size_t j = 0; j <= Stages; ++j) out.boundaries[j] = split.boundaries[j];
  out.bottleneck = split.bottleneck;
  return out;
}

}  // namespace ppsched
