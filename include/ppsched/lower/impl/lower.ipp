// The bodies of <ppsched/lower/lower.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE::detail {

[[nodiscard]] PPSCHED_OUTLINE LoweringCandidate lower_by(const Schedule& schedule, const FlatSchedule& flat,
                                                         std::span<const double> durations,
                                                         const std::vector<double>& delay, const LowerOptions& options,
                                                         Workspace& ws) {
  const std::size_t n = flat.size();
  AbstractExecution ideal(flat, StreamMode::separate_comm_stream, durations, delay.empty() ? nullptr : &delay,
                          options.fb_overlap, &ws.execution());
  if (!ideal.run()) fail_lowering(schedule, "\n  - deadlock: " + ideal.describe_stuck());

  const std::int32_t S = flat.stages;
  const auto ranks = static_cast<std::size_t>(flat.ranks);

  // Which compute actions feed a transfer, and to which rank.
  auto receiver_of = [&](std::int32_t i) {
    const Action& a = flat.at(i);
    const std::int32_t r = flat.owner[static_cast<std::size_t>(i)];
    if (a.op == Op::F && a.stage + 1 < S && flat.rank_of(a.stage + 1) != r) return flat.rank_of(a.stage + 1);
    if ((a.op == Op::B || a.op == Op::BI) && a.stage > 0 && flat.rank_of(a.stage - 1) != r) return flat.rank_of(a.stage - 1);
    return std::int32_t{-1};
  };
  // Each rank's communication lives in one region of `comm`: its sends, produced in compute
  // order and so sorted by key, then its receives, which arrive source rank by source rank,
  // each source's sorted by key: a few sorted runs per rank, merged when the program is built.
  std::vector<std::size_t> sends_of(ranks, 0), region(ranks + 1, 0);
  LoweringBuffers& buffers = ws.lowering();
  scratch_vector<std::int32_t>& receivers = buffers.receivers;
  receivers.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t to = receiver_of(static_cast<std::int32_t>(i));
    receivers[i] = to;
    if (to < 0) continue;
    ++sends_of[static_cast<std::size_t>(flat.owner[i])];
    ++region[static_cast<std::size_t>(to) + 1];
  }
  for (std::size_t r = 0; r < ranks; ++r) region[r + 1] += region[r] + sends_of[r];
  scratch_vector<CommEntry>& comm = buffers.comm;
  comm.resize(region[ranks]);  // every entry is written below
  std::vector<std::size_t> send_fill(region.begin(), region.end() - 1), recv_fill(ranks);
  for (std::size_t r = 0; r < ranks; ++r) recv_fill[r] = region[r] + sends_of[r];
  std::vector<std::vector<std::size_t>> runs(ranks);  // starts of the runs of each region
  std::vector<std::int32_t> last_source(ranks, -1);
  for (std::size_t r = 0; r < ranks; ++r) runs[r].push_back(region[r]);
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(n); ++i) {
    const std::int32_t to = receivers[static_cast<std::size_t>(i)];
    if (to < 0) continue;
    const auto from = static_cast<std::size_t>(flat.owner[static_cast<std::size_t>(i)]);
    const auto dest = static_cast<std::size_t>(to);
    const double key = ideal.end(static_cast<std::size_t>(i));
    // A send goes after its producer only if the producer ends after it starts: a time so
    // small that adding it to the clock changes nothing would put the send first.
    if (!(key > ideal.start(static_cast<std::size_t>(i)))) {
      const Action& a = flat.at(i);
      detail::fail({"lower options",
            detail::concat("compute_time(", to_string(a), ") = ", durations[static_cast<std::size_t>(i)], " vanishes against its start time ",
                   ideal.start(static_cast<std::size_t>(i)), " in the idealised run"),
            "", "give compute times within a factor of about 1e12 of each other (a free action may be 0 in a CostModel)"});
    }
    comm[send_fill[from]++] = {key, i, 0};
    if (last_source[dest] != static_cast<std::int32_t>(from)) {
      last_source[dest] = static_cast<std::int32_t>(from);
      runs[dest].push_back(recv_fill[dest]);
    }
    comm[recv_fill[dest]++] = {key, i, 1};
  }

  LoweringCandidate result;
  result.communicates = !comm.empty();
  result.ideal_makespan = ideal.latest_end() - ideal.earliest_start();
  Schedule& out = result.schedule;
  out.name = schedule.name;
  out.ranks = schedule.ranks;
  out.microbatches = schedule.microbatches;
  out.placement = schedule.placement;
  out.split_backward = schedule.split_backward;
  out.programs.resize(ranks);
  // Each rank's runs merged into one (key, id) order; (key, id) is unique on a rank (an id
  // is one transfer, whose two sides are on two ranks), so the order is total.
  scratch_vector<CommEntry>& merged = buffers.merged;
  scratch_vector<CommEntry>& scratch = buffers.scratch;
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::vector<std::size_t>& starts = runs[r];
    merged.assign(comm.begin() + static_cast<std::ptrdiff_t>(region[r]),
                  comm.begin() + static_cast<std::ptrdiff_t>(starts.size() > 1 ? starts[1] : region[r + 1]));
    for (std::size_t k = 1; k < starts.size(); ++k) {
      const auto run_begin = comm.begin() + static_cast<std::ptrdiff_t>(starts[k]);
      const auto run_end = comm.begin() + static_cast<std::ptrdiff_t>(k + 1 < starts.size() ? starts[k + 1] : region[r + 1]);
      scratch.resize(merged.size() + static_cast<std::size_t>(run_end - run_begin));
      std::merge(merged.begin(), merged.end(), run_begin, run_end, scratch.begin(), comm_before);
      std::swap(merged, scratch);
    }
    auto& prog = out.programs[r];
    const std::size_t comm_count = merged.size();
    const std::int32_t begin = flat.rank_begin[r];
    const auto compute_count = static_cast<std::size_t>(flat.rank_begin[r + 1] - begin);
    prog.resize(comm_count + compute_count);
    Action* emitted = prog.data();
    std::size_t c = 0;  // the next communication in `merged`
    const Action* const compute = flat.rank_actions[r];
    std::uint32_t next_group = 1;
    if (flat.has_pairs) {
      for (std::size_t k = 0; k < compute_count; ++k) next_group = std::max(next_group, compute[k].group + 1);
    }
    // Emits every communication with the next one's key, as one group when there are several.
    auto emit_comm = [&]() {
      const double key = merged[c].key;
      Action* const first = emitted;
      for (; c < comm_count && merged[c].key == key; ++c) {
        *emitted++ = comm_action(flat.at(merged[c].producer), merged[c].receive != 0);
      }
      if (options.group_simultaneous && emitted - first > 1) {
        for (Action* x = first; x != emitted; ++x) x->group = next_group;
        ++next_group;
      }
    };
    for (std::size_t k = 0; k < compute_count; ++k) {
      // Both actions of a pair start together: no communication goes between them. Copies run
      // on their own stream, whose starts are not in step with the compute stream's: they keep
      // their place, and communication goes by the compute stream's starts alone.
      const double start = ideal.start(static_cast<std::size_t>(begin) + k);
      while (!is_copy(compute[k].op) && c < comm_count && merged[c].key <= start) emit_comm();
      *emitted++ = compute[k];
    }
    while (c < comm_count) emit_comm();
  }
  return result;
}

