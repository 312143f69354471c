// The results of the exact chain splitter (<ppsched/partition/chain.hpp>, which says how it
// splits): ChainSplit and its compile-time twin StaticChainSplit. Include
// <ppsched/partition/chain.hpp>; they sit in a header of their own so that the internals in
// partition/detail/chain.hpp build on them without including the public header back.
#pragma once

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

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Stage j holds positions boundaries[j] .. boundaries[j+1]-1; boundaries has stages + 1
// entries, from 0 to the layer count.
struct ChainSplit {
  std::vector<std::size_t> boundaries;
  double bottleneck = 0.0;

  friend constexpr bool operator==(const ChainSplit&, const ChainSplit&) = default;
};

// The same, sized at compile time, so that it can be the value of a constexpr variable.
template <std::size_t Stages>
struct StaticChainSplit {
  std::array<std::size_t, Stages + 1> boundaries{};
  double bottleneck = 0.0;

  friend constexpr bool operator==(const StaticChainSplit&, const StaticChainSplit&) = default;
};

}  // namespace ppsched
