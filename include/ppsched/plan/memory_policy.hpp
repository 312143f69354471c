// Memory policies (issue 23, item 2): per stage, what a step does with the activations its
// forwards store — keep them (none), recompute them all before the backward (full), recompute a
// part (selective: a fraction, or the bytes and the time the profile gives for a part of the
// stage's layers), move them to host memory and back (offload, all or a fraction), or recompute
// layer by layer from the layers' inputs (layer-wise), those inputs kept or offloaded.
//
//   std::vector<MemoryPolicy> per_stage(8, MemoryPolicy::none());
//   per_stage[0] = MemoryPolicy::full_recompute();
//   per_stage[1] = MemoryPolicy::offload(0.5);
//   MemoryPlan plan = apply_memory_policies(make_schedule("1f1b", {8, 32, 1}), costs, per_stage);
//   simulate(plan.schedule, plan.costs);  // validate(plan.schedule) holds (it was checked)
//
// apply_memory_policies writes the policies into the cost model (StageCost::recompute_saved_bytes,
// recompute and offload_bytes) and inserts the actions into a compute-only schedule where a run
// of it with those costs says they cost least:
// - R(s, mb) right before the backward that needs it, where it runs while the backward waits
//   for its input gradient; when that gap is shorter than R, into the closest earlier idle gap
//   of the compute stream that it fills entirely (Mario's placement of recomputation into
//   bubbles), passing no forward and at most MemoryPolicyOptions::max_backwards_crossed
//   backwards (0: never beside another restored activation);
// - OFFLOAD(s, mb) right after F(s, mb), and RELOAD(s, mb) early enough before the backward that
//   the copy, queued behind at most one other on the copy lane, ends before the backward would
//   start (as late as that allows, so the reloaded bytes are held briefly), never before its
//   OFFLOAD; a micro-batch whose backward follows its forward too closely for the copies to
//   hide (the last stage's) keeps its activation (MemoryPolicyOptions::offload_only_where_hidden).
// - layer-wise recomputation with offloaded checkpoints (MemoryPolicy::layerwise_offload): both,
//   F, OFFLOAD, RELOAD, R, backward, with R right before the backward and the RELOAD early
//   enough to end before R starts; where the copies could not hide, the micro-batch keeps its
//   checkpoints (layer-wise recomputation alone).
// The result is validated (docs/execution-model.md, "Memory actions") before it is returned.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/plan/detail/memory_policy.hpp"
#include "ppsched/plan/memory_policy_types.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// Inserts the memory actions of `policies` into the compute-only `schedule` (see the header
// comment) and returns it with the costs that price them. Throws ppsched::error for a schedule
// with communication or memory actions already, an invalid one (its problems named), policies
// of the wrong count or out of range, or a cost model that does not fit.
[[nodiscard]] inline MemoryPlan apply_memory_policies(const Schedule& schedule, const CostModel& costs,
                                                      std::span<const MemoryPolicy> policies,
                                                      const MemoryPolicyOptions& options = {}) {
  using detail::concat;
  const std::string subject = "apply_memory_policies: schedule '" + schedule.name + "'";
  for (std::size_t r = 0; r < schedule.programs.size(); ++r) {
    for (const Action& a : schedule.programs[r]) {
      if (is_comm(a.op) || is_memory(a.op)) {
        detail::fail({subject, detail::concat("has ", to_string(a), " on rank ", r), "",
              "give the compute-only schedule (strip_communication, strip_memory_actions): the policies place "
              "the memory actions, and lower() the communication after them"});
      }
    }
  }
  const std::int32_t S = schedule.stages(), M = schedule.microbatches;
  {
    const ValidationReport report = validate(schedule, ValidateOptions{{}, false, 20});
    if (!report.ok()) {
      std::string list;
      for (const Problem& p : report.problems) list += "\n  - " + p.message;
      detail::fail({subject, "is not valid:" + list, "", "validate() lists every problem with its fix"});
    }
  }
  MemoryPlan plan;
  plan.costs = detail::costs_with_policies(costs, policies, S, M);
  for (std::int32_t s = 0; s < S; ++s) plan.policies.push_back(policies[policies.size() == 1 ? 0 : static_cast<std::size_t>(s)]);
  plan.schedule = schedule;
  const bool any = std::any_of(plan.policies.begin(), plan.policies.end(),
                               [](const MemoryPolicy& p) { return p.kind != MemoryPolicyKind::none; });
  const bool training = std::any_of(schedule.programs.begin(), schedule.programs.end(), [](const auto& prog) {
    return std::any_of(prog.begin(), prog.end(), [](const Action& a) { return a.op == Op::B || a.op == Op::BI; });
  });
  if (!any || !training) return plan;

  // When each compute action runs without memory actions, with the communication lower() writes.
  const SimResult run = simulate(schedule, costs);
  std::map<std::tuple<Op, std::int32_t, std::int32_t>, std::pair<double, double>> times;
  for (const Span& sp : run.timeline.spans) {
    if (is_compute(sp.action.op)) times[{sp.action.op, sp.action.stage, sp.action.microbatch}] = {sp.start, sp.end};
  }
  const auto time_of = [&](const Action& a) { return times.at({a.op, a.stage, a.microbatch}); };

  for (std::size_t r = 0; r < schedule.programs.size(); ++r) {
    const std::vector<Action>& prog = schedule.programs[r];
    const std::size_t n = prog.size();
    // What goes before each position (before[n]: at the end), in the order it is inserted.
    std::vector<std::vector<Action>> before(n + 1);
    // Idle time left before each action on the compute stream (R placed into it uses it up).
    std::vector<double> idle(n, 0.0);
    for (std::size_t k = 1; k < n; ++k) idle[k] = std::max(0.0, time_of(prog[k]).first - time_of(prog[k - 1]).second);
    // Nothing goes between the two actions of an overlapped pair: a place inside one moves to
    // before it.
    const auto not_in_pair = [&prog](std::size_t at) {
      const bool splits = at > 0 && at < prog.size() && prog[at].group != 0 && prog[at - 1].group == prog[at].group;
      return splits ? at - 1 : at;
    };
    std::map<std::pair<std::int32_t, std::int32_t>, std::size_t> forward_at;
    for (std::size_t k = 0; k < n; ++k) {
      const Action& a = prog[k];
      if (a.op == Op::F) forward_at[{a.stage, a.microbatch}] = k;
      if (a.op != Op::B && a.op != Op::BI) continue;
      const MemoryPolicy& p = plan.policies[static_cast<std::size_t>(a.stage)];
      if (p.kind == MemoryPolicyKind::none) continue;
      const std::size_t f = forward_at.at({a.stage, a.microbatch});
      // Right after F, or after the pair F is the first of.
      const std::size_t after_f = f + 1 < n && prog[f].group != 0 && prog[f + 1].group == prog[f].group ? f + 2 : f + 1;
      // Offload (of the activation, or of a layer-wise recomputation's checkpoints): right after
      // F; the reload early enough that its copy (behind one other) ends before the backward's
      // start, less the recomputation that runs between them, as late as that allows.
      if (p.offloads()) {
        const double copy = compute_time(plan.costs, Action{Op::RELOAD, a.stage, a.microbatch, 0}, M);
        const double r_time = p.recomputes() ? compute_time(plan.costs, Action{Op::R, a.stage, a.microbatch, 0}, M) : 0.0;
        const bool hidden = !options.offload_only_where_hidden ||
                            time_of(a).first - time_of(prog[f]).second >= (options.reload_lead_copies + 1.0) * copy + r_time;
        if (hidden) {
          before[after_f].insert(before[after_f].begin(), Action{Op::OFFLOAD, a.stage, a.microbatch, 0});
          // Issued after prog[at - 1], the reload starts when that ends (docs/execution-model.md).
          const double need = time_of(a).first - r_time - options.reload_lead_copies * copy;
          std::size_t at = k;
          while (at > after_f && time_of(prog[at - 1]).second > need) --at;
          before[std::max(not_in_pair(at), after_f)].push_back(Action{Op::RELOAD, a.stage, a.microbatch, 0});
        }
      }
      if (p.recomputes()) {
        const double t = compute_time(plan.costs, Action{Op::R, a.stage, a.microbatch, 0}, M);
        std::size_t at = k;
        // Layer-wise, the backward does the recomputation layer by layer: R (its whole time)
        // stays right before the backward, where it runs while that waits for its gradient
        // (after the RELOAD of its checkpoints, placed above, where they are offloaded).
        if (options.recompute_into_idle && t > 0.0 && !p.layerwise()) {
          // Right before its backward, R runs while the backward waits for its input gradient:
          // where that gap holds it, R stays there. Otherwise the gap closest to the backward
          // that R fills entirely, passing no F and at most max_backwards_crossed backwards
          // (each holds the restored activation beside one more).
          std::int32_t crossed = 0;
          for (std::size_t g = k; g >= after_f; --g) {  // (after_f >= 1)
            if (idle[g] >= t && not_in_pair(g) == g) {
              at = g;
              idle[g] -= t;
              break;
            }
            if (g == after_f) break;
            const Op o = prog[g - 1].op;
            if (o == Op::F || ((o == Op::B || o == Op::BI) && ++crossed > options.max_backwards_crossed)) break;
          }
        }
        before[std::max(not_in_pair(at), after_f)].push_back(Action{Op::R, a.stage, a.microbatch, 0});
      }
    }
    std::vector<Action> out;
    out.reserve(n + 2 * static_cast<std::size_t>(M) * static_cast<std::size_t>(S));
    for (std::size_t k = 0; k <= n; ++k) {
      out.insert(out.end(), before[k].begin(), before[k].end());
      if (k < n) out.push_back(prog[k]);
    }
    plan.schedule.programs[r] = std::move(out);
  }
  plan.schedule.name = schedule.name + "+memory";
  const ValidationReport report = validate(plan.schedule, ValidateOptions{{}, true, 20});
  if (!report.ok()) {  // a bug here, not the caller's: say what was made
    std::string list;
    for (const Problem& p : report.problems) list += "\n  - " + p.message;
    detail::fail({subject, "the memory actions placed are not valid:" + list, "",
          "report this with the schedule and the policies; place the actions by hand meanwhile"});
  }
  return plan;
}

[[nodiscard]] inline MemoryPlan apply_memory_policies(const Schedule& schedule, const CostModel& costs,
                                                      std::initializer_list<MemoryPolicy> policies,
                                                      const MemoryPolicyOptions& options = {}) {
  return apply_memory_policies(schedule, costs, std::span<const MemoryPolicy>(policies.begin(), policies.size()), options);
}

}  // namespace plan
}  // namespace ppsched
