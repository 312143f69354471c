// Accuracy of the planner's predictions on libtorch models (issue 27, items 4 and 5): three
// models of different shapes, each a torch::nn::Sequential, through the adapter on the CPU
// backend with one intra-op thread per rank:
//   mlp   8 x (Linear 64 -> 64, Tanh)                               16 children, input [rows, 64]
//   gpt   4 pre-norm transformer blocks (one attention head, MLP x4), then a Linear head; 16
//         tokens of width 32 per row                               5 children, input [rows, 16, 32]
//   conv  Conv2d 3 -> 16 + BatchNorm2d + ReLU, 3 residual blocks (Conv2d + BatchNorm2d twice),
//         Flatten, Linear -> 10; 8 x 8 images                      8 children, input [rows, 3, 8, 8]
// Each is profiled by the adapter (profile_sequential at 2, 8 and 32 rows; the CPU backend's fixed
// costs by measure_backend_overheads; how much two ranks computing at once slow each other, with
// the model's own work, by measure_concurrent_slowdown), and for 21 configurations per model (gpipe, 1f1b, zb-h1 on
// 1 and 2 ranks and interleaved-1f1b on 2; 2 x 32, 8 x 8 and 32 x 2 micro-batches x rows, global
// batch 64) the planner's cut is priced (graph_model + cost_model_of + simulate, as plan_devices
// prices it) and run (wall time of World::run_step), over interleaved passes. Per configuration:
// the prediction, the median of every repetition of every pass, min, max, the noise floor (the
// passes' medians' difference over the median) and the error; per model and overall: mean and
// maximum |error|, Kendall's tau, and whether the configuration predicted fastest measures within
// 5% of the measured fastest (the pick holds), and the same figures predicted without the
// slowdown, with each of run 7's changes undone (variants()) and from every call's fastest
// repetition against each configuration's fastest step, to show what each changes.
// Every step is bracketed by a probe of each core's speed (machine_probe.hpp): the columns
// "steady" and its "error" (and a summary line per model) count only the steps taken while
// every core ran within 1.15x of its usual speed, which is how this machine's noise is told
// apart from the model's error (docs/accuracy.md, run 8). Not a test: a report.
//
//   bench_accuracy_torch [repetitions per pass] [passes] [model] [plot.svg] [--paired]
// --paired: every step right after a profile of the model at its micro-batch size (the same
// profiler, 1 warm-up and 3 repetitions), the running cut predicted from it (paired.hpp); the
// paired table and summary follow the unpaired ones, with (one rank) where a step's time goes.
//   bench_accuracy_torch memory [model]          peak memory per rank, predicted and counted
//   bench_accuracy_torch policies [repetitions]  gpt with each memory policy: time and bytes
// model: mlp, gpt, conv or all; plot.svg: where to write the predicted-vs-measured plot.
#include <torch/nn/functional/activation.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <ppsched/adapters/torch.hpp>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/plan/memory_policy.hpp>
#include <ppsched/plan/plan.hpp>
#include <ppsched/runtime/profile.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/sim/simulate.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "accuracy_stats.hpp"
#include "bench_accuracy_torch.hpp"
#include "machine_probe.hpp"
#include "paired.hpp"

