// Calibration from a run: a measured Timeline of real steps refits the cost model that
// predicted them, so the next plan starts from what this machine did rather than from what a
// profile of stages run alone said. A stage often runs slower inside the runtime than alone
// (other ranks' threads share the cores and the caches; the runtime's own work sits between
// the actions), and a model that does not know it mispredicts every plan by that much.
//
// What is refitted, and how:
//  - each stage's time per compute kind (F, B, BI, BW): the median of that stage's measured
//    spans of the kind, less the fixed cost per action the model would add on top. A kind the
//    run did not execute (BI and BW under 1F1B, B under a zero-bubble schedule) is scaled by
//    the ratio measured for the stage's other backward kind, so a 1F1B run still re-prices
//    zero-bubble candidates;
//  - the fixed cost per step, when the caller gives the step times it measured around
//    run_step (CalibrationOptions::step_times): their median less the timelines' median
//    makespan, the time no span records (otherwise the model's is kept);
//  - the fixed cost per compute action: the one value that makes the simulator's makespan of
//    the run's own schedule equal the measured one (bisection), with the per-transfer cost kept.
// One step is a noisy sample: a step that lost the core for a while puts all of that into the
// fixed cost per action. Give several steps of the run (the medians are then over all of
// them), and see plan/calibrate.hpp for several runs of different shapes.
// The schedule is the one the run executed: each rank's compute actions in the order they
// started (schedule_of_timeline), so a hand-written or searched schedule calibrates as well.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/sim/detail/shared_host.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace detail

// The compute-only schedule a measured run executed: per rank, its compute spans in the order
// they started; the placement from the stages each rank ran. Throws ppsched::error for a
// timeline without compute spans or with a stage on two ranks.
[[nodiscard]] inline Schedule schedule_of_timeline(const Timeline& measured, std::string name = "measured") {
  using detail::concat;
  std::int32_t stages = 0, microbatches = 0;
  std::vector<const Span*> compute;
  for (const Span& s : measured.spans) {
    if (!is_compute(s.action.op)) continue;
    compute.push_back(&s);
    stages = std::max(stages, s.action.stage + 1);
    microbatches = std::max(microbatches, s.action.microbatch + 1);
  }
  if (compute.empty()) {
    detail::fail({"schedule_of_timeline", "the timeline has no compute spans", "Timeline::spans",
          "give the measured timeline of a step (ExecutorOptions::record_timeline on)"});
  }
  Schedule s;
  s.name = std::move(name);
  s.ranks = measured.ranks;
  s.microbatches = microbatches;
  s.placement.assign(static_cast<std::size_t>(stages), -1);
  s.programs.assign(static_cast<std::size_t>(measured.ranks), {});
  std::stable_sort(compute.begin(), compute.end(), [](const Span* a, const Span* b) {
    return std::make_tuple(a->rank, a->start, a->end) < std::make_tuple(b->rank, b->start, b->end);
  });
  for (const Span* sp : compute) {
    if (sp->rank < 0 || sp->rank >= measured.ranks) {
      detail::fail({"schedule_of_timeline", detail::concat("a span on rank ", sp->rank, " of ", measured.ranks), "Timeline::spans",
            "give the timeline as the run recorded it"});
    }
    std::int32_t& r = s.placement[static_cast<std::size_t>(sp->action.stage)];
    if (r != -1 && r != sp->rank) {
      detail::fail({"schedule_of_timeline", detail::concat("stage ", sp->action.stage, " ran on ranks ", r, " and ", sp->rank),
            "Timeline::spans", "give one step of one schedule"});
    }
    r = sp->rank;
    Action a = sp->action;
    a.group = 0;
    s.programs[static_cast<std::size_t>(sp->rank)].push_back(a);
  }
  for (std::size_t st = 0; st < s.placement.size(); ++st) {
    if (s.placement[st] == -1) {
      detail::fail({"schedule_of_timeline", detail::concat("stage ", st, " never ran"), "Timeline::spans", "give a whole step"});
    }
  }
  return s;
}

// A kind's measured median over the model's stage time, per stage: F, B, BI, BW.
using KindScales = std::array<double, 4>;

struct Calibration {
  Schedule schedule;   // what the run executed (schedule_of_timeline)
  CostModel before;    // the model given
  CostModel after;     // refitted: stage times per kind and the fixed cost per action
  std::vector<KindScales> scale;  // per stage: measured / predicted time of F, B, BI, BW (1 where not run)
  std::int32_t steps = 1;           // measured steps the fit read
  double measured_makespan = 0.0;   // in the model's unit: the median step (with the fixed cost per step)
  double predicted_before = 0.0;    // the simulator's makespan of the schedule under `before`
  double predicted_after = 0.0;     // ... under `after` (the fit makes it the measured one)
  // How much the makespan grows per unit of fixed cost per action under `after`: about the
  // compute actions on the step's longest path, the weight of this run's fixed cost per action
  // when several runs are fitted together (recalibrate_plan).
  double action_weight = 0.0;