[[nodiscard]] PPSCHED_OUTLINE double lowered_makespan(const Schedule& lowered, const FlatSchedule& compute_flat,
                                                      std::span<const double> durations, const LowerOptions& options,
                                                      Workspace& ws) {
  FlatSchedule& flat = ws.lowering().candidate;
  std::vector<Problem> problems;
  std::size_t unlisted = 0;
  ProblemSink sink(problems, unlisted, 1);
  static_checks(lowered, flat, sink, false, true);  // a lowering: only indexed
  // A transfer takes its send's transfer time; a compute action its time in the compute-only
  // schedule, whose actions each rank of a lowering runs in the same order.
  scratch_vector<double>& time_of = ws.execution().durations;
  time_of.resize(flat.size());
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    const Action* prog = flat.rank_actions[ri];
    std::size_t compute = static_cast<std::size_t>(compute_flat.rank_begin[ri]);
    for (std::int32_t i = flat.rank_begin[ri]; i < flat.rank_begin[ri + 1]; ++i) {
      const Action& a = prog[i - flat.rank_begin[ri]];
      time_of[static_cast<std::size_t>(i)] = is_comm(a.op) ? options.transfer_time(send_of(a)) : durations[compute++];
    }
  }
  AbstractExecution run(flat, StreamMode::separate_comm_stream, time_of, nullptr, options.fb_overlap, &ws.execution());
  if (!run.run()) return std::numeric_limits<double>::infinity();  // (a lowering cannot deadlock)
  return run.latest_end() - run.earliest_start();
}

}  // namespace ppsched::detail

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE LoweredSchedule lower(const Schedule& schedule, const LowerOptions& options, Workspace& ws) {
  if (is_lowered(schedule)) return detail::LoweringAccess::unproven(schedule);

  detail::FlatSchedule& flat = ws.flat();
  {
    std::vector<Problem> problems;
    std::size_t unlisted = 0;
    detail::ProblemSink sink(problems, unlisted, 20);
    detail::static_checks(schedule, flat, sink);
    if (sink.any()) {
      std::string list;
      for (const Problem& p : problems) list += "\n  - " + p.message;
      if (unlisted != 0) list += detail::concat("\n  - ... and ", unlisted, " more");
      detail::fail_lowering(schedule, list);
    }
  }

  if (!(options.fb_overlap >= 0.0 && options.fb_overlap <= 1.0)) {
    detail::fail({"lower options", detail::concat("fb_overlap = ", options.fb_overlap, " is outside [0, 1]"), "fb_overlap",
          "give the share of the shorter action of an overlapped pair hidden under the longer: 0 (none) to 1"});
  }
  const std::size_t n = flat.size();
  auto duration = [&](const Action& a) {
    const double t = options.compute_time ? options.compute_time(a) : detail::default_lower_time(a);
    if (!(std::isfinite(t) && t > 0.0)) {
      detail::fail({"lower options", detail::concat("compute_time(", to_string(a), ") is ", t), "",
            "give every compute action a positive, finite time: lowering orders communication by a timeline"});
    }
    return t;
  };
  std::vector<double> delay;
  bool transfers_take_time = false;
  if (options.transfer_time) {
    delay.assign(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      const Action& a = flat.at(static_cast<std::int32_t>(i));
      Action send{};
      if (a.op == Op::F && a.stage > 0 && flat.rank_of(a.stage - 1) != flat.owner[i]) {
        send = Action{Op::SEND_F, a.stage - 1, a.microbatch, 0};
      } else if ((a.op == Op::B || a.op == Op::BI) && a.stage + 1 < flat.stages && flat.rank_of(a.stage + 1) != flat.owner[i]) {
        send = Action{Op::SEND_B, a.stage + 1, a.microbatch, 0};
      } else {
        continue;
      }
      const double t = options.transfer_time(send);
      if (!(std::isfinite(t) && t >= 0.0)) {
        detail::fail({"lower options", detail::concat("transfer_time(", to_string(send), ") is ", t), "",
              "give every transfer a finite time >= 0"});
      }
      delay[i] = t;
      transfers_take_time = transfers_take_time || t > 0.0;
    }
  }
  // Each action's compute time, asked once (after the transfer times, whose errors come first).
  detail::scratch_vector<double>& durations = ws.lowering().durations;
  durations.resize(n);
  for (std::size_t i = 0; i < n; ++i) durations[i] = duration(flat.at(static_cast<std::int32_t>(i)));
  detail::LoweringCandidate best = detail::lower_by(schedule, flat, durations, delay, options, ws);
  constexpr double tie = 1e-9;  // relative: sums of the same times in another order
  double fastest = 0.0;
  if (transfers_take_time) fastest = detail::lowered_makespan(best.schedule, flat, durations, options, ws);
  if (transfers_take_time && fastest > best.ideal_makespan * (1.0 + tie)) {
    // The plainer orders, each run only when it differs from those already run. The order by
    // the compute times alone is the default one when they are proportional to the default's.
    const std::vector<double> free_transfers;
    bool proportional = !options.compute_time;
    if (options.compute_time) {
      const double k = durations[0] / detail::default_lower_time(flat.at(0));
      proportional = true;
      for (std::size_t i = 1; i < n && proportional; ++i) {
        const Action& a = flat.at(static_cast<std::int32_t>(i));
        proportional = durations[i] == k * detail::default_lower_time(a);
      }
    }
    std::vector<Schedule> tried;
    for (const bool by_default : {false, true}) {
      if (!by_default && proportional) continue;
      if (by_default) {  // (the execution's own array: lowered_makespan fills it only after this run)
        detail::scratch_vector<double>& defaults = ws.execution().durations;
        defaults.resize(n);
        for (std::size_t i = 0; i < n; ++i) defaults[i] = detail::default_lower_time(flat.at(static_cast<std::int32_t>(i)));
      }
      detail::LoweringCandidate c =
          detail::lower_by(schedule, flat, by_default ? ws.execution().durations : durations, free_transfers, options, ws);
      if (c.schedule == best.schedule || std::find(tried.begin(), tried.end(), c.schedule) != tried.end()) continue;
      const double t = detail::lowered_makespan(c.schedule, flat, durations, options, ws);
      if (t < fastest * (1.0 - tie)) {
        fastest = t;
        tried.push_back(std::move(best.schedule));
        best = std::move(c);
      } else {
        tried.push_back(std::move(c.schedule));
      }
    }
  }
  // What lowering proves of the result, validate() and simulate() need not prove again.
  return detail::LoweringAccess::proven(std::move(best.schedule), best.communicates, flat.has_backward, flat.has_pairs);
}