namespace {

constexpr std::int64_t global_batch = 64;

struct Config {
  std::string model;
  std::string family;
  std::int32_t ranks = 1;
  std::int32_t microbatches = 1;
  std::int32_t rows = 1;
  double predicted = 0.0;
  double alone = 0.0;                       // predicted without the ranks' concurrent slowdown
  double calibrated = 0.0;                  // predicted from the profile recalibrated by two runs
  std::vector<double> undone;               // predicted with each of run 7's changes undone (variants())
  double from_fastest = 0.0;                // predicted from every call's fastest repetition
  std::vector<std::vector<double>> passes;  // ms per step, per pass
  std::vector<ppsched::Timeline> last_pass; // every step's timeline, last pass
  // Per pass, per step, per core: the slower of the core's probes before and after the step.
  std::vector<std::vector<std::vector<double>>> probes;
  // --paired: every step against the prediction from a profile taken right before it
  // (paired.hpp), and per step the time per kind of action: in the step (its timeline), in the
  // paired prediction, and (one rank) the running stage's own calls timed alone just before.
  accuracy::Pairs pairs;
  std::vector<paired::Parts> in_step, in_prediction, calls_alone;
};

// A core's probe within this factor of its usual speed counts as steady (machine_probe.hpp).
constexpr double steady_tolerance = 1.15;

// The step predicted for `c` from `profile`, as plan_devices prices it.
double predict(const ppsched::Profile& profile, const Config& c) {
  const ppsched::Schedule schedule = bench_torch::schedule_of(c.family, c.ranks, c.microbatches);
  ppsched::plan::GraphModelOptions g;
  g.ranks = c.ranks;
  g.microbatches = c.microbatches;
  const ppsched::plan::PlanModel m = ppsched::plan::graph_model(ppsched::profile_at_rows(profile, c.rows), c.model, g);
  return ppsched::simulate(schedule, ppsched::plan::cost_model_of(m.partition(schedule.placement), ppsched::plan::plan_cost_options(m, 0.5)))
      .makespan;
}

using accuracy::kendall_tau;

// `p` without the loss's time in the last child's B and BI.
ppsched::libtorch::TorchProfile without_loss(ppsched::libtorch::TorchProfile p) {
  for (std::size_t k = 0; k < p.loss.size(); ++k) {
    ppsched::libtorch::TorchLayerSample& last = p.layers.back().samples[k];
    for (ppsched::profiling::TimeSpread* t : {&last.backward, &last.backward_input}) {
      t->median -= p.loss[k].median;
      t->min -= p.loss[k].min;
      t->max -= p.loss[k].max;
    }
  }
  p.loss.clear();
  return p;
}

// `p` as profiled before the call overhead was taken off each child: every child at its
// one-child stage's times, nothing per action from the adapter.
ppsched::libtorch::TorchProfile with_overhead_per_child(ppsched::libtorch::TorchProfile p) {
  const ppsched::libtorch::TorchProfile::CallOverhead o = p.call_overhead;
  for (ppsched::libtorch::TorchLayerProfile& l : p.layers) {
    for (ppsched::libtorch::TorchLayerSample& s : l.samples) {
      for (auto [t, d] : {std::pair{&s.forward, o.forward}, std::pair{&s.backward, o.backward},
                          std::pair{&s.backward_input, o.backward_input}, std::pair{&s.backward_weight, o.backward_weight}}) {
        t->median += d;
        t->min += d;
        t->max += d;
      }
    }
  }
  p.call_overhead = {};
  return p;
}

// `t` at `rows` (32: the measured profile's reference) with the backend's fixed costs and
// `priced`'s concurrent slowdown, as main prices the measured profile.
ppsched::Profile priced_at(const ppsched::libtorch::TorchProfile& t, std::int64_t rows, const ppsched::Profile& priced,
                           const ppsched::profiling::BackendOverheads& overheads) {
  ppsched::Profile p = t.at(rows);
  p.fixed_costs.action += overheads.fixed_costs.action;  // beside the adapter's own (TorchProfile::at)
  p.fixed_costs.transfer = overheads.fixed_costs.transfer;
  p.fixed_costs.step = overheads.fixed_costs.step;
  p.fixed_costs.concurrent_slowdown = priced.fixed_costs.concurrent_slowdown;
  return p;
}
ppsched::Profile priced_at32(const ppsched::libtorch::TorchProfile& t, const ppsched::Profile& priced,
                             const ppsched::profiling::BackendOverheads& overheads) {
  return priced_at(t, 32, priced, overheads);
}

// The profile with each of run 7's changes undone (docs/accuracy.md), named, at 32 rows with
// the backend's fixed costs and the measured slowdown of `priced`: without the loss's time; the
// first stage's backward split as the others'; and as runs 1-6 priced a stage (all three undone:
// no loss, the call overhead paid by every child, the first stage split).
std::vector<std::pair<std::string, ppsched::Profile>> variants(const ppsched::libtorch::TorchProfile& measured,
                                                               const ppsched::Profile& priced,
                                                               const ppsched::profiling::BackendOverheads& overheads) {
  const auto at32 = [&](const ppsched::libtorch::TorchProfile& t, bool adapter_overhead, bool first_in_bw) {
    ppsched::Profile p = priced_at32(t, priced, overheads);
    if (!adapter_overhead) p.fixed_costs.action = overheads.fixed_costs.action;
    p.first_stage_backward_in_bw = first_in_bw;
    return p;
  };
  return {{"without the loss's time", at32(without_loss(measured), true, true)},
          {"with the first stage's backward split as the others'", at32(measured, true, false)},
          {"as run 6 priced it (no loss, the call overhead paid by every child, the first stage split)",
           at32(with_overhead_per_child(without_loss(measured)), false, false)}};
}

// `p` with every time at its fastest repetition: on a machine whose cores change speed
// (machine_probe.hpp), the fastest repetition of a call and the fastest of a configuration's
// steps are both taken at the cores' full speed, where the medians may each be a different mix.
ppsched::libtorch::TorchProfile at_fastest(ppsched::libtorch::TorchProfile p) {
  const auto fastest = [](ppsched::profiling::TimeSpread& t) { t.median = t.min; };
  for (ppsched::libtorch::TorchLayerProfile& l : p.layers) {
    for (ppsched::libtorch::TorchLayerSample& s : l.samples) {
      for (ppsched::profiling::TimeSpread* t : {&s.forward, &s.backward, &s.backward_input, &s.backward_weight}) fastest(*t);
    }
  }
  for (ppsched::profiling::TimeSpread& t : p.loss) fastest(t);
  return p;
}

// The model's own compute of one 8-row micro-batch (forward and backward of the whole Sequential)
// on one and on two threads at once, each thread with its own instance of the model.
std::vector<double> concurrent_slowdown(const bench_torch::Model& model) {
  std::vector<torch::nn::Sequential> copies;
  std::vector<torch::Tensor> inputs;
  for (int t = 0; t < 2; ++t) {
    torch::manual_seed(11 + t);
    copies.push_back(bench_torch::make_model(model.name).net);
    inputs.push_back(model.input(8));
  }
  ppsched::profiling::SlowdownOptions o;
  o.ranks = 2;
  return ppsched::profiling::measure_concurrent_slowdown(
      [&](std::int32_t t) {
        const auto i = static_cast<std::size_t>(t);
        copies[i]->zero_grad();
        copies[i]->forward(inputs[i]).sum().backward();
      },
      o);
}

std::span<const float> floats(const torch::Tensor& t) { return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())}; }

// The paired profile: the same profiler at the step's one size, few repetitions (--paired).
constexpr int paired_warmup = 1, paired_repetitions = 3;

// The running stages' own calls at `rows`, timed alone (paired::stages_alone), the loss's
// time added to the last stage's B and BI.
paired::Parts stages_alone(const bench_torch::Model& model, const ppsched::Partition& cut, const ppsched::Schedule& s,
                           std::int32_t rows, double loss_ms) {
  auto keep = std::make_shared<std::vector<bench_torch::Pipeline>>();
  return paired::stages_alone(
      [&model, &cut, keep](std::int32_t r) {
        keep->push_back(bench_torch::make_pipeline(model, cut, r, global_batch, false));
        return keep->back().functions;
      },
      s, rows, paired_warmup, paired_repetitions, loss_ms);
}

