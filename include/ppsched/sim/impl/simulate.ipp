// The bodies of <ppsched/sim/simulate.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE::detail {

// Ranks sharing a host (sim/detail/shared_host.hpp).
PPSCHED_OUTLINE void SharedHostLoad::build(const std::vector<double>& slowdown) {
  std::sort(events_.begin(), events_.end());  // at one time, ends (-1) before starts (+1)
  times_.clear();
  integral_.clear();
  std::int32_t computing = 0;
  for (const auto& [t, delta] : events_) {
    if (times_.empty()) {
      times_.push_back(t);
      integral_.push_back(0.0);
    } else if (t != times_.back()) {
      integral_.push_back(integral_.back() + (t - times_.back()) * concurrent_factor(slowdown, computing));
      times_.push_back(t);
    }
    computing += delta;
  }
}

PPSCHED_OUTLINE double update_shared_factors(const FlatSchedule& flat, const AbstractExecution& run,
                                    const std::vector<double>& slowdown, std::vector<double>& factor, bool first,
                                    SharedHostLoad& load) {
  const auto computes = [&](std::int32_t i) { return !is_comm(flat.at(i).op) && !run.on_copy_stream(i); };
  load.clear();
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
    const std::int32_t begin = flat.rank_begin[static_cast<std::size_t>(r)];
    const std::int32_t end = flat.rank_begin[static_cast<std::size_t>(r) + 1];
    for (std::int32_t i = begin; i < end; ++i) {
      // The two actions of an overlapped pair share one interval: the rank computes once.
      const Action& a = flat.at(i);
      const bool second_of_pair = flat.has_pairs && a.group != 0 && i > begin && flat.at(i - 1).group == a.group;
      if (computes(i) && !second_of_pair) load.add(run.start(static_cast<std::size_t>(i)), run.end(static_cast<std::size_t>(i)));
    }
  }
  load.build(slowdown);
  double largest = 0.0;
  factor.resize(flat.size(), 1.0);
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(flat.size()); ++i) {
    if (!computes(i)) continue;
    const auto ii = static_cast<std::size_t>(i);
    const double mean = load.mean(run.start(ii), run.end(ii), factor[ii]);
    const double next = first ? mean : 0.5 * (factor[ii] + mean);  // damped: partial overlaps can swing
    largest = std::max(largest, std::abs(next - factor[ii]));
    factor[ii] = next;
  }
  return largest;
}


