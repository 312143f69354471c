// The bodies of <ppsched/trace/stats.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE void validate_timeline(const Timeline& timeline) {
  if (timeline.ranks < 0) {
    detail::fail({"timeline", detail::concat("the rank count is negative (", timeline.ranks, ")"), "Timeline::ranks",
          "set ranks to the number of pipeline ranks"});
  }
  for (std::size_t index = 0; index < timeline.spans.size(); ++index) {
    const Span& span = timeline.spans[index];
    const auto op_code = static_cast<int>(span.action.op);
    if (op_code >= op_count) {
      detail::fail({"timeline", detail::concat("span ", index, " has an unknown operation code ", op_code),
            detail::concat("span ", index, " on rank ", span.rank), "use one of the ppsched::Op values"});
    }
    const std::string where = detail::describe_span(span, index);
    if (span.rank < 0 || span.rank >= timeline.ranks) {
      detail::fail({"timeline",
            detail::concat("rank ", span.rank, " is outside the timeline's ", timeline.ranks, " ranks [0, ",
                           timeline.ranks, ")"),
            where, "set Timeline::ranks to cover every rank, or correct the span's rank"});
    }
    if (!std::isfinite(span.start) || !std::isfinite(span.end)) {
      detail::fail({"timeline",
            detail::concat("a time is not a finite number (start ", span.start, ", end ", span.end, ")"),
            where, "record finite start and end times"});
    }
    if (span.end < span.start) {
      detail::fail({"timeline",
            detail::concat("the span ends before it starts (start ", span.start, ", end ", span.end, ")"),
            where, "record each span's end at or after its start"});
    }
    if (span.action.stage < 0 || span.action.microbatch < 0) {
      detail::fail({"timeline",
            detail::concat("the stage (", span.action.stage, ") or micro-batch (", span.action.microbatch,
                           ") is negative"),
            where, "number stages and micro-batches from 0"});
    }
    if (span.lane != Lane::compute && span.lane != Lane::comm && span.lane != Lane::copy) {
      detail::fail({"timeline", detail::concat("unknown lane code ", static_cast<int>(span.lane)), where,
            "use Lane::compute, Lane::comm or Lane::copy"});
    }
    if (span.lane != Lane::compute && (is_compute(span.action.op) || span.action.op == Op::R)) {
      detail::fail({"timeline", detail::concat("a compute action is on the ", lane_name(span.lane), " lane"), where,
            "put F, B, BI, BW and R spans on Lane::compute"});
    }
    if (span.lane == Lane::copy && !is_copy(span.action.op)) {
      detail::fail({"timeline", detail::concat(op_name(span.action.op), " is on the copy lane"), where,
            "only OFFLOAD and RELOAD run on Lane::copy"});
    }
  }
}