// One model's configurations measured: a pass runs each once, `repetitions` timed steps; with
// `paired`, each step right after a profile at its size (paired.hpp).
void measure(const bench_torch::Model& model, const ppsched::Profile& profile, std::vector<Config>& configs, int repetitions,
             int passes, machine::CoreProbes& probes, bool paired, const ppsched::profiling::BackendOverheads& overheads) {
  const ppsched::CpuOptions cpu{.checking = false};
  for (int pass = 0; pass < passes; ++pass) {
    for (Config& c : configs) {
      const ppsched::Schedule schedule = bench_torch::schedule_of(c.family, c.ranks, c.microbatches);
      ppsched::plan::GraphModelOptions g;
      g.ranks = c.ranks;
      g.microbatches = c.microbatches;
      const ppsched::plan::PlanModel plan_model = ppsched::plan::graph_model(ppsched::profile_at_rows(profile, c.rows), c.model, g);
      const ppsched::Partition cut = plan_model.partition(schedule.placement);
      const ppsched::CostModel cost = ppsched::plan::cost_model_of(cut, ppsched::plan::plan_cost_options(plan_model, 0.5));
      c.predicted = ppsched::simulate(schedule, cost).makespan;
      ppsched::CostModel alone = cost;
      alone.fixed_costs.concurrent_slowdown.clear();
      c.alone = ppsched::simulate(schedule, alone).makespan;

      const bench_torch::Pipeline pipeline = bench_torch::make_pipeline(model, cut, c.rows, global_batch, false);
      const std::vector<ppsched::StageFunctions>& functions = pipeline.functions;
      ppsched::CpuCluster cluster(c.ranks, cpu);
      std::vector<ppsched::CpuBackend*> ranks;
      for (int r = 0; r < c.ranks; ++r) ranks.push_back(&cluster.rank(r));
      ppsched::World<ppsched::CpuBackend> world(ranks, schedule, cost, functions);
      torch::manual_seed(7);
      const torch::Tensor inputs = model.input(global_batch).contiguous();
      const torch::Tensor targets = torch::zeros(model.output_shape(model.net->size() - 1, global_batch)).contiguous();
      std::vector<double> steps;
      std::vector<std::vector<double>> around;
      c.last_pass.clear();
      for (int r = -2; r < repetitions; ++r) {
        ppsched::SimResult fresh;
        paired::Parts calls_alone;
        if (paired) {
          const ppsched::libtorch::TorchProfile t = bench_torch::profile_of(model, {c.rows}, paired_warmup, paired_repetitions);
          fresh = paired::predict_cut(priced_at(t, c.rows, profile, overheads), c.rows, cut, schedule);
          if (c.ranks == 1) calls_alone = stages_alone(model, cut, schedule, c.rows, t.loss.front().median);
        }
        double ms = 0.0;
        std::vector<double> probe = machine::probe_around(probes, [&] {
          const auto t0 = std::chrono::steady_clock::now();
          (void)world.run_step({floats(inputs), floats(targets)});
          ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        });
        if (r >= 0) {
          steps.push_back(ms);
          around.push_back(std::move(probe));
          c.last_pass.push_back(world.last_step().timeline);
          if (paired) {
            c.pairs.add(fresh.makespan, ms);
            c.in_step.push_back(paired::parts_of(world.last_step().timeline, ms));
            c.in_prediction.push_back(paired::parts_of(fresh.timeline, fresh.makespan));
            if (c.ranks == 1) c.calls_alone.push_back(calls_alone);
          }
        }
      }
      c.passes.push_back(steps);
      c.probes.push_back(std::move(around));
    }
  }
}

// ------------------------------------------------------------ peak memory per rank
//
// `memory`: for every configuration, per rank, the bytes the simulator predicts from the
// measured profile against the bytes TorchMemoryCounter counts on a run (docs/accuracy.md,
// "Peak memory per rank", says what is in and what is out):
//   activations  predicted: SimResult::timed_peak (the profile's counted activation_bytes per
//                stage, weight_memory_fraction counted too); measured: the most the rank's
//                calls held at the end of a call, over what it held when the step began
//   total        + parameters and their gradients (predicted: the profile's param_bytes twice;
//                measured: the tensors' sizes and what the rank held between steps, counted)
//                + the executor's buffers (pool, weight gradients, host pool: the same sizes
//                on both sides, since the executor allocates exactly what its plan says)
// and the high-water mark (transients inside a call included), which nothing predicts.

struct MemoryRow {
  double predicted = 0.0, measured = 0.0, high = 0.0, predicted_total = 0.0, measured_total = 0.0;
};

// Predicted and measured bytes of one run of `schedule` over `cut` with `cost` (memory actions
// included, if any), after two warm-up steps; `steps` counted steps, their worst kept.
struct CountedRun {
  std::vector<MemoryRow> ranks;
  std::vector<double> ms;  // each counted step's wall time
  double leak = 0.0;       // the most any rank held at a step's end over its start
  double untagged = 0.0;
};

CountedRun counted_run(const bench_torch::Model& model, const ppsched::Partition& cut, const ppsched::Schedule& schedule,
                       const ppsched::CostModel& cost, std::int32_t rows, int steps) {
  const ppsched::SimResult sim = ppsched::simulate(schedule, cost);
  // param.grad is allocated by the first step that needs it, on the rank thread of that run:
  // dropped, so that this configuration's ranks allocate (and hold) their own.
  for (torch::Tensor p : model.net->parameters()) p.mutable_grad() = torch::Tensor();
  const bench_torch::Pipeline pipeline = bench_torch::make_pipeline(model, cut, rows, global_batch, true);
  const ppsched::CpuOptions cpu{.checking = false};
  ppsched::CpuCluster cluster(schedule.ranks, cpu);
  std::vector<ppsched::CpuBackend*> ranks;
  for (int r = 0; r < schedule.ranks; ++r) ranks.push_back(&cluster.rank(r));
  ppsched::World<ppsched::CpuBackend> world(ranks, schedule, cost, pipeline.functions);
  torch::manual_seed(7);
  const torch::Tensor inputs = model.input(global_batch).contiguous();
  const torch::Tensor targets = torch::zeros(model.output_shape(model.net->size() - 1, global_batch)).contiguous();
  const ppsched::Batch batch{floats(inputs), floats(targets)};
  for (int w = 0; w < 2; ++w) (void)world.run_step(batch);  // the first allocates param.grad
  const std::vector<double> params = bench_torch::parameter_bytes(pipeline, schedule);
  std::vector<double> predicted_static(static_cast<std::size_t>(schedule.ranks), 0.0);
  for (const ppsched::PartitionStage& st : cut.stages) predicted_static[static_cast<std::size_t>(st.rank)] += 2.0 * st.param_bytes;
  CountedRun out;
  out.ranks.assign(static_cast<std::size_t>(schedule.ranks), MemoryRow{});
  for (int k = 0; k < steps; ++k) {
    const bench_torch::StepMemory m = bench_torch::counted_step(world, batch);
    out.ms.push_back(m.ms);
    out.untagged = std::max(out.untagged, m.untagged);
    for (std::size_t r = 0; r < out.ranks.size(); ++r) {
      MemoryRow& row = out.ranks[r];
      row.predicted = r < sim.timed_peak.size() ? sim.timed_peak[r].bytes : 0.0;
      row.measured = std::max(row.measured, m.settled[r]);
      row.high = std::max(row.high, m.high[r]);
      row.predicted_total = predicted_static[r] + m.backend[r] + row.predicted;
      row.measured_total = std::max(row.measured_total, params[r] + m.held[r] + m.backend[r] + m.settled[r]);
      out.leak = std::max(out.leak, std::abs(m.after[r]));
    }
  }
  return out;
}