PPSCHED_OUTLINE void memory_over_time(const FlatSchedule& flat, const AbstractExecution& run, const ActivationSizes& bytes,
                                      const StageFractions& fractions, SimResult& result) {
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

}  // namespace ppsched::detail

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE SimResult simulate_lowered(const Schedule& schedule, const Schedule& input, bool proven, bool lowered_internally,
                                  const CostModel& cost, const SimOptions& options, Workspace& ws) {
  SimResult result;
  result.lowered_internally = lowered_internally;
  FlatSchedule& flat = ws.flat();
  ValidationReport report;
  report.schedule_name = schedule.name;
  {
    ProblemSink sink(report.problems, report.unlisted_problems, 20);
    static_checks(input, flat, sink, options.ideal_communication, proven && !options.ideal_communication);
    if (sink.any()) fail_simulation(schedule, report);
  }
  const std::int32_t M = flat.microbatches;
  check_cost_model(cost, flat.stages, M);

  const std::size_t n = flat.size();
  std::vector<double> input_delay;
  // Times that depend on (op, stage) only come from a table; otherwise from the model.
  const bool per_stage = cost.per_microbatch.empty() && cost.microbatch_scale.empty();
  std::vector<double> table;
  if (per_stage) {
    table.assign(static_cast<std::size_t>(flat.stages) * op_count, 0.0);
    for (std::int32_t st = 0; st < flat.stages; ++st) {
      for (int op = 0; op < op_count; ++op) {
        const Action a{static_cast<Op>(op), st, 0, 0};
        const bool exists = !(a.op == Op::SEND_F && st + 1 == flat.stages) && !(a.op == Op::RECV_F && st == 0) &&
                            !(a.op == Op::SEND_B && st == 0) && !(a.op == Op::RECV_B && st + 1 == flat.stages);
        if (exists) {
          table[static_cast<std::size_t>(st) * op_count + static_cast<std::size_t>(op)] =
              is_comm(a.op) ? transfer_time(cost, a, M) : compute_time(cost, a, M);
        }
      }
    }
  }
  auto duration = [&](const Action& a) {
    // A copy of a micro-batch R also recomputes moves what F kept for R (moved_bytes).
    if (flat.has_copies && is_copy(a.op) && flat.find(Op::R, a.stage, a.microbatch) != no_action) {
      return compute_time(cost, a, M, true);
    }
    if (per_stage) return table[static_cast<std::size_t>(a.stage) * op_count + static_cast<std::size_t>(a.op)];
    return is_comm(a.op) ? transfer_time(cost, a, M) : compute_time(cost, a, M);
  };
  // Each action's own time: from the table when it depends on (op, stage) alone (no copies, which
  // may move less), otherwise asked once per action into an array. The runs read it, and the
  // statistics split pairs by it.
  const bool keyed = per_stage && !flat.has_copies;
  scratch_vector<double>& durations = ws.execution().durations;
  if (!keyed) {
    durations.resize(n);
    for (std::int32_t r = 0; r < flat.ranks; ++r) {
      const std::int32_t b = flat.rank_begin[static_cast<std::size_t>(r)];
      const std::int32_t e = flat.rank_begin[static_cast<std::size_t>(r) + 1];
      const Action* prog = flat.rank_actions[static_cast<std::size_t>(r)];
      for (std::int32_t i = b; i < e; ++i) durations[static_cast<std::size_t>(i)] = duration(prog[i - b]);
    }
  }
  const auto own_time = [&](std::size_t i, const Action& a) {
    return keyed ? table[static_cast<std::size_t>(a.stage) * op_count + static_cast<std::size_t>(a.op)] : durations[i];
  };
  if (!flat.lowered) {
    input_delay.assign(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      const Action& a = flat.at(static_cast<std::int32_t>(i));
      const std::int32_t d = flat.links(static_cast<std::int32_t>(i)).input;
      if (d == detail::no_action || flat.owner[static_cast<std::size_t>(d)] == flat.owner[i]) continue;
      input_delay[i] = a.op == Op::F ? transfer_time(cost, Action{Op::SEND_F, a.stage - 1, a.microbatch, 0}, M)
                                     : transfer_time(cost, Action{Op::SEND_B, a.stage + 1, a.microbatch, 0}, M);
    }
  }

  const StreamMode mode = options.comm_on_compute_stream ? StreamMode::comm_on_compute_stream
                                                         : StreamMode::separate_comm_stream;
  // Ranks sharing a host's cores (CostModel::fixed_costs.concurrent_slowdown): each compute time times its
  // action's factor, found by a fixed point over whole runs (sim/detail/shared_host.hpp).
  std::vector<double> shared;
  std::vector<double> shared_durations;  // each action's time times its factor
  const auto shared_duration = [&]() {
    shared_durations.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const Action& a = flat.at(static_cast<std::int32_t>(i));
      const double d = own_time(i, a);
      shared_durations[i] = is_comm(a.op) || is_copy(a.op) ? d : d * shared[static_cast<std::size_t>(flat.find(a.op, a.stage, a.microbatch))];
    }
    return std::span<const double>(shared_durations);
  };
  std::optional<AbstractExecution> execution;
  if (keyed) {
    execution.emplace(flat, mode, DurationTable{table.data(), op_count}, flat.lowered ? nullptr : &input_delay,
                      cost.fb_overlap, &ws.execution());
  } else {
    execution.emplace(flat, mode, std::span<const double>(durations), flat.lowered ? nullptr : &input_delay,
                      cost.fb_overlap, &ws.execution());
  }
  if (!execution->run()) {
    detail::fail({"simulate: schedule '" + schedule.name + "'",
          detail::concat("deadlocks under rendezvous with ", stream_mode_name(mode), ": ", execution->describe_stuck()), "",
          "validate() proves a schedule deadlock-free; lower() writes communication that is"});
  }
  if (detail::shares_host(cost.fixed_costs.concurrent_slowdown, flat.ranks)) {
    detail::SharedHostLoad load;
    for (int step = 0; step < 12; ++step) {  // converges in a few steps; the damping bounds the rest
      const double moved = detail::update_shared_factors(flat, *execution, cost.fixed_costs.concurrent_slowdown, shared, step == 0, load);
      execution.emplace(flat, mode, shared_duration(), flat.lowered ? nullptr : &input_delay, cost.fb_overlap, &ws.execution());
      execution->run();  // the same orders with longer times: what completed completes
      if (moved < 1e-3) break;
    }
  }
  const AbstractExecution& run = *execution;

  // Statistics, rank by rank over the program order.
  const auto ranks = static_cast<std::size_t>(flat.ranks);
  result.ranks.assign(ranks, SimRankStats{});
  const double first = run.earliest_start();
  const double last = detail::end_with_optimizer(flat, run, cost.optimizer_step, run.latest_end());
  result.step_overhead = cost.fixed_costs.step;
  result.makespan = last - first + cost.fixed_costs.step;
  // The compute on another rank whose output compute action a (on rank r) consumes, if any.
  const auto remote_producer = [&flat](const Action& a, std::int32_t r) {
    if (a.op == Op::F && a.stage > 0 && flat.rank_of(a.stage - 1) != r) return flat.find(Op::F, a.stage - 1, a.microbatch);
    if ((a.op == Op::B || a.op == Op::BI) && a.stage + 1 < flat.stages && flat.rank_of(a.stage + 1) != r) {
      return flat.backward_input(a.stage + 1, a.microbatch);
    }
    return detail::no_action;
  };
  // Where each action of a pair sits in the timeline: the pair's interval split by own times.
  std::vector<std::pair<std::size_t, double>> pair_splits;  // (first action, split point)
  const bool has_pairs = flat.has_pairs;
  for (std::size_t r = 0; r < ranks; ++r) {
    SimRankStats& st = result.ranks[r];
    bool seen = false;
    double previous_end = first;
    const Action* prog = flat.rank_actions[r];
    const std::int32_t begin = flat.rank_begin[r], end = flat.rank_begin[r + 1];
    for (std::int32_t i = begin; i < end; ++i) {
      const auto ii = static_cast<std::size_t>(i);
      const Action& a = prog[i - begin];
      if (is_comm(a.op) || run.on_copy_stream(i)) continue;
      if (!seen) st.first_start = run.start(ii);
      seen = true;
      st.last_end = run.end(ii);
      st.busy += run.end(ii) - run.start(ii);
      if (has_pairs && a.group != 0 && i + 1 < end && prog[i + 1 - begin].group == a.group) {
        // One interval for two actions: counted once, waiting for the later remote input.
        const Action& b = prog[i + 1 - begin];
        double ready = -1.0;
        for (const std::int32_t x : {remote_producer(a, static_cast<std::int32_t>(r)),
                                     remote_producer(b, static_cast<std::int32_t>(r))}) {
          if (x != detail::no_action) ready = std::max(ready, run.end(static_cast<std::size_t>(x)));
        }
        if (ready >= 0.0 && run.start(ii) > std::max(previous_end, ready)) {
          st.input_wait += run.start(ii) - std::max(previous_end, ready);
        }
        const double own_a = own_time(ii, a), own_b = own_time(ii + 1, b);
        const double share = own_a + own_b > 0.0 ? own_a / (own_a + own_b) : 0.5;
        pair_splits.emplace_back(ii, run.start(ii) + (run.end(ii) - run.start(ii)) * share);
        previous_end = run.end(ii);
        ++i;
        continue;
      }
      const std::int32_t producer = remote_producer(a, static_cast<std::int32_t>(r));
      if (producer != detail::no_action) {
        const double ready = std::max(previous_end, run.end(static_cast<std::size_t>(producer)));
        if (run.start(ii) > ready) st.input_wait += run.start(ii) - ready;
      }
      previous_end = run.end(ii);
    }
    st.span = st.last_end - st.first_start;
    st.idle = result.makespan - st.busy;
    st.idle_in_span = st.span - st.busy;
    result.ideal_time = std::max(result.ideal_time, st.busy);
  }
  double idle = 0.0;
  for (const SimRankStats& st : result.ranks) idle += st.idle;
  result.bubble_fraction = result.makespan > 0.0 ? idle / (static_cast<double>(ranks) * result.makespan) : 0.0;
  result.bubble_vs_ideal = result.ideal_time > 0.0 ? (result.makespan - result.ideal_time) / result.ideal_time : 0.0;

  const MemoryModel shares = memory_model_for(cost, flat.stages);
  const StageFractions fractions = detail::stage_fractions(shares);
  // One stored activation of each stage, or of each (stage, micro-batch) when the model has
  // per-micro-batch costs or scales, asked of the model once each.
  ActivationSizes bytes{shares.activation_bytes.data(), 1, 0};
  std::vector<double> bytes_table;
  if (!(cost.per_microbatch.empty() && cost.microbatch_scale.empty()) && flat.has_backward) {
    const auto stages = static_cast<std::size_t>(flat.stages), per = static_cast<std::size_t>(M);
    bytes_table.resize(stages * per);
    for (std::size_t st = 0; st < stages; ++st) {
      for (std::size_t mb = 0; mb < per; ++mb) {
        bytes_table[st * per + mb] =
            detail::activation_bytes_at(cost, static_cast<std::int32_t>(st), static_cast<std::int32_t>(mb), M);
      }
    }
    bytes = ActivationSizes{bytes_table.data(), per, 1};
  }
  detail::measure_memory(flat, bytes, fractions, report);
  detail::memory_over_time(flat, run, bytes, fractions, result);
  result.memory = std::move(report.memory);
  result.stage_peak_in_flight = std::move(report.stage_peak_in_flight);

  result.timeline.ranks = flat.ranks;
  result.timeline.unit = cost.unit;
  if (options.record_timeline) {
    result.timeline.spans.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const Lane lane = run.on_comm_stream(static_cast<std::int32_t>(i))   ? Lane::comm
                        : run.on_copy_stream(static_cast<std::int32_t>(i)) ? Lane::copy
                                                                           : Lane::compute;
      result.timeline.spans[i] = Span{flat.owner[i], flat.at(static_cast<std::int32_t>(i)), lane, run.start(i), run.end(i)};
    }
    for (const auto& [i, split] : pair_splits) {
      result.timeline.spans[i].end = split;
      result.timeline.spans[i + 1].start = split;
    }
  }
  return result;
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE SimResult simulate(const Schedule& schedule, const CostModel& cost, const SimOptions& options,
                                        Workspace& ws) {
  if (!options.ideal_communication && !is_lowered(schedule) && !schedule.placement.empty() &&
      schedule.microbatches >= 1) {  // (otherwise the checks name the problem)
    const LoweredSchedule lowered =
        lower(schedule, lower_options_for(cost, schedule.stages(), schedule.microbatches), ws);
    return detail::simulate_lowered(schedule, lowered.schedule(), lowered.proven(), true, cost, options, ws);
  }
  return detail::simulate_lowered(schedule, schedule, false, false, cost, options, ws);
}

[[nodiscard]] PPSCHED_OUTLINE SimResult simulate(const LoweredSchedule& lowered, const CostModel& cost,
                                        const SimOptions& options, Workspace& ws) {
  const Schedule& s = lowered.schedule();
  const bool relowered = !options.ideal_communication && !lowered.communicates() && !s.placement.empty() &&
                         s.microbatches >= 1;
  return detail::simulate_lowered(s, s, lowered.proven(), relowered, cost, options, ws);
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[noreturn]] PPSCHED_OUTLINE void fail_simulation(const Schedule& s, const ValidationReport& report) {
  std::string list;
  for (const Problem& p : report.problems) list += "\n  - " + p.message;
  if (report.unlisted_problems != 0) list += detail::concat("\n  - ... and ", report.unlisted_problems, " more");
  detail::fail({"simulate: schedule '" + s.name + "'", "is not valid:" + list, "", "validate() lists every problem with its fix"});
}

}  // namespace detail
}  // namespace ppsched
