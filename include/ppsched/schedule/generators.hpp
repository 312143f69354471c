// Every schedule family behind one entry point: make_schedule("1f1b", {.ranks = 4,
// .microbatches = 8}) builds the same value as make_1f1b(...), and family_names() lists the
// canonical names a command line can offer. The families themselves live in fill_drain.hpp
// (gpipe, looped-bfs, forward-only), one_f_one_b.hpp (1f1b, interleaved-1f1b), zero_bubble.hpp
// (zb-h1, zb-h2, zb-v), interleaved_zero_bubble.hpp (interleaved-zb), controllable_memory.hpp
// (v-half, v-min) and dualpipev.hpp (dualpipev). A generated schedule holds compute actions only
// (DualPipeV's overlapped pairs are compute groups); lower() adds the communication.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/controllable_memory.hpp"
#include "ppsched/schedule/dualpipev.hpp"
#include "ppsched/schedule/fill_drain.hpp"
#include "ppsched/schedule/interleaved_zero_bubble.hpp"
#include "ppsched/schedule/one_f_one_b.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/schedule/zero_bubble.hpp"
#include "ppsched/schedule/detail/generators.hpp"
#include "ppsched/schedule/family_info.hpp"

namespace ppsched::inline PPSCHED_MODE {

inline constexpr std::array<FamilyInfo, 12> schedule_families{{
    {.name = detail::gpipe_name,
     .rule = "any p, m; v = 1",
     .summary = "all forwards, then all backwards (fill-drain); m activations per stage",
     .make = &make_gpipe,
     .problem = &detail::gpipe_problem,
     .bubble = &detail::fill_drain_bubble,
     .peak_in_flight = &detail::all_in_flight},
    {.name = detail::one_f_one_b_name,
     .rule = "any p, m; v = 1",
     .summary = "warm-up, one forward one backward, drain; p-s activations on stage s",
     .make = &make_1f1b,
     .problem = &detail::one_f_one_b_problem,
     .bubble = &detail::fill_drain_bubble,
     .peak_in_flight = &detail::one_f_one_b_in_flight},
    {.name = detail::interleaved_1f1b_name,
     .rule = "any p, v; m a multiple of p when v > 1",
     .summary = "Megatron's virtual pipeline: v looped chunks per rank, bubble divided by v",
     .make = &make_interleaved_1f1b,
     .problem = &detail::interleaved_1f1b_problem,
     .placement = PlacementKind::looped,
     .chunks = 0,
     .rule_accepts = &interleaved_1f1b_accepts,
     .bubble = &detail::interleaved_bubble},
    {.name = detail::looped_bfs_name,
     .rule = "any p, m, v",
     .summary = "v looped chunks per rank, breadth-first: each chunk runs all micro-batches",
     .make = &make_looped_bfs,
     .problem = &detail::looped_bfs_problem,
     .placement = PlacementKind::looped,
     .chunks = 0,
     .rule_accepts = &detail::any_chunks,
     .bubble = &detail::looped_bfs_bubble},
    {.name = detail::zb_h1_name,
     .rule = "any p, m; v = 1",
     .summary = "zero bubble H1: split backward, delayed BW fills the bubble; 1F1B's memory",
     .make = &make_zb_h1,
     .problem = &detail::zb_h1_problem,
     .split_backward = true,
     .bubble = &detail::zb_h1_bubble,
     .peak_in_flight = &detail::one_f_one_b_in_flight},
    {.name = detail::zb_h2_name,
     .rule = "any p, m; v = 1",
     .summary = "zero bubble H2: 2p-1 warm-up forwards on stage 0, no bubble in each rank's span",
     .make = &make_zb_h2,
     .problem = &detail::zb_h2_problem,
     .split_backward = true,
     .bubble = &detail::zb_h2_bubble,
     .peak_in_flight = &detail::zb_h2_in_flight},
    {.name = detail::interleaved_zero_bubble_name,
     .rule = "any p, v; m a multiple of max(1, m/p) when v > 1",
     .summary = "PyTorch's interleaved zero bubble: v looped chunks per rank, split backward, rank r's BWs r late",
     .make = &make_interleaved_zero_bubble,
     .problem = &detail::interleaved_zero_bubble_problem,
     .placement = PlacementKind::looped,
     .chunks = 0,
     .split_backward = true,
     .rule_accepts = &interleaved_zero_bubble_accepts,
     .bubble = &detail::interleaved_zb_bubble},
    {.name = detail::zb_v_name,
     .rule = "any p, m; v = 2",
     .summary = "zero bubble V: two chunks per rank in a V shape, split backward",
     .make = &make_zb_v,
     .problem = &detail::zb_v_problem,
     .placement = PlacementKind::v_shape,
     .chunks = 2,
     .split_backward = true},
    {.name = detail::v_half_name,
     .rule = "any p, m; v = 2",
     .summary = "controllable memory V-Half: repeated V building block, about half of 1F1B's activation memory",
     .make = &make_v_half,
     .problem = &detail::v_half_problem,
     .placement = PlacementKind::v_shape,
     .chunks = 2,
     .split_backward = true},
    {.name = detail::v_min_name,
     .rule = "any p, m; v = 2",
     .summary = "controllable memory V-Min: repeated V building block, about a third of 1F1B's activation memory",
     .make = &make_v_min,
     .problem = &detail::v_min_problem,
     .placement = PlacementKind::v_shape,
     .chunks = 2,
     .split_backward = true},
    {.name = detail::dualpipev_name,
     .rule = "any p; v = 2; m >= 2p",
     .summary = "DeepSeek's DualPipeV: a V of two chunks per rank, steady state of overlapped F&B pairs (compute groups)",
     .make = &make_dualpipev,
     .problem = &detail::dualpipev_problem,
     .placement = PlacementKind::v_shape,
     .chunks = 2,
     .split_backward = true,
     .overlapped_pairs = true,
     .rule_accepts = &dualpipev_accepts},
    {.name = detail::forward_only_name,
     .rule = "any p, m; v = 1",
     .summary = "inference: forwards only",
     .make = &make_forward_only,
     .problem = &detail::forward_only_problem,
     .training = false,
     .bubble = &detail::forward_only_bubble,
     .peak_in_flight = &detail::none_in_flight},
}};

namespace detail {

inline constexpr std::array<std::string_view, schedule_families.size()> family_name_list = [] {
  std::array<std::string_view, schedule_families.size()> names{};
  for (std::size_t i = 0; i < schedule_families.size(); ++i) names[i] = schedule_families[i].name;
  return names;
}();

// Lower case without '-' and '_', so that "ZB-H1", "zb_h1" and PyTorch's class-name spelling
// ("Interleaved1F1B", "LoopedBFS", "GPipe") all find their family.
[[nodiscard]] PPSCHED_OUTLINE std::string normalised_family(std::string_view name);

[[nodiscard]] PPSCHED_OUTLINE const FamilyInfo* find_family(std::string_view name);

[[nodiscard]] PPSCHED_OUTLINE std::string joined_family_names();

}  // namespace detail

// The canonical family names, in the order of schedule_families.
[[nodiscard]] constexpr std::span<const std::string_view> family_names() noexcept {
  return detail::family_name_list;
}

// The family registered under `name` (canonical, any case, '-' or '_' optional, or PyTorch's
// class name without "Schedule"); throws ppsched::error listing the valid names otherwise.
[[nodiscard]] PPSCHED_OUTLINE const FamilyInfo& family_info(std::string_view name);

// Whether make_schedule(family, r) would succeed, without building or throwing: the sizes
// every family checks and the family's own rule on p, m and v. False for unknown families.
[[nodiscard]] PPSCHED_OUTLINE bool accepts(std::string_view family, const ScheduleRequest& r);

// Builds the named family's schedule; throws ppsched::error for an unknown family or a request
// the family's rule rejects (the message states the rule and the nearest valid values).
[[nodiscard]] PPSCHED_OUTLINE Schedule make_schedule(std::string_view family, const ScheduleRequest& r);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/generators.ipp"
#endif