double relative(double predicted, double measured) { return measured > 0.0 ? (predicted - measured) / measured : 0.0; }

int memory_report(const std::string& which) {
  std::printf("%-5s %-17s %2s %3s %4s %4s  %11s %11s %7s  %11s  %11s %11s %7s\n", "model", "family", "p", "m", "rows",
              "rank", "predicted", "measured", "error", "high-water", "pred. total", "meas. total", "error");
  std::vector<std::string> summaries;
  double all_sum = 0.0, all_max = 0.0, all_total_max = 0.0, all_total_sum = 0.0, leak = 0.0, untagged = 0.0;
  std::size_t all_n = 0, all_within = 0;
  for (const std::string& name : bench_torch::model_names()) {
    if (which != "all" && which != name) continue;
    const bench_torch::Model model = bench_torch::make_model(name);
    const ppsched::libtorch::TorchProfile measured_profile = bench_torch::profile_of(model, {2, 8, 32}, 1, 3);
    const ppsched::Profile profile = measured_profile.at(32);
    double sum = 0.0, max = 0.0, total_sum = 0.0, total_max = 0.0;
    std::size_t n = 0, within = 0;
    for (const bench_torch::ConfigKey& k : bench_torch::configurations(global_batch)) {
      const ppsched::Schedule schedule = bench_torch::schedule_of(k.family, k.ranks, k.microbatches);
      ppsched::plan::GraphModelOptions g;
      g.ranks = k.ranks;
      g.microbatches = k.microbatches;
      const ppsched::plan::PlanModel plan_model = ppsched::plan::graph_model(ppsched::profile_at_rows(profile, k.rows), name, g);
      const ppsched::Partition cut = plan_model.partition(schedule.placement);
      const ppsched::CostModel cost = ppsched::plan::cost_model_of(
          cut, ppsched::plan::plan_cost_options(plan_model, bench_torch::weight_memory_fraction(measured_profile, k.rows)));
      const CountedRun run = counted_run(model, cut, schedule, cost, k.rows, 2);
      leak = std::max(leak, run.leak);
      untagged = std::max(untagged, run.untagged);
      for (std::size_t r = 0; r < run.ranks.size(); ++r) {
        const MemoryRow& row = run.ranks[r];
        const double e = relative(row.predicted, row.measured), et = relative(row.predicted_total, row.measured_total);
        sum += std::abs(e);
        max = std::max(max, std::abs(e));
        total_sum += std::abs(et);
        total_max = std::max(total_max, std::abs(et));
        within += std::abs(e) <= 0.05 ? 1 : 0;
        ++n;
        std::printf("%-5s %-17s %2d %3d %4d %4zu  %11.0f %11.0f %+6.1f%%  %11.0f  %11.0f %11.0f %+6.1f%%\n", name.c_str(),
                    k.family.c_str(), k.ranks, k.microbatches, k.rows, r, row.predicted, row.measured, 100.0 * e,
                    row.high, row.predicted_total, row.measured_total, 100.0 * et);
      }
    }
    char line[400];
    std::snprintf(line, sizeof line,
                  "%s: %zu ranks of 21 configurations: activations mean |error| %.1f%%, max %.1f%%, %zu within 5%%; "
                  "total mean |error| %.1f%%, max %.1f%%; BI..BW holds %.2f / %.2f / %.2f x F's bytes at 2 / 8 / 32 rows",
                  name.c_str(), n, 100.0 * sum / static_cast<double>(n), 100.0 * max, within,
                  100.0 * total_sum / static_cast<double>(n), 100.0 * total_max,
                  bench_torch::weight_memory_fraction(measured_profile, 2), bench_torch::weight_memory_fraction(measured_profile, 8),
                  bench_torch::weight_memory_fraction(measured_profile, 32));
    summaries.emplace_back(line);
    all_sum += sum;
    all_total_sum += total_sum;
    all_max = std::max(all_max, max);
    all_total_max = std::max(all_total_max, total_max);
    all_n += n;
    all_within += within;
  }
  for (const std::string& s : summaries) std::printf("%s\n", s.c_str());
  if (all_n > 0) {
    std::printf("all: %zu ranks: activations mean |error| %.1f%%, max %.1f%%, %zu within 5%%; total mean |error| %.1f%%, "
                "max %.1f%%; most held at a step's end over its start %.0f B; kept by untagged threads %.0f B\n",
                all_n, 100.0 * all_sum / static_cast<double>(all_n), 100.0 * all_max, all_within,
                100.0 * all_total_sum / static_cast<double>(all_n), 100.0 * all_total_max, leak, untagged);
  }
  return 0;
}