[[nodiscard]] PPSCHED_OUTLINE TimelineStats summarize(const Timeline& timeline) {
  validate_timeline(timeline);
  TimelineStats stats;
  stats.ranks = timeline.ranks;
  stats.unit = timeline.unit;
  stats.spans = timeline.spans.size();
  if (!timeline.spans.empty()) {
    stats.origin = timeline.spans.front().start;
    stats.finish = timeline.spans.front().end;
  }
  const auto ranks = static_cast<std::size_t>(timeline.ranks);
  std::vector<std::vector<detail::Interval>> compute(ranks);
  std::vector<std::vector<detail::Interval>> comm(ranks);
  stats.per_rank.resize(ranks);
  for (const Span& span : timeline.spans) {
    stats.origin = std::min(stats.origin, span.start);
    stats.finish = std::max(stats.finish, span.end);
    ++stats.op_counts[static_cast<std::size_t>(span.action.op)];
    const auto r = static_cast<std::size_t>(span.rank);
    RankStats& rank = stats.per_rank[r];
    if (rank.actions == 0) {
      rank.first_start = span.start;
      rank.last_end = span.end;
    }
    ++rank.actions;
    rank.first_start = std::min(rank.first_start, span.start);
    rank.last_end = std::max(rank.last_end, span.end);
    // Busy is what occupies the compute lane (R, and copies when they share it); the copy
    // lane's work is neither busy nor waiting for a peer.
    if (span.lane == Lane::copy) continue;
    (is_comm(span.action.op) ? comm : compute)[r].push_back({span.start, span.end});
  }
  stats.makespan = stats.finish - stats.origin;
  for (std::size_t r = 0; r < ranks; ++r) {
    RankStats& rank = stats.per_rank[r];
    rank.rank = static_cast<std::int32_t>(r);
    if (rank.actions == 0) {
      rank.first_start = stats.origin;
      rank.last_end = stats.origin;
    }
    const auto busy = detail::merge_intervals(std::move(compute[r]));
    const auto talking = detail::merge_intervals(std::move(comm[r]));
    rank.span = rank.last_end - rank.first_start;
    rank.busy = detail::total_length(busy);
    rank.comm_wait = detail::total_length(talking) - detail::overlap_length(talking, busy);
    rank.idle = stats.makespan - rank.busy;
    rank.bubble_fraction = detail::ratio_or_zero(rank.idle, stats.makespan);
    rank.span_bubble_fraction = detail::ratio_or_zero(rank.span - rank.busy, rank.span);
    stats.total_busy += rank.busy;
    stats.total_comm_wait += rank.comm_wait;
    stats.total_idle += rank.idle;
    stats.ideal_time = std::max(stats.ideal_time, rank.busy);
  }
  stats.bubble_fraction =
      detail::ratio_or_zero(stats.total_idle, static_cast<double>(timeline.ranks) * stats.makespan);
  stats.bubble_vs_ideal = detail::ratio_or_zero(stats.makespan - stats.ideal_time, stats.ideal_time);
  return stats;
}

}  // namespace ppsched::PPSCHED_MODE

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::string cell(std::string_view text, std::size_t width) {
  std::string out{text};
  if (out.size() < width) out.append(width - out.size(), ' ');
  return out;
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const TimelineStats& s) {
  using detail::cell;
  using detail::format_readable;
  const std::string unit = s.unit.empty() ? std::string{} : " " + s.unit.text();
  out << "timeline: " << s.ranks << " ranks, " << s.spans << " spans\n"
      << "makespan " << format_readable(s.makespan, 6) << unit << " (from " << format_readable(s.origin, 6)
      << " to " << format_readable(s.finish, 6) << ")\n"
      << "bubble " << detail::percent(s.bubble_fraction) << " of ranks x makespan idle; makespan is "
      << detail::percent(s.bubble_vs_ideal) << " above the ideal " << format_readable(s.ideal_time, 6) << unit
      << " (busiest rank's busy time)\n"
      << "actions:";
  for (int op = 0; op < op_count; ++op) {
    if (s.op_counts[static_cast<std::size_t>(op)] != 0) {
      out << ' ' << op_name(static_cast<Op>(op)) << '=' << s.op_counts[static_cast<std::size_t>(op)];
    }
  }
  out << '\n'
      << cell("rank", 6) << cell("span", 12) << cell("busy", 12) << cell("comm-wait", 12) << cell("idle", 12)
      << cell("bubble", 9) << "bubble-in-span\n";
  for (const RankStats& r : s.per_rank) {
    out << cell(std::to_string(r.rank), 6) << cell(format_readable(r.span, 6), 12)
        << cell(format_readable(r.busy, 6), 12) << cell(format_readable(r.comm_wait, 6), 12)
        << cell(format_readable(r.idle, 6), 12) << cell(detail::percent(r.bubble_fraction), 9)
        << detail::percent(r.span_bubble_fraction) << '\n';
  }
  return out;
}

[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const TimelineStats& stats) {
  std::ostringstream out;
  out << stats;
  return out.str();
}

}  // namespace ppsched
