// ppsched-bubbles: measures real pipeline bubbles. Each schedule runs through the real
// executor on the CPU backend (one thread per rank, streams as worker threads, rendezvous
// send/recv) with synthetic stages whose every action is a timed wait of the model's cost,
// and the measured timeline is set beside the simulator's prediction for the very same
// lowered schedule: bubble per rank and overall, makespan, and how far each action drifted.
// Timed waits stand in for device time without burning a core, so 8 ranks measure
// faithfully on a 2-core machine; what remains is the executor's and the backend's own
// overhead, which is what this tool shows. docs/cli.md documents the flags and the JSON.
//
// Exit status: 0 done; 2 bad input (an unknown flag or schedule, a request no schedule
// accepts, an unwritable --trace file).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/bubbles_options.hpp"
#include "cli/models.hpp"
#include "cli/output_file.hpp"
#include "cli/plan.hpp"
#include "cli/plan_report.hpp"
#include "ppsched/backend/cpu.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/synthetic.hpp"
#include "ppsched/runtime/world.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/lower.hpp"
#include "ppsched/sim/cost_model.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/chrome_trace.hpp"
#include "ppsched/trace/compare.hpp"
#include "ppsched/trace/stats.hpp"

namespace {

namespace cli = ppsched::cli;
using nlohmann::ordered_json;

std::string usage() {
  return "usage: ppsched-bubbles [--stage-cost F,B,W | --layers N | --profile FILE] [--stages P] [--microbatches M]\n"
         "                       [--schedule all|NAME[,NAME...]] [--ms-per-unit X] [--steps N] [--json] [--trace FILE]\n"
         "Runs each schedule on synthetic timed stages through the executor on the CPU backend and prints the\n"
         "measured bubble per rank beside the simulator's prediction.\n\n" +
         cli::flag_help(cli::bubbles_flags) + "\nschedules: all, " +
         [] {
           std::string names;
           for (const std::string_view n : ppsched::family_names()) names += (names.empty() ? "" : ", ") + std::string(n);
           return names;
         }() +
         "\nexit status: 0 done, 2 bad input. See docs/cli.md.\n";
}

// One schedule's measurement and prediction.
struct Measurement {
  std::string name;
  std::int32_t chunks = 1;
  ppsched::Timeline predicted;
  std::vector<ppsched::Timeline> steps;  // measured, in order
  std::size_t reported = 0;              // the median step by makespan
  ppsched::TimelineComparison comparison;
};

// Milliseconds per model unit: given, or from the model's time unit, or 1 for a unit-less model.
double milliseconds_per_unit(const cli::BubblesOptions& options, const cli::PlanModel& model) {
  if (options.ms_per_unit > 0.0) return options.ms_per_unit;
  if (const auto seconds = ppsched::seconds_per_unit(model.unit)) return *seconds * 1e3;
  return 1.0;
}

Measurement measure(const ppsched::Schedule& schedule, std::int32_t chunks, const cli::PartitionPlan& partition,
                    const cli::BubblesOptions& options, double ms_per_unit) {
  const cli::PlanOptions& o = options.model;
  // The cost model in milliseconds, so the prediction and the measurement share a unit.
  ppsched::CostModel cost;
  cost.unit = "ms";
  cost.weight_memory_fraction = o.w_memory_ratio;
  for (const cli::StagePlan& s : partition.stages) {
    cost.stages.push_back(ppsched::StageCost{s.forward * ms_per_unit, s.backward_input * ms_per_unit,
                                             s.backward_weight * ms_per_unit, s.activation_bytes, s.output_bytes});
  }
  // One lowered program for both, so that they differ only in who ran it.
  const ppsched::Schedule lowered =
      ppsched::lower(schedule, ppsched::lower_options_for(cost, schedule.stages(), schedule.microbatches));

  Measurement m;
  m.name = schedule.name;
  m.chunks = chunks;
  m.predicted = ppsched::simulate(lowered, cost).timeline;

  ppsched::CpuCluster cluster(o.stages);
  std::vector<ppsched::CpuBackend*> backends;
  for (int r = 0; r < o.stages; ++r) backends.push_back(&cluster.rank(r));
  ppsched::World<ppsched::CpuBackend> world(
      backends, lowered,
      ppsched::synthetic_stages(cost, schedule.stages(), schedule.microbatches, std::chrono::milliseconds(1)));
  const std::vector<float> inputs(static_cast<std::size_t>(o.microbatches), 1.0f);
  const std::vector<float> targets(static_cast<std::size_t>(o.microbatches), 0.0f);
  const ppsched::Batch batch{inputs, targets};
  for (int i = 0; i < options.warmup; ++i) (void)world.run_step(batch);
  for (int i = 0; i < options.steps; ++i) m.steps.push_back(world.run_step(batch).timeline);

  std::vector<std::size_t> order(m.steps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<double> makespans;
  for (const ppsched::Timeline& t : m.steps) makespans.push_back(ppsched::summarize(t).makespan);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return makespans[a] < makespans[b]; });
  m.reported = order[order.size() / 2];
  m.comparison = ppsched::compare(m.steps[m.reported], m.predicted);
  return m;
}

std::string points(double pp) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%+.1f pp", pp);
  return buffer;
}

