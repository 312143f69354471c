// Accuracy of the planner's predictions on a real model: the plain C++ MLP of examples/mlp
// (8 linear + tanh layers of width 64) through the CPU backend. The model is profiled by the
// library (profile_stages at 2, 8 and 32 rows; measure_backend_overheads), then for every
// configuration (family, ranks, micro-batch count and size; global batch 64) the planner's cut
// is run and its step predicted (graph_model + cost_model_of + simulate, as plan_devices
// prices it) and measured (wall time of World::run_step). Passes over all configurations are
// interleaved, so a change of load hits every configuration alike; per configuration it prints
// the predicted and the measured median with the spread of the repetitions and the two passes'
// difference (the noise floor); then the mean and maximum error and Kendall's tau between the
// predicted and measured orderings. Every step runs between two probes of each core's speed
// (machine_probe.hpp): the same figures over the steps taken while every core ran at its usual
// speed, and each core's share of slow probes, close the report (docs/accuracy.md, run 8). Not
// a Google Benchmark program and not a test: a report.
//
//   bench_accuracy [repetitions per pass] [passes] [--paired]      docs/accuracy.md has the figures
// --paired: every step right after a profile of the layers at its micro-batch size (the same
// profiler, 1 warm-up and 3 repetitions), the running cut predicted from it (paired.hpp); the
// paired table and summary follow, with (one rank) where a step's time goes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/plan/plan.hpp>
#include <ppsched/runtime/profile.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/sim/simulate.hpp>
#include <string>
#include <vector>

#include "../examples/mlp/mlp.hpp"
#include "accuracy_stats.hpp"
#include "machine_probe.hpp"
#include "paired.hpp"
#include "../examples/mlp/mlp_stage.hpp"

namespace {

struct Config {
  std::string family;
  std::int32_t ranks = 1;
  std::int32_t microbatches = 1;
  std::int32_t rows = 1;
  double predicted = 0.0;
  double alone = 0.0;                       // predicted without the ranks' concurrent slowdown
  double recalibrated = 0.0;                // predicted from the profile calibrated by one step of one run
  double recalibrated_runs = 0.0;           // ... by every step of two runs of different shapes
  std::vector<std::vector<double>> passes;  // ms per step, per pass
  ppsched::Timeline timeline;               // the last step's, measured
  std::vector<ppsched::Timeline> last_pass; // every step of the last pass
  // Per pass, per step, per core: the slower of the core's probes before and after the step.
  std::vector<std::vector<std::vector<double>>> probes;
  // --paired (paired.hpp): every step against the prediction from a profile taken right before
  // it, and per step the time per kind of action in the step, in that prediction and (one rank)
  // in the running stages' own calls timed alone.
  accuracy::Pairs pairs;
  accuracy::Pairs pairs_without_optimizer;  // the same steps, predicted without the stages' optimizer_step
  std::vector<paired::Parts> in_step, in_prediction, calls_alone;
};

// A core's probe within this factor of its usual speed counts as steady (machine_probe.hpp).
constexpr double steady_tolerance = 1.15;

}  // namespace