// ------------------------------------------------------------ memory policies (issue 23, item 4)
//
// `policies`: the GPT-like model on 2 ranks, 8 micro-batches of 8 rows, under gpipe, 1f1b and
// zb-h1, with each policy the adapter supports (none; full recomputation on both stages; full
// on stage 0 only), the schedule and costs from apply_memory_policies over the profile: step time
// (median of `repetitions` steps) and activation bytes per rank, predicted (simulate) against
// measured (wall time; TorchMemoryCounter). Offload is not run: the adapter cannot move autograd's
// saved tensors (docs/accuracy.md says why).
int policies_report(int repetitions, const ppsched::profiling::BackendOverheads& overheads) {
  const bench_torch::Model model = bench_torch::make_model("gpt");
  const std::int32_t ranks = 2, microbatches = 8, rows = static_cast<std::int32_t>(global_batch / microbatches);
  const ppsched::libtorch::TorchProfile measured_profile = bench_torch::profile_of(model, {rows}, 3, 10);
  ppsched::Profile profile = measured_profile.at(rows);
  profile.fixed_costs.action += overheads.fixed_costs.action;  // beside the adapter's own (TorchProfile::at)
  profile.fixed_costs.transfer = overheads.fixed_costs.transfer;
  profile.fixed_costs.step = overheads.fixed_costs.step;
  const std::vector<std::pair<std::string, std::vector<ppsched::plan::MemoryPolicy>>> policies{
      {"none", {ppsched::plan::MemoryPolicy::none(), ppsched::plan::MemoryPolicy::none()}},
      {"full recompute", {ppsched::plan::MemoryPolicy::full_recompute(), ppsched::plan::MemoryPolicy::full_recompute()}},
      {"full on stage 0", {ppsched::plan::MemoryPolicy::full_recompute(), ppsched::plan::MemoryPolicy::none()}}};
  std::printf("%-6s %-16s %9s %9s %7s   %-29s %-29s\n", "family", "policy", "predicted", "measured", "error",
              "rank 0 bytes: pred. / meas.", "rank 1 bytes: pred. / meas.");
  accuracy::Errors time_errors, byte_errors;
  for (const char* family : {"gpipe", "1f1b", "zb-h1"}) {
    const ppsched::Schedule plain = bench_torch::schedule_of(family, ranks, microbatches);
    ppsched::plan::GraphModelOptions g;
    g.ranks = ranks;
    g.microbatches = microbatches;
    const ppsched::plan::PlanModel plan_model = ppsched::plan::graph_model(ppsched::profile_at_rows(profile, rows), "gpt", g);
    const ppsched::Partition cut = plan_model.partition(plain.placement);
    const ppsched::CostModel cost = ppsched::plan::cost_model_of(
        cut, ppsched::plan::plan_cost_options(plan_model, bench_torch::weight_memory_fraction(measured_profile, rows)));
    for (const auto& [label, per_stage] : policies) {
      const ppsched::plan::MemoryPlan mp = ppsched::plan::apply_memory_policies(plain, cost, per_stage);
      const double predicted = ppsched::simulate(mp.schedule, mp.costs).makespan;
      const CountedRun run = counted_run(model, cut, mp.schedule, mp.costs, rows, repetitions);
      std::vector<double> ms = run.ms;
      std::sort(ms.begin(), ms.end());
      const double measured = ms[ms.size() / 2];
      const double e = time_errors.add(predicted, measured);
      char bytes[2][64];
      for (std::size_t r = 0; r < 2; ++r) {
        (void)byte_errors.add(run.ranks[r].predicted, run.ranks[r].measured);
        std::snprintf(bytes[r], sizeof bytes[r], "%9.0f / %9.0f (%+5.1f%%)", run.ranks[r].predicted,
                      run.ranks[r].measured, 100.0 * relative(run.ranks[r].predicted, run.ranks[r].measured));
      }
      std::printf("%-6s %-16s %9.3f %9.3f %+6.1f%%   %-29s %-29s\n", family, label.c_str(), predicted, measured, 100.0 * e,
                  bytes[0], bytes[1]);
    }
  }
  std::printf("step time: mean |error| %.1f%%, max %.1f%%; activation bytes per rank: mean |error| %.1f%%, max %.1f%%\n",
              100.0 * time_errors.mean(), 100.0 * time_errors.max, 100.0 * byte_errors.mean(), 100.0 * byte_errors.max);
  return 0;
}

