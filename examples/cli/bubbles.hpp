// ppsched-bubbles, the whole tool but for main(): for each schedule it cuts the model as
// ppsched-plan does and prices the cut with the same bridge (cost_model_of,
// ppsched/plan/costs.hpp), lowers it once, simulates that lowered schedule and has a backend
// run it with synthetic stages, then sets the measured bubble per rank beside the prediction (report
// or JSON, and the measured timeline as a Chrome trace). One copy of this logic serves both
// builds of the tool: the CPU-only one and the one that adds the CUDA backend
// (bubbles_backend.hpp is the seam), so flags, output and exit statuses cannot diverge.
// The CPU backend's runner is here: timed waits on a CpuCluster, which model device time
// without burning a core, so 8 ranks measure faithfully on a 2-core machine.
//
// Exit status of bubbles_main: 0 done; 1 a step failed while measuring (or an internal
// error); 2 bad input (an unknown flag or schedule, a request no schedule accepts, a backend
// this build lacks, an unwritable --trace file); 3 the backend cannot run on this machine
// (the CUDA build without a usable GPU). docs/cli.md documents the flags and the JSON.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.hpp"
#include "bubbles_backend.hpp"
#include "bubbles_options.hpp"
#include "models.hpp"
#include "output_file.hpp"
#include "plan.hpp"
#include "plan_report.hpp"
#include "ppsched/plan/compare.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/backend/cpu.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/synthetic.hpp"
#include "ppsched/runtime/world.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/chrome_trace.hpp"
#include "ppsched/trace/compare.hpp"
#include "ppsched/trace/stats.hpp"
#include "text.hpp"

