// Compile-time partitioning: a model whose layers are types with static costs gets its stages
// as types. `static_partition<K, layer_list<L...>>::stages` is a `stage_list` of K
// `layer_list`s, found by the same exact splitter as at run time (it runs in constexpr), so a
// pipeline built from it has each stage's layers fixed at compile time and dispatches
// nothing at run time:
//
//   struct Embed { static constexpr double cost = 4.0; };
//   struct Block { static constexpr double forward = 1.0, backward_input = 1.0, backward_weight = 1.0; };
//   namespace ct = ppsched::compile_time;
//   using S = ct::static_partition<2, ct::layer_list<Embed, Block, Block, Block>>;
//   static_assert(std::is_same_v<S::stages, ct::stage_list<ct::layer_list<Embed, Block>,
//                                                          ct::layer_list<Block, Block>>>);
//   using Stage0 = ct::rebind_t<std::tuple, ct::stage_t<S, 0>>;  // std::tuple<Embed, Block>
#pragma once

#include "ppsched/config.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <tuple>
#include <utility>

#include "ppsched/partition/chain.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace compile_time {

template <class... Layers>
struct layer_list {
  static constexpr std::size_t size = sizeof...(Layers);
};

template <class... Stages>
struct stage_list {
  static constexpr std::size_t size = sizeof...(Stages);
};

// A layer type with a static cost: either one `cost` (forward + backward, per micro-batch) or
// the three times the run-time Layer carries.
template <class L>
concept StaticLayer = requires {
  { L::cost } -> std::convertible_to<double>;
} || requires {
  { L::forward } -> std::convertible_to<double>;
  { L::backward_input } -> std::convertible_to<double>;
  { L::backward_weight } -> std::convertible_to<double>;
};

template <StaticLayer L>
[[nodiscard]] consteval double static_layer_cost() {
  if constexpr (requires { L::cost; }) {
    return static_cast<double>(L::cost);
  } else {
    // The run-time Layer::compute() order, so a type and its Layer cost the same.
    return (static_cast<double>(L::forward) + static_cast<double>(L::backward_input)) +
           static_cast<double>(L::backward_weight);
  }
}

template <StaticLayer L>
inline constexpr double static_layer_cost_v = static_layer_cost<L>();

}  // namespace compile_time
namespace detail {

template <class List, std::size_t Begin, class Offsets>
struct layer_slice;

template <class... Layers, std::size_t Begin, std::size_t... Offsets>
struct layer_slice<compile_time::layer_list<Layers...>, Begin, std::index_sequence<Offsets...>> {
  using type = compile_time::layer_list<std::tuple_element_t<Begin + Offsets, std::tuple<Layers...>>...>;
};

}  // namespace detail
namespace compile_time {

// Layers Begin .. End-1 of a layer_list.
template <class List, std::size_t Begin, std::size_t End>
using layer_slice_t = typename detail::layer_slice<List, Begin, std::make_index_sequence<End - Begin>>::type;

template <std::size_t Stages, class List>
struct static_partition;

template <std::size_t Stages, StaticLayer... Layers>
struct static_partition<Stages, layer_list<Layers...>> {
  static_assert(sizeof...(Layers) > 0, "static_partition: the layer_list is empty; give at least one layer");
  static_assert(Stages > 0, "static_partition: ask for at least one stage");
  static_assert(Stages <= sizeof...(Layers), "static_partition: more stages than layers; a stage cannot be empty");

  static constexpr std::array<double, sizeof...(Layers)> costs{static_layer_cost_v<Layers>...};
  static constexpr StaticChainSplit<Stages> split = partition_chain<Stages>(costs);
  static constexpr std::array<std::size_t, Stages + 1> boundaries = split.boundaries;
  static constexpr double bottleneck = split.bottleneck;

 private:
  template <std::size_t... S>
  static auto make_stages(std::index_sequence<S...>)
      -> stage_list<layer_slice_t<layer_list<Layers...>, boundaries[S], boundaries[S + 1]>...>;

 public:
  using stages = decltype(make_stages(std::make_index_sequence<Stages>{}));
};

}  // namespace compile_time
namespace detail {

template <std::size_t I, class Stages>
struct stage_at;

template <std::size_t I, class... Stages>
struct stage_at<I, compile_time::stage_list<Stages...>> {
  using type = std::tuple_element_t<I, std::tuple<Stages...>>;
};

template <template <class...> class To, class List>
struct rebind_types;

template <template <class...> class To, template <class...> class From, class... Ts>
struct rebind_types<To, From<Ts...>> {
  using type = To<Ts...>;
};

}  // namespace detail
namespace compile_time {

// Stage I (a layer_list) of a static_partition.
template <class StaticPartition, std::size_t I>
using stage_t = typename detail::stage_at<I, typename StaticPartition::stages>::type;

// The same types in another variadic template, e.g. rebind_t<std::tuple, layer_list<A, B>>
// is std::tuple<A, B>: a stage as a tuple of layer objects, or stages as a tuple of stages.
template <template <class...> class To, class List>
using rebind_t = typename detail::rebind_types<To, List>::type;

}  // namespace compile_time
}  // namespace ppsched
