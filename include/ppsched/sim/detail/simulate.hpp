// Internals of <ppsched/sim/simulate.hpp>: the discrete-event simulation's state and steps. They
// are in ppsched::detail and not part of the API: no example or page uses them, and they may
// change in any release (docs/architecture.md).
//
// They build on public types of <ppsched/sim/simulate.hpp>, which includes this file after
// declaring them. So that this file also compiles alone, it includes that header first, and its
// guard opens only below that include: included alone, the header's own include of this file
// emits these internals where the header needs them, and this outer copy is then skipped.
#include "ppsched/sim/simulate.hpp"

#ifndef PPSCHED_SIM_DETAIL_SIMULATE_HPP
#define PPSCHED_SIM_DETAIL_SIMULATE_HPP

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/detail/static_checks.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/validate/memory.hpp"
#include "ppsched/validate/report.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[noreturn]] inline void fail_simulation(const Schedule& s, const ValidationReport& report) {
  std::string list;
  for (const Problem& p : report.problems) list += "\n  - " + p.message;
  if (report.unlisted_problems != 0) list += concat("\n  - ... and ", report.unlisted_problems, " more");
  fail({"simulate: schedule '" + s.name + "'", "is not valid:" + list, "", "validate() lists every problem with its fix"});
}

// SimResult::memory_over_time from the run's times (the walk of validate/memory.hpp, in time).
// `bytes(stage, mb)`: one stored activation (the walk's own count, so the fast path of
// per-stage bytes is shared). Events are pushed in program order, which on a rank without
// copies or zero-length actions is already time order: the sort is skipped then, as it was
// a quarter of simulate()'s time at p = 64, m = 1024 (docs/performance.md).
template <class Bytes, class Fractions>
void memory_over_time(const FlatSchedule& flat, const AbstractExecution& run, const Bytes& bytes,
                      const Fractions& fractions, SimResult& result) {
  const auto ranks = static_cast<std::size_t>(flat.ranks);
  result.memory_over_time.assign(ranks, {});
  result.timed_peak.assign(ranks, MemorySample{});
  if (!flat.has_backward) return;
  struct Event {
    double time;
    int frees;  // 0: a free, 1: an allocation (frees first at one time)
    double share;
    double bytes;
  };
  const auto before = [](const Event& x, const Event& y) {
    return x.time < y.time || (x.time == y.time && x.frees < y.frees);
  };
  std::vector<Event> events;
  std::vector<MemoryFractions> stage_fraction;
  stage_fraction.reserve(static_cast<std::size_t>(flat.stages));
  for (std::int32_t s = 0; s < flat.stages; ++s) stage_fraction.push_back(fractions(s));
  for (std::size_t r = 0; r < ranks; ++r) {
    events.clear();
    const std::int32_t begin = flat.rank_begin[r], end = flat.rank_begin[r + 1];
    for (std::int32_t i = begin; i < end; ++i) {
      const Action& a = flat.at(i);
      if (is_comm(a.op)) continue;
      const auto ii = static_cast<std::size_t>(i);
      const double size = bytes(a.stage, a.microbatch);
      const MemoryFractions& f = stage_fraction[static_cast<std::size_t>(a.stage)];
      const auto alloc = [&](double share) { events.push_back({run.start(ii), 1, share, share * size}); };
      const auto release = [&](double share) { events.push_back({run.end(ii), 0, -share, -share * size}); };
      const bool has_r = flat.has_memory && a.op != Op::BW && flat.find(Op::R, a.stage, a.microbatch) != no_action;
      const bool recomputed = is_backward(a.op) && has_r;
      const bool split = f.layerwise() && flat.find(Op::BI, a.stage, a.microbatch) != no_action;
      switch (a.op) {
        case Op::F: alloc(has_r ? 1.0 - f.recompute : 1.0); break;
        case Op::R: alloc(f.restored(split)); break;
        case Op::RELOAD: alloc(f.moved(has_r)); break;
        case Op::OFFLOAD: release(f.moved(has_r)); break;
        case Op::B: release(f.held(recomputed, false)); break;
        case Op::BI: release(f.held(recomputed, split) - f.weight); break;
        case Op::BW: release(f.weight); break;
        case Op::SEND_F:
        case Op::RECV_F:
        case Op::SEND_B:
        case Op::RECV_B: break;
      }
    }
    if (!std::is_sorted(events.begin(), events.end(), before)) std::stable_sort(events.begin(), events.end(), before);
    MemorySample now;
    auto& samples = result.memory_over_time[r];
    samples.reserve(events.size());
    for (const Event& e : events) {
      now.time = e.time;
      now.activations += e.share;
      now.bytes += e.bytes;
      if (!samples.empty() && samples.back().time == e.time) {
        samples.back() = now;
      } else {
        samples.push_back(now);
      }
      if (now.bytes > result.timed_peak[r].bytes ||
          (now.bytes == result.timed_peak[r].bytes && now.activations > result.timed_peak[r].activations)) {
        result.timed_peak[r] = now;
      }
    }
  }
}

// The run of `input` (lowered, or compute-only for an ideal_communication run), whose static
// checks `proven` says lowering proved; `schedule` is what the caller passed (for messages).
PPSCHED_OUTLINE SimResult simulate_lowered(const Schedule& schedule, const Schedule& input, bool proven, bool lowered_internally,
                                  const CostModel& cost, const SimOptions& options, Workspace& ws);

}  // namespace detail

}  // namespace ppsched

#endif  // PPSCHED_SIM_DETAIL_SIMULATE_HPP
