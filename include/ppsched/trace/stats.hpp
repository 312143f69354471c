// Bubble statistics of a Timeline: makespan, each rank's span, busy, communication-wait and
// idle time, the bubble fraction under two stated conventions, and counts of actions by
// operation. The simulator's prediction and the runtime's measurement have the same type,
// so these numbers mean the same thing for both; the writers and `compare` build on them.
//
// Definitions (times in Timeline::unit):
// - origin = earliest start, finish = latest end, makespan = finish − origin.
// - busy(rank) = length of the union of the intervals of the rank's compute actions (F, B,
//   BI, BW), whatever their lane, so overlapping spans are not counted twice.
// - comm_wait(rank) = length of the union of the rank's communication actions' intervals
//   minus the part of it that overlaps busy: the time the rank spends in communication
//   that no computation hides. It is part of idle, not added to it. This is ppsched's one
//   comm_wait; the simulator's time of compute waiting for a remote input is another
//   quantity, SimRankStats::input_wait (sim/simulate.hpp).
// - idle(rank) = makespan − busy(rank): every moment of the step in which the rank does not
//   compute, including before its first and after its last action.
// - bubble_fraction = Σ idle ÷ (ranks × makespan), the share of device-time spent not
//   computing; a rank's own bubble_fraction is idle ÷ makespan and its
//   span_bubble_fraction is (span − busy) ÷ span, the gaps between its first and last action.
// - ideal_time = busy of the busiest rank (the step's length if nothing ever waited), and
//   bubble_vs_ideal = (makespan − ideal_time) ÷ ideal_time. For GPipe with equal stages this
//   is the familiar (p − 1) ÷ m, while bubble_fraction is (p − 1) ÷ (m + p − 1).
// Ratios whose denominator is zero (an empty timeline, a rank that ran nothing) are 0.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/trace/detail/text.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/trace/detail/stats.hpp"

namespace ppsched::inline PPSCHED_MODE {

// What an operation does, in the words legends and reports use.
[[nodiscard]] constexpr std::string_view op_description(Op op) noexcept {
  switch (op) {
    case Op::F: return "forward";
    case Op::B: return "backward";
    case Op::BI: return "backward for input";
    case Op::BW: return "backward for weights";
    case Op::SEND_F: return "send activation";
    case Op::RECV_F: return "receive activation";
    case Op::SEND_B: return "send gradient";
    case Op::RECV_B: return "receive gradient";
    case Op::R: return "recompute forward";
    case Op::OFFLOAD: return "offload activation";
    case Op::RELOAD: return "reload activation";
  }
  return "?";
}

// Throws ppsched::error naming the first span that no statistic or writer can use: a rank
// outside [0, ranks), a start or end that is NaN or infinite, an end before its start, a
// negative stage or micro-batch, an unknown operation or lane, or a compute action on the
// comm lane. Every function in ppsched/trace calls it first.
PPSCHED_OUTLINE void validate_timeline(const Timeline& timeline);

struct RankStats {
  std::int32_t rank = 0;
  std::int32_t actions = 0;  // spans on this rank, compute and communication
  double first_start = 0.0;  // the timeline's origin when the rank ran nothing
  double last_end = 0.0;
  double span = 0.0;                  // last_end − first_start
  double busy = 0.0;                  // union of compute-action intervals
  double comm_wait = 0.0;             // communication not hidden under compute
  double idle = 0.0;                  // makespan − busy
  double bubble_fraction = 0.0;       // idle ÷ makespan
  double span_bubble_fraction = 0.0;  // (span − busy) ÷ span

  friend bool operator==(const RankStats&, const RankStats&) = default;
};

struct TimelineStats {
  std::int32_t ranks = 0;
  TimeUnit unit;  // the timeline's
  std::size_t spans = 0;
  double origin = 0.0;    // earliest start (0 for an empty timeline)
  double finish = 0.0;    // latest end
  double makespan = 0.0;  // finish − origin
  double total_busy = 0.0;
  double total_comm_wait = 0.0;
  double total_idle = 0.0;                         // ranks × makespan − total_busy
  double bubble_fraction = 0.0;                    // total_idle ÷ (ranks × makespan)
  double ideal_time = 0.0;                         // busy of the busiest rank
  double bubble_vs_ideal = 0.0;                    // (makespan − ideal_time) ÷ ideal_time
  std::array<std::int32_t, op_count> op_counts{};  // indexed by Op
  std::vector<RankStats> per_rank;                 // per_rank[r].rank == r

  [[nodiscard]] std::int32_t count(Op op) const noexcept { return op_counts[static_cast<std::size_t>(op)]; }

  friend bool operator==(const TimelineStats&, const TimelineStats&) = default;
};

[[nodiscard]] PPSCHED_OUTLINE TimelineStats summarize(const Timeline& timeline);

namespace detail {

[[nodiscard]] inline std::string percent(double fraction) { return format_fixed(fraction * 100.0, 1) + "%"; }

// Left-aligned table cell of a fixed width; wider text is kept whole.
[[nodiscard]] PPSCHED_OUTLINE std::string cell(std::string_view text, std::size_t width);

}  // namespace detail

// A readable report: the totals, both bubble conventions, the action counts, and one row
// per rank.
PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const TimelineStats& s);

[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const TimelineStats& stats);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/trace/impl/stats.ipp"
#endif