int main(int argc, char** argv) try {
  // --paired, anywhere: every step after a profile at its size (paired.hpp); the rest positional.
  const bool paired = std::find_if(argv + 1, argv + argc, [](const char* a) { return std::string(a) == "--paired"; }) != argv + argc;
  if (paired) argc = static_cast<int>(std::remove_if(argv + 1, argv + argc, [](const char* a) { return std::string(a) == "--paired"; }) - argv);
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 10;
  const int passes = argc > 2 ? std::atoi(argv[2]) : 2;
  const std::vector<std::size_t> widths(9, 64);
  mlp::Mlp model(widths, 1);
  const std::size_t layers = model.layers.size();

  // 1. The measured profile.
  auto keep = std::make_shared<std::vector<std::unique_ptr<mlp::MlpStage>>>();
  const ppsched::profiling::StageFactory per_layer = [&model, layers, keep](std::int32_t rows) {
    std::vector<ppsched::StageFunctions> f;
    for (std::size_t l = 0; l < layers; ++l) {
      keep->push_back(std::make_unique<mlp::MlpStage>(model, l, l + 1, static_cast<std::size_t>(rows), 1));
      f.push_back(keep->back()->functions(l + 1 == layers, 1.0f, 0.0f));
    }
    return f;
  };
  ppsched::profiling::ProfileOptions po;
  po.rows = {2, 8, 32};
  po.repetitions = 20;
  po.warmup = 3;
  ppsched::CpuOptions cpu;
  cpu.checking = false;
  ppsched::CpuCluster single(1, cpu), pair(2, cpu);
  // The empty stages carry the model's weight-gradient floats (OverheadOptions::weight_grad_floats).
  ppsched::profiling::OverheadOptions oo;
  for (const mlp::Linear& l : model.layers) oo.weight_grad_floats += l.parameter_count();
  const ppsched::profiling::BackendOverheads overheads =
      ppsched::profiling::measure_backend_overheads<ppsched::CpuBackend>({&single.rank(0)}, {&pair.rank(0), &pair.rank(1)}, oo);
  ppsched::Profile profile = ppsched::profiling::measured_profile(ppsched::profiling::profile_stages(per_layer, po), "ms", 32, overheads);
  double optimizer_ms = 0.0;
  for (const ppsched::Layer& l : profile.graph.layers()) optimizer_ms += l.optimizer_step;
  std::printf("the stages' optimizer steps, summed: %.4f ms per step (profile_stages)\n", optimizer_ms);
  // Two ranks computing at once on this host: the whole MLP's F, BI and BW of one 8-row
  // micro-batch, each thread on its own copy of the model.
  std::vector<std::unique_ptr<mlp::Mlp>> copies;
  std::vector<std::unique_ptr<mlp::MlpStage>> whole;
  std::vector<ppsched::StageFunctions> whole_f;
  std::vector<std::vector<float>> buffers;  // per thread: input, output, gradient in, gradient out, weight gradient
  for (int t = 0; t < 2; ++t) {
    copies.push_back(std::make_unique<mlp::Mlp>(widths, 1));
    whole.push_back(std::make_unique<mlp::MlpStage>(*copies.back(), 0, layers, 8, 1));
    whole_f.push_back(whole.back()->functions(false, 1.0f, 0.0f));
    const ppsched::StageFunctions& f = whole_f.back();
    for (const std::size_t n : {f.input_size, f.output_size, f.input_size, f.output_size, f.weight_grad_size}) {
      buffers.emplace_back(n, 0.5f);
    }
  }
  profile.fixed_costs.concurrent_slowdown = ppsched::profiling::measure_concurrent_slowdown(
      [&](std::int32_t thread) {
        const auto t = static_cast<std::size_t>(thread);
        const ppsched::StageFunctions& f = whole_f[t];
        std::vector<float>* b = &buffers[5 * t];
        f.forward(0, b[0], b[1]);
        f.backward_input(0, b[0], b[3], b[2]);
        f.backward_weight(0, b[0], b[3], b[4]);
      },
      {.ranks = 2});
  std::printf("fixed cost per step %.4f ms, per action %.4f ms, per transfer %.4f ms; two ranks computing at once "
              "%.2fx slower\n",
              overheads.fixed_costs.step, overheads.fixed_costs.action, overheads.fixed_costs.transfer,
              profile.fixed_costs.concurrent_slowdown.back());

  // 2. The configurations: global batch 64.
  std::vector<Config> configs;
  for (const std::int32_t p : {1, 2}) {
    for (const char* family : {"gpipe", "1f1b", "zb-h1", "interleaved-1f1b"}) {
      if (p == 1 && std::string(family) == "interleaved-1f1b") continue;
      for (const std::int32_t m : {2, 8, 32}) configs.push_back({family, p, m, 64 / m, 0.0, 0.0, 0.0, 0.0, {}, {}, {}, {}, {}, {}, {}, {}, {}});
    }
  }
  // 3. Interleaved passes, every step between two probes of each core's speed.
  machine::CoreProbes probes;
  for (int k = 0; k < 100; ++k) (void)probes.run();
  for (int pass = 0; pass < passes; ++pass) {
    for (Config& c : configs) {
      ppsched::ScheduleRequest request{c.ranks, c.microbatches, c.family == "interleaved-1f1b" ? 2 : 1};
      const ppsched::Schedule schedule = ppsched::make_schedule(c.family, request);
      ppsched::plan::GraphModelOptions g;
      g.ranks = c.ranks;
      g.microbatches = c.microbatches;
      const ppsched::plan::PlanModel plan_model = ppsched::plan::graph_model(ppsched::profile_at_rows(profile, c.rows), "mlp", g);
      const ppsched::Partition cut = plan_model.partition(schedule.placement);
      const ppsched::CostModel cost = ppsched::plan::cost_model_of(cut, ppsched::plan::plan_cost_options(plan_model, 0.5));
      c.predicted = ppsched::simulate(schedule, cost).makespan;
      ppsched::CostModel alone = cost;
      alone.fixed_costs.concurrent_slowdown.clear();
      c.alone = ppsched::simulate(schedule, alone).makespan;
      std::vector<std::unique_ptr<mlp::MlpStage>> stages;
      std::vector<ppsched::StageFunctions> functions;
      for (std::size_t s = 0; s < cut.stages.size(); ++s) {
        stages.push_back(std::make_unique<mlp::MlpStage>(model, cut.stages[s].begin, cut.stages[s].end,
                                                         static_cast<std::size_t>(c.rows), c.microbatches));
        functions.push_back(stages.back()->functions(s + 1 == cut.stages.size(), 1.0f / 64.0f, 0.0f));
      }
      ppsched::CpuCluster cluster(c.ranks, cpu);
      std::vector<ppsched::CpuBackend*> ranks;
      for (int r = 0; r < c.ranks; ++r) ranks.push_back(&cluster.rank(r));
      ppsched::World<ppsched::CpuBackend> world(ranks, schedule, cost, functions);
      const std::vector<float> inputs(64 * widths.front(), 0.25f), targets(64 * widths.back(), 0.0f);
      std::vector<double> steps;
      std::vector<std::vector<double>> around;
      c.last_pass.clear();
      for (int r = -2; r < repetitions; ++r) {
        ppsched::SimResult fresh;
        double fresh_without_optimizer = 0.0;
        paired::Parts calls_alone;
        if (paired) {
          ppsched::profiling::ProfileOptions fresh_options = po;
          fresh_options.rows = {c.rows};
          fresh_options.warmup = 1;
          fresh_options.repetitions = 3;
          ppsched::Profile p = ppsched::profiling::measured_profile(ppsched::profiling::profile_stages(per_layer, fresh_options), "ms",
                                                                    c.rows, overheads);
          p.fixed_costs.concurrent_slowdown = profile.fixed_costs.concurrent_slowdown;
          fresh = paired::predict_cut(p, c.rows, cut, schedule);
          fresh_without_optimizer = paired::predict_cut(paired::without_optimizer(p), c.rows, cut, schedule).makespan;
          if (c.ranks == 1) {
            const ppsched::profiling::StageFactory running = [&](std::int32_t rows) {
              std::vector<ppsched::StageFunctions> f;
              for (std::size_t s = 0; s < cut.stages.size(); ++s) {
                keep->push_back(std::make_unique<mlp::MlpStage>(model, cut.stages[s].begin, cut.stages[s].end,
                                                                static_cast<std::size_t>(rows), 1));
                f.push_back(keep->back()->functions(s + 1 == cut.stages.size(), 1.0f, 0.0f));
              }
              return f;
            };
            calls_alone = paired::stages_alone(running, schedule, c.rows, 1, 3, 0.0);
          }
        }
        double ms = 0.0;
        std::vector<double> probe = machine::probe_around(probes, [&] {
          const auto t0 = std::chrono::steady_clock::now();
          (void)world.run_step({inputs, targets});
          ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        });
        if (r >= 0) {
          steps.push_back(ms);
          around.push_back(std::move(probe));
          c.last_pass.push_back(world.last_step().timeline);
          if (paired) {
            c.pairs.add(fresh.makespan, ms);
            c.pairs_without_optimizer.add(fresh_without_optimizer, ms);
            c.in_step.push_back(paired::parts_of(world.last_step().timeline, ms));
            c.in_prediction.push_back(paired::parts_of(fresh.timeline, fresh.makespan));
            if (c.ranks == 1) c.calls_alone.push_back(calls_alone);
          }
        }
      }
      c.passes.push_back(steps);
      c.probes.push_back(std::move(around));
      c.timeline = world.last_step().timeline;
    }
  }
  // 4. Calibration from one configuration's measured step (1f1b, 2 ranks, 8 x 8), and every
  //    configuration predicted again from the calibrated profile.
  const auto calibrating = std::find_if(configs.begin(), configs.end(), [](const Config& c) {
    return c.family == "1f1b" && c.ranks == 2 && c.microbatches == 8;
  });
  const ppsched::plan::Recalibration fit =
      ppsched::plan::recalibrate_plan(profile, calibrating->timeline, calibrating->rows, 2, 64, {}, {});
  std::printf("calibrated from 1f1b p=2 m=8 (one step): fixed cost per action %.4f ms\n", fit.profile.fixed_costs.action);
  // The same from every step of the last pass of two runs of different shapes (one rank, 2
  // micro-batches; two ranks, 32), with the step times measured around run_step.
  std::vector<ppsched::plan::MeasuredRun> runs;
  for (const Config& c : configs) {
    if ((c.family == "gpipe" && c.ranks == 1 && c.microbatches == 2) || (c.family == "1f1b" && c.ranks == 2 && c.microbatches == 32)) {
      runs.push_back({c.last_pass, static_cast<double>(c.rows), c.passes.back()});
    }
  }
  const ppsched::plan::Recalibration fit_runs = ppsched::plan::recalibrate_plan(profile, runs, 2, 64, {}, {});
  std::printf("calibrated from gpipe p=1 m=2 and 1f1b p=2 m=32 (%d steps each): fixed cost per step %.4f ms, per action %.4f ms\n",
              repetitions, fit_runs.profile.fixed_costs.step, fit_runs.profile.fixed_costs.action);
  for (Config& c : configs) {
    ppsched::ScheduleRequest request{c.ranks, c.microbatches, c.family == "interleaved-1f1b" ? 2 : 1};
    const ppsched::Schedule schedule = ppsched::make_schedule(c.family, request);
    ppsched::plan::GraphModelOptions g;
    g.ranks = c.ranks;
    g.microbatches = c.microbatches;
    const ppsched::plan::PlanModel m = ppsched::plan::graph_model(ppsched::profile_at_rows(fit.profile, c.rows), "mlp", g);
    c.recalibrated =
        ppsched::simulate(schedule, ppsched::plan::cost_model_of(m.partition(schedule.placement), ppsched::plan::plan_cost_options(m, 0.5)))
            .makespan;
    const ppsched::plan::PlanModel m2 = ppsched::plan::graph_model(ppsched::profile_at_rows(fit_runs.profile, c.rows), "mlp", g);
    c.recalibrated_runs =
        ppsched::simulate(schedule, ppsched::plan::cost_model_of(m2.partition(schedule.placement), ppsched::plan::plan_cost_options(m2, 0.5)))
            .makespan;
  }
  // 5. The report.
  std::printf("%-17s %2s %3s %4s  %9s  %9s %7s %7s  %7s  %6s  %9s  %6s  %9s  %6s\n", "family", "p", "m", "rows",
              "predicted", "measured", "min", "max", "noise", "error", "calibr.", "error", "2 runs", "error");
  accuracy::Errors profiled, one_step, two_runs, unshared;
  double sum_noise = 0.0;
  std::vector<double> predicted, measured, after, after_runs;
  for (const Config& c : configs) {
    const accuracy::Spread m = accuracy::spread_of(c.passes);
    sum_noise += m.noise;
    const double error = profiled.add(c.predicted, m.median);
    (void)unshared.add(c.alone, m.median);
    const double error_after = one_step.add(c.recalibrated, m.median);
    const double error_runs = two_runs.add(c.recalibrated_runs, m.median);
    predicted.push_back(c.predicted);
    measured.push_back(m.median);
    after.push_back(c.recalibrated);
    after_runs.push_back(c.recalibrated_runs);
    std::printf("%-17s %2d %3d %4d  %9.4f  %9.4f %7.4f %7.4f  %6.1f%%  %+5.1f%%  %9.4f  %+5.1f%%  %9.4f  %+5.1f%%\n",
                c.family.c_str(), c.ranks, c.microbatches, c.rows, c.predicted, m.median, m.min, m.max,
                100.0 * m.noise, 100.0 * error, c.recalibrated, 100.0 * error_after, c.recalibrated_runs,
                100.0 * error_runs);
  }
  const double n = static_cast<double>(configs.size());
  std::printf("%zu configurations: mean noise floor %.1f%%\n"
              "  profiled:   mean |error| %.1f%%, max %.1f%%, Kendall's tau %.2f\n"
              "  calibrated: mean |error| %.1f%%, max %.1f%%, Kendall's tau %.2f (one step of one run)\n"
              "  calibrated: mean |error| %.1f%%, max %.1f%%, Kendall's tau %.2f (every step of two runs)\n",
              configs.size(), 100.0 * sum_noise / n, 100.0 * profiled.mean(), 100.0 * profiled.max,
              accuracy::kendall_tau(predicted, measured), 100.0 * one_step.mean(), 100.0 * one_step.max,
              accuracy::kendall_tau(after, measured), 100.0 * two_runs.mean(), 100.0 * two_runs.max,
              accuracy::kendall_tau(after_runs, measured));
  std::vector<double> alone;
  for (const Config& c : configs) alone.push_back(c.alone);
  std::printf("  profiled without the concurrent slowdown (%.2fx): mean |error| %.1f%%, max %.1f%%, Kendall's tau %.2f\n",
              profile.fixed_costs.concurrent_slowdown.back(), 100.0 * unshared.mean(), 100.0 * unshared.max,
              accuracy::kendall_tau(alone, measured));
  // The same over the steps every core's probes found at its usual speed (docs/accuracy.md,
  // run 8), for the configurations with at least three.
  accuracy::Errors steady;
  std::vector<double> steady_predicted, steady_measured;
  std::size_t steady_steps = 0, all_steps = 0;
  for (const Config& c : configs) {
    const std::vector<std::vector<double>> kept = machine::steady_passes(c.passes, c.probes, probes, steady_tolerance);
    std::size_t count = 0;
    for (const auto& p : kept) count += p.size();
    for (const auto& p : c.passes) all_steps += p.size();
    steady_steps += count;
    if (count < 3) continue;
    const double median = accuracy::spread_of(kept).median;
    (void)steady.add(c.predicted, median);
    steady_predicted.push_back(c.predicted);
    steady_measured.push_back(median);
  }
  std::printf("  profiled, on steady steps (every core's probe within %.2fx of its median before and after): %zu of %zu "
              "steps, %zu configurations with three or more: mean |error| %.1f%%, max %.1f%%, Kendall's tau %.2f\n",
              steady_tolerance, steady_steps, all_steps, steady.count, 100.0 * steady.mean(), 100.0 * steady.max,
              accuracy::kendall_tau(steady_predicted, steady_measured));
  if (paired) {
    std::vector<paired::Row> rows;
    for (const Config& c : configs) {
      rows.push_back({c.family + " p=" + std::to_string(c.ranks) + " m=" + std::to_string(c.microbatches), c.ranks, c.predicted,
                      accuracy::spread_of(c.passes).median, &c.pairs, &c.in_step, &c.in_prediction, &c.calls_alone});
    }
    for (const std::string& l : paired::report("mlp", rows)) std::printf("%s\n", l.c_str());
    // The same steps against predictions without the stages' optimizer step (Layer::optimizer_step).
    double with_sum = 0.0, with_max = 0.0, without_sum = 0.0, without_max = 0.0, one_with = 0.0, one_without = 0.0;
    int one = 0;
    for (const Config& c : configs) {
      const double e = c.pairs.error(), e0 = c.pairs_without_optimizer.error();
      with_sum += std::abs(e);
      with_max = std::max(with_max, std::abs(e));
      without_sum += std::abs(e0);
      without_max = std::max(without_max, std::abs(e0));
      if (c.ranks == 1) {
        one_with += e;
        one_without += e0;
        ++one;
      }
    }
    const double count = static_cast<double>(std::max<std::size_t>(configs.size(), 1));
    std::printf("paired, with the optimizer step: mean |error| %.1f%%, max %.1f%%, one rank mean error %+.1f%%; "
                "without: %.1f%%, %.1f%%, %+.1f%%\n",
                100.0 * with_sum / count, 100.0 * with_max, 100.0 * one_with / std::max(one, 1), 100.0 * without_sum / count,
                100.0 * without_max, 100.0 * one_without / std::max(one, 1));
  }
  machine::print_cores(probes, steady_tolerance);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_accuracy: " << e.what() << '\n';
  return 1;
}