[[nodiscard]] PPSCHED_OUTLINE LowerOptions lower_options_for(const CostModel& c, std::int32_t stages, std::int32_t microbatches) {
  check_cost_model(c, stages, microbatches);
  double largest = 0.0;
  for (const StageCost& s : c.per_microbatch.empty() ? c.stages : c.per_microbatch) {
    largest = std::max({largest, s.forward, s.backward.value_or(s.backward_input + s.backward_weight)});
  }
  double scale = 1.0;
  for (const double k : c.microbatch_scale) scale = std::max(scale, k);
  const double tiny = largest > 0.0 ? largest * scale * 1e-6 : 1.0;
  LowerOptions options;
  options.fb_overlap = c.fb_overlap;
  if (c.per_microbatch.empty() && c.microbatch_scale.empty()) {
    // Times depend on (op, stage) only: look them up (lowering asks once per action).
    std::vector<double> table(static_cast<std::size_t>(stages) * op_count, 0.0);
    for (std::int32_t st = 0; st < stages; ++st) {
      for (const Op op : {Op::F, Op::B, Op::BI, Op::BW, Op::R, Op::OFFLOAD, Op::RELOAD}) {
        const double t = compute_time(c, Action{op, st, 0, 0}, microbatches);
        table[static_cast<std::size_t>(st) * op_count + static_cast<std::size_t>(op)] = t > tiny ? t : tiny;
      }
      if (st + 1 < stages) {
        table[static_cast<std::size_t>(st) * op_count + static_cast<std::size_t>(Op::SEND_F)] =
            transfer_time(c, Action{Op::SEND_F, st, 0, 0}, microbatches);
      }
      if (st > 0) {
        table[static_cast<std::size_t>(st) * op_count + static_cast<std::size_t>(Op::SEND_B)] =
            transfer_time(c, Action{Op::SEND_B, st, 0, 0}, microbatches);
      }
    }
    auto lookup = [table = std::move(table), stages, microbatches](const Action& a) {
      detail::check_fits(a, stages, microbatches);
      return table[static_cast<std::size_t>(a.stage) * op_count + static_cast<std::size_t>(a.op)];
    };
    options.compute_time = lookup;
    options.transfer_time = lookup;
    return options;
  }
  options.compute_time = [c, stages, microbatches, tiny](const Action& a) {
    detail::check_fits(a, stages, microbatches);
    const double t = compute_time(c, a, microbatches);
    return t > tiny ? t : tiny;
  };
  options.transfer_time = [c, stages, microbatches](const Action& send) {
    detail::check_fits(send, stages, microbatches);
    return transfer_time(c, send, microbatches);
  };
  return options;
}

}  // namespace ppsched::PPSCHED_MODE

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE bool is_lowered(const Schedule& s) noexcept {
  for (const auto& prog : s.programs) {
    for (const Action& a : prog) {
      if (is_comm(a.op)) return true;
    }
  }
  return false;
}

[[nodiscard]] PPSCHED_OUTLINE Schedule strip_communication(const Schedule& s) {
  Schedule out = s;
  for (auto& prog : out.programs) {
    prog.erase(std::remove_if(prog.begin(), prog.end(), [](const Action& a) { return is_comm(a.op); }), prog.end());
  }
  return out;
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE Action comm_action(const Action& producer, bool receive) noexcept {
  if (producer.op == Op::F) {
    return receive ? Action{Op::RECV_F, producer.stage + 1, producer.microbatch, 0}
                   : Action{Op::SEND_F, producer.stage, producer.microbatch, 0};
  }
  return receive ? Action{Op::RECV_B, producer.stage - 1, producer.microbatch, 0}
                 : Action{Op::SEND_B, producer.stage, producer.microbatch, 0};
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[noreturn]] PPSCHED_OUTLINE void fail_lowering(const Schedule& s, const std::string& problems) {
  detail::fail({"lower: schedule '" + s.name + "'", "is not a valid compute-only schedule:" + problems, "",
        "fix these problems (validate() lists them all) before lowering"});
}

}  // namespace detail
}  // namespace ppsched