std::string render(const std::vector<Measurement>& results, const std::vector<cli::SkippedSchedule>& skipped,
                   const cli::BubblesOptions& options, const cli::PlanModel& model, double ms_per_unit) {
  using ppsched::detail::concat;
  std::string out = concat("ppsched-bubbles: ", model.description, "\n", options.model.stages, " ranks, ",
                           options.model.microbatches, " micro-batches, CPU backend (a thread per stream, timed waits), "
                           "1 ", model.unit, " = ", cli::detail::number_text(ms_per_unit), " ms; median of ",
                           options.steps, " steps after ", options.warmup, " warm-up\n");
  for (const Measurement& m : results) {
    const ppsched::TimelineComparison& c = m.comparison;
    out += concat("\n", m.name, " (v=", m.chunks, "): makespan ", cli::detail::number_text(c.measured.makespan),
                  " ms measured, ", cli::detail::number_text(c.predicted.makespan), " ms predicted");
    if (c.makespan_ratio) out += concat(" (x", cli::detail::number_text(*c.makespan_ratio), ")");
    out += '\n';
    cli::detail::TextTable table({"rank", "bubble measured", "predicted", "difference"}, {true, true, true, true});
    for (const ppsched::RankComparison& r : c.per_rank) {
      table.add({std::to_string(r.rank), cli::percent_of(r.measured_bubble), cli::percent_of(r.predicted_bubble), points(r.difference_pp)});
    }
    table.add({"all", cli::percent_of(c.measured.bubble_fraction), cli::percent_of(c.predicted.bubble_fraction),
               points(c.bubble_difference_pp)});
    out += table.str();
    if (c.matched != 0) {
      out += concat("actions started ", cli::detail::number_text(c.start.mean), " ms later than predicted on average (max ",
                    cli::detail::number_text(c.start.max_abs), " ms)\n");
    }
  }
  if (!skipped.empty()) out += '\n';
  for (const cli::SkippedSchedule& s : skipped) out += concat("skipped ", s.name, ": ", s.reason, '\n');
  return out;
}

ordered_json to_json(const std::vector<Measurement>& results, const std::vector<cli::SkippedSchedule>& skipped,
                     const cli::BubblesOptions& options, const cli::PlanModel& model, double ms_per_unit) {
  ordered_json schedules = ordered_json::array();
  for (const Measurement& m : results) {
    const ppsched::TimelineComparison& c = m.comparison;
    ordered_json ranks = ordered_json::array();
    for (const ppsched::RankComparison& r : c.per_rank) {
      ranks.push_back({{"rank", r.rank},
                       {"measured_bubble", r.measured_bubble},
                       {"predicted_bubble", r.predicted_bubble},
                       {"difference_pp", r.difference_pp}});
    }
    ordered_json steps = ordered_json::array();
    for (const ppsched::Timeline& t : m.steps) {
      const ppsched::TimelineStats s = ppsched::summarize(t);
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
  for (const cli::SkippedSchedule& s : skipped) skipped_json.push_back({{"name", s.name}, {"reason", s.reason}});
  return {{"tool", "ppsched-bubbles"},
          {"version", cli::version_text},
          {"backend", options.backend},
          {"model", {{"description", model.description}, {"unit", model.unit}, {"layers", model.layers}}},
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

int run(std::span<const char* const> argv) {
  cli::BubblesOptions options = cli::parse_bubbles_options(argv);
  if (options.help) {
    std::cout << usage();
    return 0;
  }
  if (options.version) {
    std::cout << "ppsched-bubbles " << cli::version_text << '\n';
    return 0;
  }
  if (options.backend == "cuda") {
    ppsched::fail({"flag --backend", "this ppsched-bubbles was built without CUDA", "",
                   "use --backend cpu, or build the CUDA variant of the tool on a machine with nvcc and NCCL"});
  }
  const cli::PlanModel model = cli::make_model(options.model);
  const double ms_per_unit = milliseconds_per_unit(options, model);
  cli::check_chunks_used(options.model);
  std::vector<std::string> families = options.model.schedules;
  const bool named = !families.empty();
  if (!named) {
    for (const std::string_view n : ppsched::family_names()) families.emplace_back(n);
  }
  std::vector<Measurement> results;
  std::vector<cli::SkippedSchedule> skipped;
  for (const std::string& family : families) {
    const ppsched::ScheduleRequest request{options.model.stages, options.model.microbatches,
                                          cli::chunks_for(family, options.model)};
    if (!named && !ppsched::accepts(family, request)) {  // "all": the families this request suits
      skipped.push_back({family, cli::rule_problem(family, request)});
      continue;
    }
    const ppsched::Schedule schedule = ppsched::make_schedule(family, request);
    std::optional<cli::PartitionPlan> partition;
    try {
      partition = model.partition(schedule.placement);
    } catch (const ppsched::error& e) {
      if (named) throw;
      skipped.push_back({family, ppsched::detail::concat("its ", schedule.stages(), " stages cannot be cut: ", e.what())});
      continue;
    }
    results.push_back(measure(schedule, request.chunks, *partition, options, ms_per_unit));
  }
  if (!options.trace_path.empty()) {
    const Measurement& m = results.front();
    ppsched::ChromeTraceOptions o;
    o.title = "ppsched-bubbles: " + m.name + " (measured)";
    cli::write_file_atomically(options.trace_path, ppsched::to_chrome_trace(m.steps[m.reported], o));
  }
  if (options.json) {
    std::cout << to_json(results, skipped, options, model, ms_per_unit).dump(2) << '\n';
  } else {
    std::cout << render(results, skipped, options, model, ms_per_unit);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::span<const char* const>(argv, static_cast<std::size_t>(argc)));
  } catch (const ppsched::error& e) {
    std::cerr << "ppsched-bubbles: error: " << e.what() << "\n(run ppsched-bubbles --help for the flags)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ppsched-bubbles: internal error: " << e.what() << '\n';
    return 1;
  }
}