namespace ppsched::cli {
using namespace ppsched::plan;  // the planner library, which these tools only parse for and print

// A step failed while a backend ran it (a CUDA error, a stage that threw): the request was
// fine, so this is not exit status 2.
class MeasurementFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The CPU backend: one CpuCluster per schedule, a thread per rank and per stream, each
// action a timed wait of its cost.
[[nodiscard]] inline BubblesBackend cpu_bubbles_backend() {
  BubblesBackend backend;
  backend.name = "cpu";
  backend.prepare = [](std::int32_t) { return std::string("CPU backend (a thread per stream, timed waits)"); };
  backend.run = [](const Schedule& lowered, const CostModel& cost_ms, std::int32_t warmup, std::int32_t steps) {
    const std::vector<float> inputs(static_cast<std::size_t>(lowered.microbatches), 1.0f);
    const std::vector<float> targets(static_cast<std::size_t>(lowered.microbatches), 0.0f);
    const Batch batch{inputs, targets};
    CpuCluster cluster(lowered.ranks);
    std::vector<CpuBackend*> backends;
    for (int r = 0; r < lowered.ranks; ++r) backends.push_back(&cluster.rank(r));
    World<CpuBackend> world(
        backends, lowered,
        synthetic_stages(cost_ms, lowered.stages(), lowered.microbatches, std::chrono::milliseconds(1)));
    std::vector<Timeline> measured;
    for (std::int32_t i = 0; i < warmup; ++i) (void)world.run_step(batch);
    for (std::int32_t i = 0; i < steps; ++i) measured.push_back(world.run_step(batch).timeline);
    return measured;
  };
  return backend;
}

[[nodiscard]] inline std::string bubbles_usage(std::span<const BubblesBackend> backends) {
  std::string names;
  for (const std::string_view n : family_names()) names += (names.empty() ? "" : ", ") + std::string(n);
  std::string built;
  for (const BubblesBackend& b : backends) built += (built.empty() ? "" : ", ") + b.name;
  return "usage: ppsched-bubbles [--stage-cost F,B,W | --layers N | --profile FILE] [--stages P] [--microbatches M]\n"
         "                       [--schedule all|NAME[,NAME...]] [--ms-per-unit X] [--steps N] [--backend cpu|cuda]\n"
         "                       [--json] [--trace FILE]\n"
         "Runs each schedule on synthetic timed stages through the executor and prints the measured bubble per\n"
         "rank beside the simulator's prediction.\n\n" +
         flag_help(bubbles_flags) + "\nschedules: all, " + names + "\nbackends in this build: " + built +
         "\nexit status: 0 done, 1 a step failed, 2 bad input, 3 the backend cannot run here (no GPU).\n"
         "See docs/cli.md.\n";
}

// One schedule's measurement and prediction.
struct BubblesMeasurement {
  std::string name;
  std::int32_t chunks = 1;
  Timeline predicted;
  std::vector<Timeline> steps;  // measured, in order
  std::size_t reported = 0;     // the median step by makespan
  TimelineComparison comparison;
};

// Milliseconds per model unit: given, or from the model's time unit, or 1 for a unit-less model.
[[nodiscard]] inline double milliseconds_per_unit(const BubblesOptions& options, const PlanModel& model) {
  if (options.ms_per_unit > 0.0) return options.ms_per_unit;
  if (const auto ms = model.unit.try_factor_to(TimeUnit("ms"))) return *ms;
  return 1.0;
}

[[nodiscard]] inline BubblesMeasurement measure(const Schedule& schedule, std::int32_t chunks,
                                                const Partition& partition, const BubblesOptions& options,
                                                double ms_per_unit, const BubblesBackend& backend) {
  // The planner's bridge, in milliseconds so that the prediction and the measurement share a
  // unit. The synthetic stages move no modelled bytes, so transfers are free in the prediction
  // as they are in the run.
  PlanCostOptions priced;
  priced.unit = "ms";
  priced.weight_memory_fraction = options.model.w_memory_ratio;
  priced.time_scale = ms_per_unit;
  priced.transfers = false;
  const CostModel cost = cost_model_of(partition, priced);
  // One lowered program for both, so that they differ only in who ran it.
  const Schedule lowered = lower(schedule, lower_options_for(cost, schedule.stages(), schedule.microbatches));

  BubblesMeasurement m;
  m.name = schedule.name;
  m.chunks = chunks;
  m.predicted = simulate(lowered, cost).timeline;
  try {
    m.steps = backend.run(lowered, cost, options.warmup, options.steps);
  } catch (const error& e) {
    throw MeasurementFailed(concat(schedule.name, " on the ", backend.name, " backend: ", e.what()));
  }
  if (m.steps.size() != static_cast<std::size_t>(options.steps)) {
    throw MeasurementFailed(concat(schedule.name, " on the ", backend.name, " backend: ", m.steps.size(),
                                   " steps measured of ", options.steps));
  }

  std::vector<std::size_t> order(m.steps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<double> makespans;
  for (const Timeline& t : m.steps) makespans.push_back(summarize(t).makespan);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return makespans[a] < makespans[b]; });
  m.reported = order[order.size() / 2];
  m.comparison = compare(m.steps[m.reported], m.predicted);
  return m;
}

[[nodiscard]] inline std::string points(double pp) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%+.1f pp", pp);
  return buffer;
}