// Predicted (x) against measured median (y) on log-log axes, a whisker from the fastest to the
// slowest step, the diagonal and +-10% beside it, one colour per model.
void write_plot(const std::string& path, const std::vector<Config>& configs, const std::vector<std::string>& notes) {
  double lo = 1e300, hi = 0.0;
  std::vector<double> med, mins, maxs;
  for (const Config& c : configs) {
    const accuracy::Spread m = accuracy::spread_of(c.passes);
    med.push_back(m.median);
    mins.push_back(m.min);
    maxs.push_back(m.max);
    lo = std::min({lo, c.predicted, mins.back()});
    hi = std::max({hi, c.predicted, maxs.back()});
  }
  lo = std::pow(10.0, std::floor(std::log10(lo)));
  hi = std::pow(10.0, std::ceil(std::log10(hi)));
  const double size = 560.0, margin = 60.0;
  const auto at = [&](double v) { return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) * size; };
  const auto px = [&](double v) { return margin + at(v); };
  const auto py = [&](double v) { return margin + size - at(v); };
  std::size_t longest = 0;
  for (const std::string& n : notes) longest = std::max(longest, n.size());
  std::ofstream out(path);
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
      << std::max(size + 2 * margin + 180, margin + 6.0 * static_cast<double>(longest)) << "\" height=\""
      << size + 2 * margin + 20.0 * static_cast<double>(notes.size()) << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << margin << "\" y=\"24\" font-size=\"15\">Predicted against measured step (ms), log-log</text>\n";
  for (double d = lo; d <= hi * 1.0001; d *= 10.0) {
    out << "<line x1=\"" << px(d) << "\" y1=\"" << py(lo) << "\" x2=\"" << px(d) << "\" y2=\"" << py(hi)
        << "\" stroke=\"#ddd\"/><line x1=\"" << px(lo) << "\" y1=\"" << py(d) << "\" x2=\"" << px(hi) << "\" y2=\""
        << py(d) << "\" stroke=\"#ddd\"/>\n<text x=\"" << px(d) << "\" y=\"" << py(lo) + 16 << "\" text-anchor=\"middle\">"
        << d << "</text><text x=\"" << margin - 6 << "\" y=\"" << py(d) + 4 << "\" text-anchor=\"end\">" << d << "</text>\n";
  }
  for (const double k : {1.0, 1.1, 1.0 / 1.1}) {
    const double x0 = k >= 1.0 ? lo : lo / k, x1 = k >= 1.0 ? hi / k : hi;  // inside the axes
    out << "<line x1=\"" << px(x0) << "\" y1=\"" << py(x0 * k) << "\" x2=\"" << px(x1) << "\" y2=\"" << py(x1 * k)
        << "\" stroke=\"" << (k == 1.0 ? "#444" : "#aaa") << "\" stroke-dasharray=\"" << (k == 1.0 ? "" : "4 3") << "\"/>\n";
  }
  out << "<text x=\"" << margin + size / 2 << "\" y=\"" << margin + size + 36 << "\" text-anchor=\"middle\">predicted</text>\n"
      << "<text x=\"16\" y=\"" << margin + size / 2 << "\" transform=\"rotate(-90 16 " << margin + size / 2
      << ")\" text-anchor=\"middle\">measured median (whisker: fastest to slowest step)</text>\n";
  const std::vector<std::string> names = bench_torch::model_names();
  const char* colours[] = {"#0072B2", "#D55E00", "#009E73"};
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const auto k = static_cast<std::size_t>(std::find(names.begin(), names.end(), configs[i].model) - names.begin()) % 3;
    const double x = px(configs[i].predicted);
    out << "<g><title>" << configs[i].model << " " << configs[i].family << " p=" << configs[i].ranks << " m="
        << configs[i].microbatches << ": predicted " << configs[i].predicted << " ms, measured " << med[i] << " ms</title>"
        << "<line x1=\"" << x << "\" y1=\"" << py(mins[i]) << "\" x2=\"" << x << "\" y2=\"" << py(maxs[i])
        << "\" stroke=\"" << colours[k] << "\" stroke-opacity=\"0.35\"/><circle cx=\"" << x << "\" cy=\"" << py(med[i])
        << "\" r=\"4\" fill=\"" << colours[k] << "\"/></g>\n";
  }
  for (std::size_t k = 0; k < names.size(); ++k) {
    out << "<circle cx=\"" << margin + size + 30 << "\" cy=\"" << margin + 20 * static_cast<double>(k) << "\" r=\"4\" fill=\""
        << colours[k] << "\"/><text x=\"" << margin + size + 40 << "\" y=\"" << margin + 20 * static_cast<double>(k) + 4
        << "\">" << names[k] << "</text>\n";
  }
  out << "<text x=\"" << margin + size + 30 << "\" y=\"" << margin + 70 << "\">dashed: +-10%</text>\n";
  for (std::size_t k = 0; k < notes.size(); ++k) {
    out << "<text x=\"" << margin << "\" y=\"" << margin + size + 60 + 20 * static_cast<double>(k) << "\" font-size=\"11\">"
        << notes[k] << "</text>\n";
  }
  out << "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) try {
  // --paired, anywhere: every step after a profile at its size (paired.hpp); the rest positional.
  const bool paired = std::find_if(argv + 1, argv + argc, [](const char* a) { return std::string(a) == "--paired"; }) != argv + argc;
  if (paired) argc = static_cast<int>(std::remove_if(argv + 1, argv + argc, [](const char* a) { return std::string(a) == "--paired"; }) - argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "memory") {
    torch::set_num_threads(1);
    return memory_report(argc > 2 ? argv[2] : "all");
  }
  const int repetitions = argc > 1 && mode != "policies" ? std::atoi(argv[1]) : 5;
  const int passes = argc > 2 ? std::atoi(argv[2]) : 2;
  const std::string which = argc > 3 ? argv[3] : "all";
  const std::string plot = argc > 4 ? argv[4] : "";
  torch::set_num_threads(1);  // one intra-op thread per rank: the rank threads are the parallelism

  const ppsched::CpuOptions cpu{.checking = false};
  ppsched::CpuCluster single(1, cpu), pair(2, cpu);
  const ppsched::profiling::BackendOverheads overheads =
      ppsched::profiling::measure_backend_overheads<ppsched::CpuBackend>({&single.rank(0)}, {&pair.rank(0), &pair.rank(1)});
  std::printf("fixed cost per step %.4f ms, per action %.4f ms, per transfer %.4f ms\n", overheads.fixed_costs.step,
              overheads.fixed_costs.action, overheads.fixed_costs.transfer);

  if (mode == "policies") return policies_report(argc > 2 ? std::atoi(argv[2]) : 10, overheads);

  // Each core's speed, probed before and after every step (machine_probe.hpp).
  machine::CoreProbes probes;
  for (int k = 0; k < 100; ++k) (void)probes.run();
  const auto ratios_text = [&](const std::vector<double>& ms) {
    std::string text;
    const std::vector<double> fastest = probes.fastest();
    for (std::size_t k = 0; k < ms.size(); ++k) {
      char one[16];
      std::snprintf(one, sizeof one, "%s%.2fx", text.empty() ? "" : "/", ms[k] / fastest[k]);
      text += one;
    }
    return text;
  };

  std::vector<Config> all;
  std::printf("%-5s %-17s %2s %3s %4s  %9s  %9s %8s %8s  %7s  %7s  %9s  %7s  %6s  %7s\n", "model", "family", "p", "m", "rows",
              "predicted", "measured", "min", "max", "noise", "error", "calibr.", "error", "steady", "error");
  std::vector<std::string> summaries;
  for (const std::string& name : bench_torch::model_names()) {
    if (which != "all" && which != name) continue;
    const bench_torch::Model model = bench_torch::make_model(name);
    // The fixed costs on empty stages that carry this model's weight-gradient floats
    // (OverheadOptions::weight_grad_floats): the executor's work on a stage's gradients is in them.
    ppsched::profiling::OverheadOptions oo;
    for (const torch::Tensor& t : model.net->parameters()) oo.weight_grad_floats += static_cast<std::size_t>(t.numel());
    const ppsched::profiling::BackendOverheads fixed =
        ppsched::profiling::measure_backend_overheads<ppsched::CpuBackend>({&single.rank(0)}, {&pair.rank(0), &pair.rank(1)}, oo);
    std::printf("%s: %zu weight-gradient floats: fixed cost per step %.4f ms, per action %.4f ms, per transfer %.4f ms\n",
                name.c_str(), oo.weight_grad_floats, fixed.fixed_costs.step, fixed.fixed_costs.action, fixed.fixed_costs.transfer);
    const std::vector<double> before_profile = probes.run();
    const ppsched::libtorch::TorchProfile measured_profile = bench_torch::profile_of(model, {2, 8, 32}, 3, 10);
    const std::vector<double> after_profile = probes.run();
    std::printf("%s: profiled with the cores' probes at %s their fastest before and %s after\n", name.c_str(),
                ratios_text(before_profile).c_str(), ratios_text(after_profile).c_str());
    ppsched::Profile profile = measured_profile.at(32);
    profile.fixed_costs.action += fixed.fixed_costs.action;  // beside the adapter's own (TorchProfile::at)
    profile.fixed_costs.transfer = fixed.fixed_costs.transfer;
    profile.fixed_costs.step = fixed.fixed_costs.step;
    profile.fixed_costs.concurrent_slowdown = concurrent_slowdown(model);
    const std::vector<std::pair<std::string, ppsched::Profile>> undone = variants(measured_profile, profile, fixed);
    std::printf("%s: concurrent slowdown with 2 ranks computing %.2fx\n", name.c_str(), profile.fixed_costs.concurrent_slowdown.back());
    std::vector<Config> configs;
    for (const bench_torch::ConfigKey& k : bench_torch::configurations(global_batch)) {
      configs.push_back({name, k.family, k.ranks, k.microbatches, k.rows, 0.0, 0.0, 0.0, {}, 0.0, {}, {}, {}, {}, {}, {}, {}});
    }
    measure(model, profile, configs, repetitions, passes, probes, paired, fixed);
    // Recalibrated from every step of the last pass of two runs of different shapes (one rank
    // with 2 micro-batches, two ranks with 32) and their step times (docs/plan.md).
    std::vector<ppsched::plan::MeasuredRun> runs;
    for (const Config& c : configs) {
      if ((c.family == "gpipe" && c.ranks == 1 && c.microbatches == 2) || (c.family == "1f1b" && c.ranks == 2 && c.microbatches == 32)) {
        runs.push_back({c.last_pass, static_cast<double>(c.rows), c.passes.back()});
      }
    }
    const ppsched::plan::Recalibration fit = ppsched::plan::recalibrate_plan(profile, runs, 2, global_batch, {}, {});
    const ppsched::Profile fastest_profile = priced_at32(at_fastest(measured_profile), profile, fixed);
    for (Config& c : configs) {
      c.from_fastest = predict(fastest_profile, c);
      c.calibrated = predict(fit.profile, c);
      for (const auto& v : undone) c.undone.push_back(predict(v.second, c));
    }
    std::vector<double> predicted, measured, calibrated, alone;
    std::vector<std::vector<double>> undone_predicted(undone.size());
    accuracy::Errors profiled, recalibrated, unshared;
    std::vector<accuracy::Errors> undone_errors(undone.size());
    double sum_noise = 0.0;
    accuracy::Errors fastest_errors;
    std::vector<double> fastest_predicted, fastest_measured;
    // The same figures over the steps every core's probes found at its usual speed, for the
    // configurations with at least three such steps.
    accuracy::Errors steady_errors;
    std::vector<double> steady_predicted, steady_measured;
    double steady_noise = 0.0;
    std::size_t steady_count = 0, step_count = 0;
    for (const Config& c : configs) {
      const accuracy::Spread m = accuracy::spread_of(c.passes);
      const std::vector<std::vector<double>> steady = machine::steady_passes(c.passes, c.probes, probes, steady_tolerance);
      std::size_t kept = 0;
      for (const auto& q : steady) kept += q.size();
      steady_count += kept;
      for (const auto& p : c.passes) step_count += p.size();
      char steady_error[16] = "      -";
      if (kept >= 3) {
        const accuracy::Spread q = accuracy::spread_of(steady);
        std::snprintf(steady_error, sizeof steady_error, "%+6.1f%%", 100.0 * steady_errors.add(c.predicted, q.median));
        steady_predicted.push_back(c.predicted);
        steady_measured.push_back(q.median);
        steady_noise += q.noise;
      }
      sum_noise += m.noise;
      (void)fastest_errors.add(c.from_fastest, m.min);
      fastest_predicted.push_back(c.from_fastest);
      fastest_measured.push_back(m.min);
      const double error = profiled.add(c.predicted, m.median);
      const double error_calibrated = recalibrated.add(c.calibrated, m.median);
      (void)unshared.add(c.alone, m.median);
      for (std::size_t v = 0; v < undone.size(); ++v) {
        (void)undone_errors[v].add(c.undone[v], m.median);
        undone_predicted[v].push_back(c.undone[v]);
      }
      alone.push_back(c.alone);
      predicted.push_back(c.predicted);
      measured.push_back(m.median);
      calibrated.push_back(c.calibrated);
      std::printf("%-5s %-17s %2d %3d %4d  %9.3f  %9.3f %8.3f %8.3f  %6.1f%%  %+6.1f%%  %9.3f  %+6.1f%%  %6zu  %s\n",
                  name.c_str(), c.family.c_str(), c.ranks, c.microbatches, c.rows, c.predicted, m.median, m.min, m.max,
                  100.0 * m.noise, 100.0 * error, c.calibrated, 100.0 * error_calibrated, kept, steady_error);
      all.push_back(c);
    }
    const auto pick = static_cast<std::size_t>(std::min_element(predicted.begin(), predicted.end()) - predicted.begin());
    const auto best = static_cast<std::size_t>(std::min_element(measured.begin(), measured.end()) - measured.begin());
    const double loss = (measured[pick] - measured[best]) / measured[best];
    const double n = static_cast<double>(configs.size());
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s: %zu configurations, mean noise floor %.1f%%, mean |error| %.1f%%, max %.1f%%, Kendall's tau %.2f; "
                  "pick %s p=%d m=%d measures %.1f%% over the fastest (%s p=%d m=%d): %s",
                  name.c_str(), configs.size(), 100.0 * sum_noise / n, 100.0 * profiled.mean(), 100.0 * profiled.max,
                  kendall_tau(predicted, measured), configs[pick].family.c_str(), configs[pick].ranks,
                  configs[pick].microbatches, 100.0 * loss, configs[best].family.c_str(), configs[best].ranks,
                  configs[best].microbatches, loss <= 0.05 ? "the pick holds" : "the pick does NOT hold");
    summaries.emplace_back(line);
    if (steady_errors.count == 0) {
      std::snprintf(line, sizeof line, "%s on steady steps: %zu of %zu steps steady, no configuration with three", name.c_str(),
                    steady_count, step_count);
    } else {
      const auto qpick = static_cast<std::size_t>(std::min_element(steady_predicted.begin(), steady_predicted.end()) -
                                                  steady_predicted.begin());
      const double qbest = *std::min_element(steady_measured.begin(), steady_measured.end());
      std::snprintf(line, sizeof line,
                    "%s on steady steps (every core's probe within %.2fx of its median before and after): %zu of %zu steps, "
                    "%zu configurations with three or more: mean noise floor %.1f%%, mean |error| %.1f%%, max %.1f%%, "
                    "tau %.2f; the pick among them measures %.1f%% over their fastest",
                    name.c_str(), steady_tolerance, steady_count, step_count, steady_errors.count,
                    100.0 * steady_noise / static_cast<double>(steady_errors.count), 100.0 * steady_errors.mean(),
                    100.0 * steady_errors.max, kendall_tau(steady_predicted, steady_measured),
                    100.0 * (steady_measured[qpick] - qbest) / qbest);
    }
    summaries.emplace_back(line);
    const auto pick_alone = static_cast<std::size_t>(std::min_element(alone.begin(), alone.end()) - alone.begin());
    std::snprintf(line, sizeof line,
                  "%s without the concurrent slowdown (%.2fx): mean |error| %.1f%%, max %.1f%%, tau %.2f; pick %s p=%d m=%d "
                  "measures %.1f%% over the fastest",
                  name.c_str(), profile.fixed_costs.concurrent_slowdown.back(), 100.0 * unshared.mean(), 100.0 * unshared.max,
                  kendall_tau(alone, measured), configs[pick_alone].family.c_str(), configs[pick_alone].ranks,
                  configs[pick_alone].microbatches, 100.0 * (measured[pick_alone] - measured[best]) / measured[best]);
    summaries.emplace_back(line);
    // `p` against `ms` (each configuration's measured median, or another column of it).
    const auto against = [&](const char* what, const std::vector<double>& p, const accuracy::Errors& e,
                             const std::vector<double>& ms) {
      const auto at = static_cast<std::size_t>(std::min_element(p.begin(), p.end()) - p.begin());
      const double fastest = *std::min_element(ms.begin(), ms.end());
      std::snprintf(line, sizeof line,
                    "%s %s: mean |error| %.1f%%, max %.1f%%, tau %.2f; pick %s p=%d m=%d measures %.1f%% over the fastest",
                    name.c_str(), what, 100.0 * e.mean(), 100.0 * e.max, kendall_tau(p, ms), configs[at].family.c_str(),
                    configs[at].ranks, configs[at].microbatches, 100.0 * (ms[at] - fastest) / fastest);
      summaries.emplace_back(line);
    };
    against("fastest against fastest (predicted from every call's fastest repetition, against each configuration's "
            "fastest step)",
            fastest_predicted, fastest_errors, fastest_measured);
    for (std::size_t v = 0; v < undone.size(); ++v) against(undone[v].first.c_str(), undone_predicted[v], undone_errors[v], measured);
    const auto pick_after =
        static_cast<std::size_t>(std::min_element(calibrated.begin(), calibrated.end()) - calibrated.begin());
    std::snprintf(line, sizeof line,
                  "%s recalibrated from 2 runs (%.4f ms per step, %.4f per action): mean |error| %.1f%%, max %.1f%%, "
                  "tau %.2f; pick %s p=%d m=%d measures %.1f%% over the fastest",
                  name.c_str(), fit.profile.fixed_costs.step, fit.profile.fixed_costs.action, 100.0 * recalibrated.mean(),
                  100.0 * recalibrated.max, kendall_tau(calibrated, measured), configs[pick_after].family.c_str(),
                  configs[pick_after].ranks, configs[pick_after].microbatches,
                  100.0 * (measured[pick_after] - measured[best]) / measured[best]);
    summaries.emplace_back(line);
    if (paired) {
      std::vector<paired::Row> rows;
      for (std::size_t i = 0; i < configs.size(); ++i) {
        const Config& c = configs[i];
        rows.push_back({c.family + " p=" + std::to_string(c.ranks) + " m=" + std::to_string(c.microbatches), c.ranks, c.predicted,
                        measured[i], &c.pairs, &c.in_step, &c.in_prediction, &c.calls_alone});
      }
      for (std::string& l : paired::report(name, rows)) summaries.push_back(std::move(l));
    }
  }
  for (const std::string& s : summaries) std::printf("%s\n", s.c_str());
  std::printf("%zu configurations in all\n", all.size());
  machine::print_cores(probes, steady_tolerance);
  if (!plot.empty()) {
    write_plot(plot, all, summaries);
    std::printf("plot written to %s\n", plot.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_accuracy_torch: " << e.what() << '\n';
  return 1;
}
