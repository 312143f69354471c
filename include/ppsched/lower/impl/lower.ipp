// The bodies of <ppsched/lower/lower.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/lower/lower.hpp"

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
    fail({"lower options", detail::concat("fb_overlap = ", options.fb_overlap, " is outside [0, 1]"), "fb_overlap",
          "give the share of the shorter action of an overlapped pair hidden under the longer: 0 (none) to 1"});
  }
  const std::size_t n = flat.size();
  auto duration = [&](const Action& a) {
    const double t = options.compute_time ? options.compute_time(a) : detail::default_lower_time(a);
    if (!(std::isfinite(t) && t > 0.0)) {
      fail({"lower options", detail::concat("compute_time(", to_string(a), ") is ", t), "",
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
        fail({"lower options", detail::concat("transfer_time(", to_string(send), ") is ", t), "",
              "give every transfer a finite time >= 0"});
      }
      delay[i] = t;
      transfers_take_time = transfers_take_time || t > 0.0;
    }
  }
  detail::LoweringCandidate best = detail::lower_by(schedule, flat, duration, delay, options, ws);
  constexpr double tie = 1e-9;  // relative: sums of the same times in another order
  double fastest = 0.0;
  if (transfers_take_time) fastest = detail::lowered_makespan(best.schedule, duration, options, ws);
  if (transfers_take_time && fastest > best.ideal_makespan * (1.0 + tie)) {
    // The plainer orders, each run only when it differs from those already run. The order by
    // the compute times alone is the default one when they are proportional to the default's.
    const std::vector<double> free_transfers;
    bool proportional = !options.compute_time;
    if (options.compute_time) {
      const double k = duration(flat.at(0)) / detail::default_lower_time(flat.at(0));
      proportional = true;
      for (std::size_t i = 1; i < n && proportional; ++i) {
        const Action& a = flat.at(static_cast<std::int32_t>(i));
        proportional = duration(a) == k * detail::default_lower_time(a);
      }
    }
    std::vector<Schedule> tried;
    for (const bool by_default : {false, true}) {
      if (!by_default && proportional) continue;
      detail::LoweringCandidate c =
          by_default ? detail::lower_by(schedule, flat, detail::default_lower_time, free_transfers, options, ws)
                     : detail::lower_by(schedule, flat, duration, free_transfers, options, ws);
      if (c.schedule == best.schedule || std::find(tried.begin(), tried.end(), c.schedule) != tried.end()) continue;
      const double t = detail::lowered_makespan(c.schedule, duration, options, ws);
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
