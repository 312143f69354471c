// Internals of <ppsched/schedule/generators.hpp>: the family table's entries and their bubble
// formulas. They are in ppsched::detail and not part of the API: no example or page uses them,
// and they may change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/schedule/family_info.hpp> holds.
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
#include "ppsched/schedule/family_info.hpp"
#include "ppsched/schedule/fill_drain.hpp"
#include "ppsched/schedule/interleaved_zero_bubble.hpp"
#include "ppsched/schedule/one_f_one_b.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/schedule/zero_bubble.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

inline constexpr BubbleFormula fill_drain_bubble{
    "(p-1)(T_F+T_B)", "makespan", "",
    [](std::int32_t p, std::int32_t, std::int32_t, double t_f, double t_bi, double t_bw) {
      return static_cast<double>(p - 1) * (t_f + (t_bi + t_bw));
    },
    nullptr};
inline constexpr BubbleFormula interleaved_bubble{
    "(p-1)(T_F+T_B)/v", "makespan", "v = 1, or m a multiple of p (Megatron's rule)",
    [](std::int32_t p, std::int32_t, std::int32_t v, double t_f, double t_bi, double t_bw) {
      return static_cast<double>(p - 1) * (t_f + (t_bi + t_bw)) / v;
    },
    [](std::int32_t p, std::int32_t m, std::int32_t v, double, double, double) { return v == 1 || m % p == 0; }};
inline constexpr BubbleFormula looped_bfs_bubble{
    "(p-1)(T_F+T_B)/v", "makespan", "v = 1, or m >= p",
    [](std::int32_t p, std::int32_t, std::int32_t v, double t_f, double t_bi, double t_bw) {
      return static_cast<double>(p - 1) * (t_f + (t_bi + t_bw)) / v;
    },
    [](std::int32_t p, std::int32_t m, std::int32_t v, double, double, double) { return v == 1 || m >= p; }};
inline constexpr BubbleFormula zb_h1_bubble{
    "(p-1)(T_F+T_BI-T_BW)", "makespan", "T_BW <= T_F <= T_BI and m >= p",
    [](std::int32_t p, std::int32_t, std::int32_t, double t_f, double t_bi, double t_bw) {
      return static_cast<double>(p - 1) * (t_f + t_bi - t_bw);
    },
    // With T_F > T_BI the BI chain of the cool-down waits on forwards and the form is wrong
    // (tests/test_sim.cpp sweeps it), so the paper's whole condition is required.
    [](std::int32_t p, std::int32_t m, std::int32_t, double t_f, double t_bi, double t_bw) {
      return t_bw <= t_f && t_f <= t_bi && m >= p;
    }};
inline constexpr BubbleFormula zb_h2_bubble{
    "(p-1)(T_F+T_BI-2T_BW)", "span", "T_BW <= T_F <= T_BI and m >= 2p-1",
    [](std::int32_t p, std::int32_t, std::int32_t, double t_f, double t_bi, double t_bw) {
      return static_cast<double>(p - 1) * (t_f + t_bi - 2.0 * t_bw);
    },
    // Outside T_F <= T_BI the form can go negative (T = (3, 2, 3): -(p-1)).
    [](std::int32_t p, std::int32_t m, std::int32_t, double t_f, double t_bi, double t_bw) {
      return t_bw <= t_f && t_f <= t_bi && m >= 2 * p - 1;
    }};
// ZB-H1's bubble divided by v, as interleaving divides 1F1B's; exact (tests/test_schedule.cpp)
// for every m >= p the family accepts.
inline constexpr BubbleFormula interleaved_zb_bubble{
    "(p-1)(T_F+T_BI-T_BW)/v", "makespan", "T_BW <= T_F <= T_BI and m >= p",
    [](std::int32_t p, std::int32_t, std::int32_t v, double t_f, double t_bi, double t_bw) {
      return static_cast<double>(p - 1) * (t_f + t_bi - t_bw) / v;
    },
    [](std::int32_t p, std::int32_t m, std::int32_t, double t_f, double t_bi, double t_bw) {
      return t_bw <= t_f && t_f <= t_bi && m >= p;
    }};
inline constexpr BubbleFormula forward_only_bubble{
    "(p-1)T_F", "makespan", "",
    [](std::int32_t p, std::int32_t, std::int32_t, double t_f, double, double) { return static_cast<double>(p - 1) * t_f; },
    nullptr};

// GPipe keeps every micro-batch; 1F1B and ZB-H1 p - s on stage s; ZB-H2 2p - 1 on its first.
[[nodiscard]] constexpr std::int32_t all_in_flight(std::int32_t, std::int32_t m, std::int32_t) noexcept { return m; }
[[nodiscard]] constexpr std::int32_t one_f_one_b_in_flight(std::int32_t p, std::int32_t m, std::int32_t stage) noexcept {
  return std::min(p - stage, m);
}
[[nodiscard]] constexpr std::int32_t zb_h2_in_flight(std::int32_t p, std::int32_t m, std::int32_t stage) noexcept {
  return stage == 0 ? std::min(2 * p - 1, m) : -1;
}
[[nodiscard]] constexpr std::int32_t none_in_flight(std::int32_t, std::int32_t, std::int32_t) noexcept { return 0; }
[[nodiscard]] constexpr bool any_chunks(const ScheduleRequest&) noexcept { return true; }

}  // namespace detail

}  // namespace ppsched