[[nodiscard]] inline std::string render_bubbles(const std::vector<BubblesMeasurement>& results,
                                                const std::vector<SkippedSchedule>& skipped,
                                                const BubblesOptions& options, const PlanModel& model,
                                                double ms_per_unit, const std::string& backend_detail) {
  std::string out = concat("ppsched-bubbles: ", model.description, "\n", options.model.stages, " ranks, ",
                           options.model.microbatches, " micro-batches, ", backend_detail, ", 1 ", model.unit.text(), " = ",
                           number_text(ms_per_unit), " ms; median of ", options.steps, " steps after ",
                           options.warmup, " warm-up\n");
  for (const BubblesMeasurement& m : results) {
    const TimelineComparison& c = m.comparison;
    out += concat("\n", m.name, " (v=", m.chunks, "): makespan ", number_text(c.measured.makespan), " ms measured, ",
                  number_text(c.predicted.makespan), " ms predicted");
    if (c.makespan_ratio) out += concat(" (x", number_text(*c.makespan_ratio), ")");
    out += '\n';
    TextTable table({"rank", "bubble measured", "predicted", "difference"}, {true, true, true, true});
    for (const RankComparison& r : c.per_rank) {
      table.add({std::to_string(r.rank), percent_of(r.measured_bubble), percent_of(r.predicted_bubble),
                 points(r.difference_pp)});
    }
    table.add({"all", percent_of(c.measured.bubble_fraction), percent_of(c.predicted.bubble_fraction),
               points(c.bubble_difference_pp)});
    out += table.str();
    if (c.matched != 0) {
      out += concat("actions started ", number_text(c.start.mean), " ms later than predicted on average (max ",
                    number_text(c.start.max_abs), " ms)\n");
    }
  }
  if (!skipped.empty()) out += '\n';
  for (const SkippedSchedule& s : skipped) out += concat("skipped ", s.name, ": ", s.reason, '\n');
  return out;
}

[[nodiscard]] inline nlohmann::ordered_json bubbles_json(const std::vector<BubblesMeasurement>& results,
                                                         const std::vector<SkippedSchedule>& skipped,
                                                         const BubblesOptions& options, const PlanModel& model,
                                                         double ms_per_unit, const std::string& backend_detail) {
  using nlohmann::ordered_json;
  ordered_json schedules = ordered_json::array();
  for (const BubblesMeasurement& m : results) {
    const TimelineComparison& c = m.comparison;
    ordered_json ranks = ordered_json::array();
    for (const RankComparison& r : c.per_rank) {
      ranks.push_back({{"rank", r.rank},
                       {"measured_bubble", r.measured_bubble},
                       {"predicted_bubble", r.predicted_bubble},
                       {"difference_pp", r.difference_pp}});
    }
    ordered_json steps = ordered_json::array();
    for (const Timeline& t : m.steps) {
      const TimelineStats s = summarize(t);
      steps.push_back({{"makespan", s.makespan}, {"bubble_fraction", s.bubble_fraction}});
    }
    schedules.push_back(
        {{"name", m.name},
         {"chunks", m.chunks},
         {"actions", c.matched},
         {"measured",
          {{"makespan", c.measured.makespan}, {"bubble_fraction", c.measured.bubble_fraction}, {"step", m.reported}}},
         {"predicted", {{"makespan", c.predicted.makespan}, {"bubble_fraction", c.predicted.bubble_fraction}}},
         {"makespan_ratio", c.makespan_ratio ? ordered_json(*c.makespan_ratio) : ordered_json(nullptr)},
         {"bubble_difference_pp", c.bubble_difference_pp},
         {"start_deviation", {{"mean", c.start.mean}, {"max_abs", c.start.max_abs}}},
         {"ranks", std::move(ranks)},
         {"steps", std::move(steps)}});
  }
  ordered_json skipped_json = ordered_json::array();
  for (const SkippedSchedule& s : skipped) skipped_json.push_back({{"name", s.name}, {"reason", s.reason}});
  return {{"tool", "ppsched-bubbles"},
          {"version", version_text},
          {"backend", options.backend},
          {"backend_detail", backend_detail},
          {"model", {{"description", model.description}, {"unit", model.unit.text()}, {"layers", model.layers}}},
          {"ranks", options.model.stages},
          {"microbatches", options.model.microbatches},
          {"unit", "ms"},
          {"ms_per_unit", ms_per_unit},
          {"warmup", options.warmup},
          {"steps", options.steps},
          {"schedules", std::move(schedules)},
          {"skipped", std::move(skipped_json)},
          {"trace", options.trace_path.empty() ? ordered_json(nullptr) : ordered_json(options.trace_path)}};
}

