// Part of <ppsched/runtime/executor.hpp> (include that): waiting for the streams under the
// watchdog, naming what a stuck rank waits for, and ending a failed step.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/runtime/executor/core.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Steps of each lane whose end event has completed, counted in order (a stream completes
// its work in order, so the count only grows within a step).
template <class B>
auto Executor<B>::completed_on(int lane) -> std::size_t {
  std::size_t& n = lane_done_[lane];
  const std::vector<std::int32_t>& steps = lane_steps_[lane];
  while (n < steps.size() && b_.query(end_events_[static_cast<std::size_t>(steps[n])])) ++n;
  return n;
}

// Waits for both streams. The watchdog measures from the last completion it has seen, and
// looks every `slice`: waiting a whole period and re-arming a whole one when something
// completed in it would let a stall go unreported for up to two periods.
template <class B>
auto Executor<B>::wait_all(StepFaults* faults) -> void {
  using Clock = std::chrono::steady_clock;
  const std::stop_token stop = faults->token();
  // In milliseconds before any conversion: the watchdog may be milliseconds::max() (none),
  // which does not fit the clock's nanoseconds.
  const auto slice = std::chrono::milliseconds(std::clamp<std::chrono::milliseconds::rep>(
      options_.watchdog.count() / 10, 1, 100));
  // Counted only when a wait times out: a step that ends within a slice queries nothing.
  std::size_t progress = 0;
  Clock::time_point last_progress = Clock::now();
  for (auto* done : {&compute_done_, &comm_done_, &copy_done_}) {
    if (done == &copy_done_ && !plan_.has_copies) break;
    for (;;) {
      const Clock::time_point deadline =
          std::min(detail::saturating_deadline(last_progress, options_.watchdog), Clock::now() + slice);
      const WaitResult r = b_.synchronize(*done, HostWait{deadline, stop});
      if (r == WaitResult::done) break;
      if (r == WaitResult::stopped) throw detail::StoppedByPeer{};
      const Clock::time_point now = Clock::now();
      const std::size_t count = completed_on(0) + completed_on(1) + completed_on(2);
      if (count > progress) {
        progress = count;
        last_progress = now;
        continue;
      }
      // A wait that gave up before its deadline with nothing new done: the backend knows
      // that nothing can move (the CPU backend's deterministic engine found a deadlock).
      if (detail::reached(now - last_progress, options_.watchdog) || now < deadline) throw watchdog_error();
    }
  }
}

template <class B>
auto Executor<B>::describe_step(std::int32_t index) -> std::string {
  const PlannedStep& st = plan_.steps[static_cast<std::size_t>(index)];
  std::string what;
  for (std::int32_t k = 0; k < st.action_count; ++k) {
    what += detail::concat(k == 0 ? "" : " ", labels_[static_cast<std::size_t>(st.first_action + k)]);
  }
  for (const std::int32_t w : {st.wait_on, st.copy_wait}) {
    if (w < 0 || b_.query(end_events_[static_cast<std::size_t>(w)])) continue;
    const PlannedStep& dep = plan_.steps[static_cast<std::size_t>(w)];
    return detail::concat(what, " waits for ", labels_[static_cast<std::size_t>(dep.first_action)], " on the ",
                          dep.copy ? "copy" : dep.lane == Lane::compute ? "compute" : "comm", " stream");
  }
  if (st.copy) return detail::concat(what, " is running (a slow or stuck offload / reload callable)");
  if (st.lane == Lane::comm) {
    std::string waits;
    for (const PlannedTransfer& t : st.transfers) {
      waits += detail::concat(waits.empty() ? "" : "; ", labels_[static_cast<std::size_t>(t.action)], " waits for ",
                              detail::matching_action(schedule_, action(t.action)), " to be posted");
    }
    return waits;
  }
  return detail::concat(what, " is running (a slow or stuck stage callable)");
}

template <class B>
auto Executor<B>::watchdog_error() -> error {
  std::string heads;
  std::string first_action;
  for (int lane : {1, 0, 2}) {
    const std::size_t done = completed_on(lane);
    if (done >= lane_steps_[lane].size()) continue;
    const std::int32_t head = lane_steps_[lane][done];
    if (first_action.empty())
      first_action = labels_[static_cast<std::size_t>(plan_.steps[static_cast<std::size_t>(head)].first_action)];
    heads += detail::concat(heads.empty() ? "" : "; ",
                            lane == 0   ? "compute stream: "
                            : lane == 1 ? "comm stream: "
                                        : "copy stream: ",
                            describe_step(head));
  }
  // Every action done: the step waits in its final work. With data parallelism that is a
  // stage's gradient sum over the replicas first (a replica that has not reached it), and
  // only then the optimizer step; say which (issue 24).
  for (std::size_t k = 0; heads.empty() && reducer_ && k < reduced_.size(); ++k) {
    if (last_weight_step_[k] < 0 || b_.query(reduced_[k])) continue;
    heads = detail::concat("every action completed, but stage ", grads_[k].stage,
                           "'s gradient sum over the replicas did not (a replica that has not reached it, or a slow "
                           "all-reduce)");
  }
  if (heads.empty()) heads = "every action completed, but the step's final work did not (the optimizer step?)";
  return detail::make_error(
      {detail::concat("rank ", rank_),
       detail::concat("watchdog: no action completed for ", options_.watchdog.count(), " ms. ", heads),
       first_action.empty() ? "" : detail::concat("action ", first_action),
       "Validate the schedule (validate()) or raise ExecutorOptions::watchdog if actions are this slow"});
}

template <class B>
auto Executor<B>::fail_step(std::exception_ptr e, StepFaults* faults) -> void {
  bool stopped = false;
  try {
    std::rethrow_exception(e);
  } catch (const detail::StoppedByPeer&) {
    stopped = true;
  } catch (...) {
  }
  if (stopped) {
    e = std::make_exception_ptr(detail::make_error(
        {detail::concat("rank ", rank_), "stopped because another rank failed", "", "See the step's first error"}));
  } else if (faults != nullptr) {
    faults->report(e);  // before the abort, so that the cause is the first error
  }
  b_.abort(stopped ? "another rank failed" : "this rank failed");
  // No deadline: a callable still running (the one the watchdog named, say) writes into
  // this executor's buffers until it returns, and the next step or the destructor must
  // not meet it. Queued work that has not started is dropped by the abort (or, where a
  // backend runs it anyway, calls no user code: see compute()).
  for (auto* s : {&compute_, &comm_, &reduce_stream_, &copy_}) {
    if (s == &reduce_stream_ && reduced_.empty()) continue;  // no data parallelism: no such stream
    if (s == &copy_ && !plan_.has_copies) continue;          // no OFFLOAD / RELOAD: no copy stream
    for (;;) {
      try {
        if (b_.synchronize(*s, HostWait{}) != WaitResult::timed_out) break;
      } catch (...) {  // the rank's sticky error, thrown once the stream is drained
        break;
      }
    }
  }
  std::rethrow_exception(e);
}

}  // namespace ppsched