  // (predicted - measured) / measured, before and after.
  [[nodiscard]] double error_before() const noexcept { return (predicted_before - measured_makespan) / measured_makespan; }
  [[nodiscard]] double error_after() const noexcept { return (predicted_after - measured_makespan) / measured_makespan; }
};

struct CalibrationOptions {
  // Model units per unit of the measured timeline; 0: TimeUnit's converter, as compare() uses
  // it: the factor between two scales ("s", "ms", "us" or "µs", "ns"), 1 between a unit of the
  // model's own and itself, an error for any other pair.
  double model_units_per_measured_unit = 0.0;
  // The steps' times as the caller measured them around run_step, in the timeline's unit: they
  // hold the fixed cost per step, which the timelines do not. Empty: the model's is kept.
  std::vector<double> step_times;
};

// Refits `model` to the measured timelines of one or more steps of one run (module comment).
// The model must be the one the run's schedule was priced with: one StageCost per stage (or one
// for all), no per-micro-batch table. Throws ppsched::error naming what does not fit (no step,
// steps of different schedules or units).
[[nodiscard]] inline Calibration calibrate(const std::vector<Timeline>& steps, const CostModel& model,
                                           const CalibrationOptions& options = {}) {
  using detail::concat;
  const char* who = "calibrate";
  if (steps.empty()) detail::fail({who, "no measured step", "steps", "give the timeline of at least one step"});
  const Timeline& measured = steps.front();
  double k = options.model_units_per_measured_unit;
  if (k == 0.0) {
    k = measured.unit.factor_to(model.unit, who, "Timeline::unit to CostModel::unit",
                                "give CalibrationOptions::model_units_per_measured_unit, or name both units s, ms, us (µs) or ns");
  }
  if (!(k > 0.0)) detail::fail({who, detail::concat("model_units_per_measured_unit = ", k), "CalibrationOptions", "give a factor > 0"});
  if (!model.per_microbatch.empty() || !model.microbatch_scale.empty()) {
    detail::fail({who, "the model has per-micro-batch costs", "CostModel::per_microbatch, microbatch_scale",
          "calibrate a model with one StageCost per stage"});
  }
  Calibration c;
  c.schedule = schedule_of_timeline(measured);
  c.steps = static_cast<std::int32_t>(steps.size());
  const std::int32_t S = c.schedule.stages(), M = c.schedule.microbatches;
  check_cost_model(model, S, M);
  c.before = model;
  std::vector<std::array<std::vector<double>, 4>> times(static_cast<std::size_t>(S));
  std::vector<double> makespans;
  detail::SharedHostLoad load;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (i > 0 && (steps[i].unit != measured.unit || schedule_of_timeline(steps[i]).programs != c.schedule.programs)) {
      detail::fail({who, detail::concat("step ", i, " ran another schedule or unit than step 0"), "steps",
            "give steps of one run (one schedule, one World)"});
    }
    double first = 0.0, last = 0.0;
    bool any = false;
    std::vector<double> rank_last(static_cast<std::size_t>(c.schedule.ranks), -std::numeric_limits<double>::infinity());
    // Where ranks share the host (concurrent_slowdown), a span is its stage's time times the
    // slowdown the other ranks' spans put on it: divided out, or the model would count it twice.
    const bool shared = !model.fixed_costs.concurrent_slowdown.empty();
    if (shared) {
      load.clear();
      for (const Span& sp : steps[i].spans) {
        if (sp.lane == Lane::compute && !is_comm(sp.action.op)) load.add(sp.start, sp.end);
      }
      load.build(model.fixed_costs.concurrent_slowdown);
    }
    for (const Span& sp : steps[i].spans) {
      first = any ? std::min(first, sp.start) : sp.start;
      last = any ? std::max(last, sp.end) : sp.end;
      any = true;
      if (sp.rank >= 0 && static_cast<std::size_t>(sp.rank) < rank_last.size()) {
        rank_last[static_cast<std::size_t>(sp.rank)] = std::max(rank_last[static_cast<std::size_t>(sp.rank)], sp.end);
      }
      if (is_compute(sp.action.op)) {
        const double factor = shared ? load.mean(sp.start, sp.end, 1.0) : 1.0;
        times[static_cast<std::size_t>(sp.action.stage)][static_cast<std::size_t>(sp.action.op)].push_back(
            (sp.end - sp.start) * k / factor);
      }
    }
    // Each rank's optimizer steps, as the simulator places them (after the rank's last action):
    // the timeline has no span for them, so without this the refit fixed_costs.step would hold
    // them a second time beside CostModel::optimizer_step.
    if (!model.optimizer_step.empty()) {
      for (std::int32_t s = 0; s < S; ++s) {
        const std::size_t r = static_cast<std::size_t>(c.schedule.rank_of(s));
        if (r >= rank_last.size() || !(rank_last[r] > -std::numeric_limits<double>::infinity())) continue;
        rank_last[r] += model.optimizer_step[model.optimizer_step.size() == 1 ? 0 : static_cast<std::size_t>(s)] / k;
        last = std::max(last, rank_last[r]);
      }
    }
    // From the step's origin, as the simulator's makespan is: the runtime's time to the first
    // action is part of the step.
    makespans.push_back((last - std::min(0.0, first)) * k);
  }
  const double in_timeline = detail::median_of(makespans);
  if (!(in_timeline > 0.0)) detail::fail({who, "the measured step takes no time", "Timeline::spans", "give a measured step"});
  for (const double t : options.step_times) {
    if (!(t >= 0.0 && t < std::numeric_limits<double>::infinity())) {
      detail::fail({who, detail::concat("a step time of ", t), "CalibrationOptions::step_times", "give the measured times, finite and >= 0"});
    }
  }
  const double step_overhead =
      options.step_times.empty() ? model.fixed_costs.step : std::max(0.0, detail::median_of(options.step_times) * k - in_timeline);
  c.measured_makespan = in_timeline + step_overhead;
  c.predicted_before = simulate(c.schedule, model).makespan;

  CostModel after = model;
  after.fixed_costs.step = step_overhead;
  if (after.stages.size() == 1 && S > 1) after.stages.assign(static_cast<std::size_t>(S), model.stages.front());
  c.scale.assign(static_cast<std::size_t>(S), KindScales{1.0, 1.0, 1.0, 1.0});
  for (std::int32_t s = 0; s < S; ++s) {
    StageCost& st = after.stages[static_cast<std::size_t>(s)];
    const StageCost old = st;
    const std::array<double, 4> predicted{old.forward, old.backward.value_or(old.backward_input + old.backward_weight),
                                          old.backward_input, old.backward_weight};
    std::array<double, 4> fitted = predicted;
    auto& sc = c.scale[static_cast<std::size_t>(s)];
    std::array<bool, 4> seen{};
    for (std::size_t kind = 0; kind < 4; ++kind) {
      const auto& v = times[static_cast<std::size_t>(s)][kind];
      if (v.empty()) continue;
      seen[kind] = true;
      fitted[kind] = std::max(0.0, detail::median_of(v) - model.fixed_costs.action);
      if (predicted[kind] > 0.0) sc[kind] = fitted[kind] / predicted[kind];
    }
    // A backward kind the run did not execute takes the ratio measured for the other.
    const double split_scale = seen[2] && seen[3] ? (fitted[2] + fitted[3]) / std::max(predicted[2] + predicted[3], 1e-300)
                                                  : 1.0;
    if (seen[1] && !seen[2] && !seen[3]) {
      sc[2] = sc[3] = sc[1];
      fitted[2] = predicted[2] * sc[1];
      fitted[3] = predicted[3] * sc[1];
    } else if (!seen[1] && seen[2] && seen[3]) {
      sc[1] = split_scale;
      fitted[1] = predicted[1] * split_scale;
    }
    st.forward = fitted[0];
    st.backward_input = fitted[2];
    st.backward_weight = fitted[3];
    if (old.backward || seen[1]) st.backward = fitted[1];
  }
  // The fixed cost per action: what the stages' own times leave of the measured step.
  const auto makespan_with = [&](double overhead) {
    CostModel m = after;
    m.fixed_costs.action = overhead;
    return simulate(c.schedule, m).makespan;
  };
  double hi = std::max(model.fixed_costs.action, 1e-9);
  const double target = c.measured_makespan;
  double overhead = 0.0;
  if (makespan_with(0.0) < target) {
    while (makespan_with(hi) < target && hi < target) hi *= 2.0;
    double lo = 0.0;
    for (int i = 0; i < 100 && hi - lo > 1e-12 * hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      (makespan_with(mid) < target ? lo : hi) = mid;
    }
    overhead = 0.5 * (lo + hi);
  }
  after.fixed_costs.action = overhead;
  c.predicted_after = simulate(c.schedule, after).makespan;
  c.action_weight = makespan_with(overhead + 1.0) - c.predicted_after;
  c.after = std::move(after);
  return c;
}
[[nodiscard]] inline Calibration calibrate(const Timeline& measured, const CostModel& model,
                                           const CalibrationOptions& options = {}) {
  return calibrate(std::vector<Timeline>{measured}, model, options);
}

}  // namespace ppsched
