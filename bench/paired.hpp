// The accuracy reports' paired mode (bench_accuracy --paired, bench_accuracy_torch --paired;
// docs/accuracy.md): every measured step is paired with a short profile taken right before it,
// at the step's micro-batch size, and the step the running cut is predicted to take from that
// profile, so that the prediction and the step see the same speed of this machine's cores
// (which change in phases of 50-900 ms). What the pairs still get wrong is the model's.
// Here: the running cut priced from another profile, and a step's time per kind of action.
#pragma once

#include <ppsched/partition/partition.hpp>
#include <ppsched/plan/costs.hpp>
#include <ppsched/plan/model.hpp>
#include <ppsched/plan/plan.hpp>
#include <ppsched/runtime/profile.hpp>
#include <ppsched/schedule/schedule.hpp>
#include <ppsched/sim/simulate.hpp>
#include <ppsched/trace/timeline.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "accuracy_stats.hpp"

namespace paired {

// `cut`'s stages (the layers the run holds) priced from `at_rows`, a profile at the run's
// micro-batch size: the partitioner's own pricing of a given split (evaluate_partition), so a
// fresh profile that would cut elsewhere still predicts the stages that run.
[[nodiscard]] inline ppsched::Partition same_cut(const ppsched::Profile& at_rows, const ppsched::Partition& cut,
                                                           std::int32_t microbatches) {
  std::vector<std::size_t> boundaries;
  for (const ppsched::PartitionStage& s : cut.stages) boundaries.push_back(s.begin);
  boundaries.push_back(cut.stages.back().end);
  ppsched::PartitionCostModel cost;
  cost.link = at_rows.link;
  cost.devices.assign(cut.stages.size(), ppsched::Device{});
  cost.inflight = ppsched::inflight_1f1b(static_cast<std::int32_t>(cut.stages.size()), microbatches);
  ppsched::Partition out = cut;
  out.stages = ppsched::evaluate_partition(at_rows.graph, boundaries, cost).stages;
  for (std::size_t s = 0; s < out.stages.size(); ++s) {
    out.stages[s].rank = cut.stages[s].rank;
    if (s + 1 < out.stages.size() && cut.stages[s + 1].rank == cut.stages[s].rank) out.stages[s].send_time = 0.0;
  }
  return out;
}

// `p` without its layers' optimizer steps (Layer::optimizer_step): the model before that term.
[[nodiscard]] inline ppsched::Profile without_optimizer(const ppsched::Profile& p) {
  std::vector<ppsched::Layer> layers = p.graph.layers();
  for (ppsched::Layer& l : layers) l.optimizer_step = 0.0;
  ppsched::Profile out = p;
  out.graph = ppsched::LayerGraph(std::move(layers), p.graph.edges());
  return out;
}

// The step of `schedule` over `cut`, predicted from `profile` at `rows` rows per micro-batch
// as plan_devices prices a cut (graph_model's fixed costs and slowdown, cost_model_of, simulate).
[[nodiscard]] inline ppsched::SimResult predict_cut(const ppsched::Profile& profile, std::int32_t rows,
                                                    const ppsched::Partition& cut, const ppsched::Schedule& schedule) {
  const ppsched::Profile at = ppsched::profile_at_rows(profile, rows);
  ppsched::plan::GraphModelOptions g;
  g.ranks = schedule.ranks;
  g.microbatches = schedule.microbatches;
  const ppsched::plan::PlanModel m = ppsched::plan::graph_model(at, "paired", g);
  return ppsched::simulate(schedule, ppsched::plan::cost_model_of(same_cut(at, cut, schedule.microbatches),
                                                                 ppsched::plan::plan_cost_options(m, 0.5)));
}

// One rank's step by kind of compute action: the sums of its F, B, BI and BW spans; what of the
// step lies outside them (waiting, the runtime's own work, waking and joining the threads), as
// before the first action (`lead`), between actions (`gaps`) and after the last (`tail`); and
// how much longer each kind's first span is than that kind's median span (`first`, summed over
// the kinds): a cost a step pays once, inside its first actions.
struct Parts {
  double f = 0.0, b = 0.0, bi = 0.0, bw = 0.0, outside = 0.0;
  double lead = 0.0, gaps = 0.0, tail = 0.0, first = 0.0;
};

[[nodiscard]] inline Parts parts_of(const ppsched::Timeline& t, double step, std::int32_t rank = 0) {
  Parts p;
  std::vector<ppsched::Span> spans;
  for (const ppsched::Span& s : t.spans) {
    if (s.rank != rank || s.lane != ppsched::Lane::compute) continue;
    if (s.action.op != ppsched::Op::F && s.action.op != ppsched::Op::B && s.action.op != ppsched::Op::BI &&
        s.action.op != ppsched::Op::BW) {
      continue;
    }
    spans.push_back(s);
  }
  std::sort(spans.begin(), spans.end(), [](const ppsched::Span& a, const ppsched::Span& b) { return a.start < b.start; });
  double busy = 0.0;
  for (const ppsched::Op op : {ppsched::Op::F, ppsched::Op::B, ppsched::Op::BI, ppsched::Op::BW}) {
    std::vector<double> d;
    for (const ppsched::Span& s : spans) {
      if (s.action.op == op) d.push_back(s.end - s.start);
    }
    if (d.empty()) continue;
    double sum = 0.0;
    for (const double x : d) sum += x;
    busy += sum;
    (op == ppsched::Op::F ? p.f : op == ppsched::Op::B ? p.b : op == ppsched::Op::BI ? p.bi : p.bw) = sum;
    p.first += d.front() - accuracy::median(d);
  }
  p.outside = step - busy;
  if (!spans.empty()) {
    p.lead = spans.front().start;
    p.tail = step - spans.back().end;
    p.gaps = p.outside - p.lead - p.tail;
  }
  return p;
}

// Medians of each part over steps.
[[nodiscard]] inline Parts median_parts(const std::vector<Parts>& steps) {
  const auto med = [&](double Parts::* field) {
    std::vector<double> v;
    for (const Parts& p : steps) v.push_back(p.*field);
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  return {med(&Parts::f),    med(&Parts::b),    med(&Parts::bi),   med(&Parts::bw),   med(&Parts::outside),
          med(&Parts::lead), med(&Parts::gaps), med(&Parts::tail), med(&Parts::first)};
}

// The running stages' own calls (`make` builds them at a size) at `rows`, timed alone on this
// thread by the library's profile_stages, summed as one rank's step of `s` runs them: F per
// micro-batch; B, or BI and BW. `loss_ms` (the loss's call, which the executor makes apart and
// profile_stages does not) is added to the last stage's B and BI.
[[nodiscard]] inline Parts stages_alone(const ppsched::profiling::StageFactory& make, const ppsched::Schedule& s,
                                        std::int32_t rows, int warmup, int repetitions, double loss_ms) {
  ppsched::profiling::ProfileOptions o;
  o.rows = {rows};
  o.warmup = warmup;
  o.repetitions = repetitions;
  const std::vector<ppsched::profiling::StageProfile> t = ppsched::profiling::profile_stages(make, o);
  Parts p;
  const double m = s.microbatches;
  for (std::size_t k = 0; k < t.size(); ++k) {
    const ppsched::profiling::StageTiming& x = t[k].sizes.front();
    const double loss = k + 1 == t.size() ? loss_ms : 0.0;
    p.f += m * x.forward.median;
    // A stage without a full backward runs B as its BI then its BW.
    p.b += m * ((x.backward ? x.backward->median : x.backward_input.median + x.backward_weight.median) + loss);
    p.bi += m * (x.backward_input.median + loss);
    p.bw += m * x.backward_weight.median;
  }
  bool split = false;
  for (const ppsched::Action& a : s.programs.front()) split = split || a.op == ppsched::Op::BI;
  if (split) {
    p.b = 0.0;
  } else {
    p.bi = p.bw = 0.0;
  }
  return p;
}

// One configuration as the paired report reads it.
struct Row {
  std::string label;        // "1f1b p=2 m=8"
  std::int32_t ranks = 1;
  double unpaired = 0.0;    // predicted from the profile taken before every pass
  double measured = 0.0;    // the median step
  const accuracy::Pairs* pairs = nullptr;
  const std::vector<Parts>* in_step = nullptr;        // per step: its timeline's parts
  const std::vector<Parts>* in_prediction = nullptr;  // per step: the paired prediction's
  const std::vector<Parts>* alone = nullptr;          // per step (one rank): the stages' calls alone
};

// The paired table of one model, then its summary lines (returned, printed by the caller with
// the others): every step's paired error (median, quartiles, extremes); per configuration (the
// median of its pairs) mean and max |error|, Kendall's tau, the pick; the one-rank
// configurations' mean signed error paired and unpaired; and where one rank's step goes, by
// kind of action, in the step, alone and predicted.
[[nodiscard]] inline std::vector<std::string> report(const std::string& model, const std::vector<Row>& rows) {
  std::vector<std::string> out;
  char line[640];
  std::printf("%-5s %-26s  %9s %7s  %9s %7s  %15s  %6s  %9s\n", "model", "configuration (paired)", "unpaired", "error",
              "paired", "error", "pairs q1 .. q3", "drift", "measured");
  accuracy::Errors per_config;
  std::vector<double> every, predicted, measured;
  double one_paired = 0.0, one_unpaired = 0.0;
  int ones = 0;
  for (const Row& r : rows) {
    const std::vector<double> e = r.pairs->errors();
    every.insert(every.end(), e.begin(), e.end());
    const accuracy::Quartiles q = accuracy::quartiles_of(e);
    const double error = r.pairs->error();
    per_config.sum += std::abs(error);
    per_config.max = std::max(per_config.max, std::abs(error));
    ++per_config.count;
    predicted.push_back(r.pairs->prediction());
    measured.push_back(r.measured);
    if (r.ranks == 1) {
      one_paired += error;
      one_unpaired += (r.unpaired - r.measured) / r.measured;
      ++ones;
    }
    std::printf("%-5s %-26s  %9.3f %+6.1f%%  %9.3f %+6.1f%%  %+6.1f%% %+6.1f%%  %5.1f%%  %9.3f\n", model.c_str(), r.label.c_str(),
                r.unpaired, 100.0 * (r.unpaired - r.measured) / r.measured, r.pairs->prediction(), 100.0 * error,
                100.0 * q.q1, 100.0 * q.q3, 100.0 * r.pairs->drift(), r.measured);
  }
  const accuracy::Quartiles all = accuracy::quartiles_of(every);
  std::vector<double> absolute;
  for (const double e : every) absolute.push_back(std::abs(e));
  const auto pick = static_cast<std::size_t>(std::min_element(predicted.begin(), predicted.end()) - predicted.begin());
  const double best = *std::min_element(measured.begin(), measured.end());
  std::snprintf(line, sizeof line,
                "%s paired (%zu steps, each after a profile at its size): step error median %+.1f%%, quartiles %+.1f%% .. "
                "%+.1f%%, extremes %+.1f%% .. %+.1f%%, median |error| %.1f%%; per configuration (median of its pairs): "
                "mean |error| %.1f%%, max %.1f%%, tau %.2f; pick %s measures %.1f%% over the fastest; one rank: mean "
                "error %+.1f%% paired, %+.1f%% unpaired",
                model.c_str(), all.count, 100.0 * all.median, 100.0 * all.q1, 100.0 * all.q3, 100.0 * all.min,
                100.0 * all.max, 100.0 * accuracy::median(absolute), 100.0 * per_config.mean(), 100.0 * per_config.max,
                accuracy::kendall_tau(predicted, measured), rows[pick].label.c_str(), 100.0 * (measured[pick] - best) / best,
                ones ? 100.0 * one_paired / ones : 0.0, ones ? 100.0 * one_unpaired / ones : 0.0);
  out.emplace_back(line);
  // Where one rank's step goes (medians over its steps, ms per step): in the step / the
  // stages' calls alone / predicted, per kind of action, and outside the actions.
  for (const Row& r : rows) {
    if (r.ranks != 1 || r.alone == nullptr || r.alone->empty()) continue;
    const Parts s = median_parts(*r.in_step), a = median_parts(*r.alone), p = median_parts(*r.in_prediction);
    std::snprintf(line, sizeof line,
                  "%s %s, ms per step in the step / its stages' calls alone / predicted: F %.3f / %.3f / %.3f, B %.3f / "
                  "%.3f / %.3f, BI %.3f / %.3f / %.3f, BW %.3f / %.3f / %.3f; outside the actions %.3f / - / %.3f "
                  "(in the step: before the first %.3f, between %.3f, after the last %.3f); the kinds' first spans over "
                  "their medians %+.3f",
                  model.c_str(), r.label.c_str(), s.f, a.f, p.f, s.b, a.b, p.b, s.bi, a.bi, p.bi, s.bw, a.bw, p.bw, s.outside,
                  p.outside, s.lead, s.gaps, s.tail, s.first);
    out.emplace_back(line);
  }
  return out;
}

}  // namespace paired