[[nodiscard]] inline const BubblesBackend& backend_named(const std::string& name,
                                                         std::span<const BubblesBackend> backends) {
  for (const BubblesBackend& b : backends) {
    if (b.name == name) return b;
  }
  if (name == "cuda") {
    fail({"flag --backend", "this ppsched-bubbles was built without CUDA", "",
          "use --backend cpu, or the ppsched-bubbles of a build with CUDA enabled (meson setup -Dcuda=enabled on a "
          "machine with nvcc and NCCL)"});
  }
  fail({"flag --backend", concat("no backend '", name, "' in this build"), "", "use --backend cpu"});
}

inline int run_bubbles(std::span<const char* const> argv, std::span<const BubblesBackend> backends) {
  BubblesOptions options = parse_bubbles_options(argv);
  if (options.help) {
    std::cout << bubbles_usage(backends);
    return 0;
  }
  if (options.version) {
    std::cout << "ppsched-bubbles " << version_text << '\n';
    return 0;
  }
  const BubblesBackend& backend = backend_named(options.backend, backends);
  const PlanModel model = make_model(options.model);
  const double ms_per_unit = milliseconds_per_unit(options, model);
  check_chunks_used(options.model);
  // Every schedule is built and cut first, so that bad input is reported as such (exit 2)
  // whether or not this machine could run the backend.
  const FamilySchedules planned = family_schedules(model, plan_request(options.model));
  refuse_named_uncut(options.model, planned.skipped);
  const std::vector<SkippedSchedule>& skipped = planned.skipped;
  if (planned.built.empty()) {
    // Each family left out for the same lack of layers: the first reason says it.
    fail({"the schedules asked for",
          concat("no schedule to measure: all ", skipped.size(), " were left out; ", skipped.front().name, ": ",
                 skipped.front().reason),
          "",
          "use more layers (--layers or a profile) or fewer --stages"});
  }
  // Before any schedule runs, so that a machine without the device says so at once.
  const std::string backend_detail = backend.prepare(options.model.stages);
  std::vector<BubblesMeasurement> results;
  for (const FamilySchedule& p : planned.built) {
    results.push_back(measure(p.schedule, p.chunks, p.partition, options, ms_per_unit, backend));
  }
  if (!options.trace_path.empty()) {
    const BubblesMeasurement& m = results.front();
    ChromeTraceOptions o;
    o.title = concat("ppsched-bubbles: ", m.name, " (measured, ", backend.name, " backend)");
    write_file_atomically(options.trace_path, to_chrome_trace(m.steps[m.reported], o));
  }
  if (options.json) {
    std::cout << bubbles_json(results, skipped, options, model, ms_per_unit, backend_detail).dump(2) << '\n';
  } else {
    std::cout << render_bubbles(results, skipped, options, model, ms_per_unit, backend_detail);
  }
  return 0;
}

// The tool's main: `backends` are those this build has (the first is the default's, cpu).
// Every failure becomes a message on stderr and the exit status documented above.
[[nodiscard]] inline int bubbles_main(int argc, char** argv, std::span<const BubblesBackend> backends) noexcept {
  try {
    try {
      return run_bubbles(std::span<const char* const>(argv, static_cast<std::size_t>(argc)), backends);
    } catch (const BackendUnavailable& e) {
      std::cerr << "ppsched-bubbles: backend unavailable: " << e.what() << '\n';
      return 3;
    } catch (const MeasurementFailed& e) {
      std::cerr << "ppsched-bubbles: measurement failed: " << e.what() << '\n';
      return 1;
    } catch (const error& e) {
      std::cerr << "ppsched-bubbles: error: " << e.what() << "\n(run ppsched-bubbles --help for the flags)\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << "ppsched-bubbles: internal error: " << e.what() << '\n';
      return 1;
    }
  } catch (...) {  // writing the message failed too
    return 1;
  }
}

}  // namespace ppsched::cli
