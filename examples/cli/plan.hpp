// The planner behind ppsched-plan: for each schedule family asked for, build the schedule,
// partition the model for its placement, lower it, prove it (validate), simulate it under
// the partition's costs, measure its memory against the cap, and pick the fastest schedule
// that fits. Everything here is a plain value so the text report and the JSON output are
// two views of one PlanResult, and the tests can check one against the other.
//
// Units. Times are in the model's unit (ms for the embedded default). Activation memory is
// counted in M_B: one micro-batch's activations of one rank's share of the model. A
// schedule with v chunks per rank stores 1/v of that per chunk, so each stored chunk
// activation counts 1/v M_B; this keeps interleaved and V-shaped schedules comparable with
// one-stage-per-rank ones (the zero-bubble paper's convention).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plan_options.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/csv.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/lower.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/schedule/validate.hpp"
#include "ppsched/sim/analytic.hpp"
#include "ppsched/sim/cost_model.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::cli {

// One (virtual) stage of a partition as the planner reports and simulates it. Times are
// already divided by the speed of the device the stage runs on.
struct StagePlan {
  std::int32_t rank = 0;
  std::size_t first_layer = 0;  // positions in the model's layer order, inclusive
  std::size_t last_layer = 0;
  std::string first_name;
  std::string last_name;
  double forward = 0.0;
  double backward_input = 0.0;
  double backward_weight = 0.0;
  double compute_time = 0.0;      // F + BI + BW of one micro-batch
  double comm_time = 0.0;         // sending this stage's output across its cut (0 for the last)
  double memory_bytes = 0.0;      // static: parameters with gradients and optimizer state
  double activation_bytes = 0.0;  // stored per micro-batch (one stored activation)
  double output_bytes = 0.0;      // crossing the cut after this stage, per micro-batch
};

struct PartitionPlan {
  std::string method;  // how it was cut, one phrase
  std::vector<StagePlan> stages;
  double bottleneck_time = 0.0;  // max over stages of compute_time + comm into and out of it
  std::size_t bottleneck_stage = 0;
};

// A model the planner can cut for any placement. `partition(placement)` returns one
// StagePlan per virtual stage, stage s on rank placement[s].
struct PlanModel {
  std::string description;  // one line for the report
  std::string unit;         // time unit of every cost
  std::size_t layers = 0;
  bool has_bytes = false;   // activation and parameter sizes are known
  Interconnect link{};
  std::vector<double> rank_memory_cap;  // per rank from the hardware; empty: none
  std::function<PartitionPlan(const std::vector<std::int32_t>& placement)> partition;
};

struct ScheduleResult {
  std::string name;
  std::int32_t chunks = 1;
  std::int32_t virtual_stages = 0;
  bool training = true;  // false for forward-only
  bool valid = false;
  std::vector<std::string> problems;
  double makespan = 0.0;
  double max_rank_span = 0.0;
  double bubble_fraction = 0.0;  // idle / (ranks x makespan)
  double ideal_time = 0.0;       // busy time of the busiest rank
  std::vector<double> busy;       // per rank
  std::vector<double> span;       // per rank
  std::vector<double> peak_activations;       // per rank, M_B
  std::vector<double> peak_activation_bytes;  // per rank
  std::vector<double> peak_memory_bytes;      // per rank: static + peak activations
  double throughput = 0.0;  // micro-batches per time unit
  std::optional<double> analytic_idle_per_rank;
  std::string analytic_formula;
  bool fits = true;
  std::string fit_problem;  // why it does not fit, when it does not
  Schedule schedule;        // compute-only, as generated (for --csv)
  Timeline timeline;        // simulated (for --trace, --svg)
};

struct SkippedSchedule {
  std::string name;
  std::string reason;
};

struct Recommendation {
  std::optional<std::size_t> index;  // into PlanResult::schedules
  std::string reason;                // one line
};

struct PlanResult {
  std::string model;
  std::string unit;
  std::int32_t ranks = 0;
  std::int32_t microbatches = 0;
  std::int32_t chunks = 0;
  PartitionPlan partition;  // one stage per rank
  std::vector<ScheduleResult> schedules;
  std::vector<SkippedSchedule> skipped;
  Recommendation recommended;
  std::optional<double> memory_cap_microbatches;
  std::optional<double> memory_cap_bytes;
  std::vector<double> rank_memory_cap;
};

// Percent with one decimal: "12.5%".
[[nodiscard]] inline std::string percent_of(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f%%", fraction * 100.0);
  return buffer;
}

// "1.5 GiB", "312 MiB", "12 KiB", "100 B".
[[nodiscard]] inline std::string bytes_text(double bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t u = 0;
  while (bytes >= 1024.0 && u + 1 < std::size(units)) {
    bytes /= 1024.0;
    ++u;
  }
  const double rounded = bytes >= 100.0 ? std::round(bytes) : std::round(bytes * 10.0) / 10.0;
  return ppsched::detail::concat(rounded, ' ', units[u]);
}

namespace detail {

// The simulator's costs for a partition. A transfer must take exactly the partition's cut
// time (which charges latency per tensor crossing the cut, skip connections included), so
// the simulator's link is set to move one "byte" per time unit with no latency and each
// stage's output is given as its cut time: latency + bytes / bandwidth is then that time.
// When no cut costs anything the link stays free, which the schedule search recognises.
[[nodiscard]] inline CostModel cost_model_of(const PartitionPlan& partition, const PlanModel& model, double w_ratio) {
  CostModel cost;
  cost.unit = model.unit;
  const bool free = std::all_of(partition.stages.begin(), partition.stages.end(),
                                [](const StagePlan& s) { return s.comm_time == 0.0; });
  cost.link = free ? Interconnect{} : Interconnect{0.0, 1.0};
  cost.weight_memory_fraction = w_ratio;
  cost.stages.reserve(partition.stages.size());
  for (const StagePlan& s : partition.stages) {
    cost.stages.push_back(StageCost{s.forward, s.backward_input, s.backward_weight, s.activation_bytes, s.comm_time});
  }
  return cost;
}

// Stages on each rank (its v), for a schedule whose placement is in range.
[[nodiscard]] inline std::vector<std::int32_t> chunks_per_rank(const Schedule& s) {
  std::vector<std::int32_t> per_rank(static_cast<std::size_t>(std::max(s.ranks, 0)), 0);
  for (const std::int32_t r : s.placement) {
    if (r >= 0 && r < s.ranks) ++per_rank[static_cast<std::size_t>(r)];
  }
  return per_rank;
}

// The M_B weight of one stored activation of each stage: 1 / (stages on its rank). Empty
// when the placement names a rank the schedule does not have (validate reports that).
[[nodiscard]] inline std::vector<double> chunk_weights(const Schedule& s) {
  if (s.ranks < 1) return {};
  std::vector<std::int32_t> per_rank(static_cast<std::size_t>(s.ranks), 0);
  for (const std::int32_t r : s.placement) {
    if (r < 0 || r >= s.ranks) return {};
    ++per_rank[static_cast<std::size_t>(r)];
  }
  std::vector<double> w;
  w.reserve(s.placement.size());
  for (const std::int32_t r : s.placement) w.push_back(1.0 / per_rank[static_cast<std::size_t>(r)]);
  return w;
}

// Numbers in one-line reasons: at most 3 decimals, no trailing zeros.
[[nodiscard]] inline std::string short_number(double x) {
  std::string s = ppsched::detail::concat(std::round(x * 1000.0) / 1000.0);
  return s;
}

[[nodiscard]] inline std::size_t argmax(const std::vector<double>& v) {
  return static_cast<std::size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Sets `fits` and `fit_problem` from the caps: M_B, bytes, and the devices' own memory.
inline void check_fit(ScheduleResult& r, const PlanResult& plan) {
  constexpr double slack = 1e-9;  // peaks are sums of halves; compare without rounding noise
  using ppsched::detail::concat;
  if (plan.memory_cap_microbatches) {
    const std::size_t worst = argmax(r.peak_activations);
    if (r.peak_activations[worst] > *plan.memory_cap_microbatches + slack) {
      r.fits = false;
      r.fit_problem = concat("needs ", short_number(r.peak_activations[worst]), " M_B on rank ", worst, " > cap ",
                             short_number(*plan.memory_cap_microbatches));
      return;
    }
  }
  if (plan.memory_cap_bytes) {
    const std::size_t worst = argmax(r.peak_memory_bytes);
    if (r.peak_memory_bytes[worst] > *plan.memory_cap_bytes * (1.0 + slack)) {
      r.fits = false;
      r.fit_problem = concat("needs ", bytes_text(r.peak_memory_bytes[worst]), " on rank ", worst, " > cap ",
                             bytes_text(*plan.memory_cap_bytes));
      return;
    }
  }
  for (std::size_t rank = 0; rank < plan.rank_memory_cap.size() && rank < r.peak_memory_bytes.size(); ++rank) {
    if (r.peak_memory_bytes[rank] > plan.rank_memory_cap[rank] * (1.0 + slack)) {
      r.fits = false;
      r.fit_problem = concat("needs ", bytes_text(r.peak_memory_bytes[rank]), " on rank ", rank, " > its device's ",
                             bytes_text(plan.rank_memory_cap[rank]));
      return;
    }
  }
}

}  // namespace detail

// Chunks per rank a family is built with: --chunks for the families that take any number,
// the family's own otherwise: 1, or 2 for the V-shaped ones (zb-v, dualpipev, ...). The
// family's own number is read from its rule (the fewest chunks it accepts on a request every
// family suits), so a family registered later needs no entry here.
[[nodiscard]] inline std::int32_t chunks_for(std::string_view family, const PlanOptions& options) {
  if (family == "interleaved-1f1b" || family == "looped-bfs") return options.chunks;
  for (std::int32_t chunks = 1; chunks <= 4; ++chunks) {
    if (accepts(family, ScheduleRequest{2, 8, chunks})) return chunks;
  }
  return 1;  // an unknown name: make_schedule names the valid ones
}

// Why `family` rejects `request`, in the family's own words (its rule and the nearest valid
// request), for listing a family that `all` had to leave out.
[[nodiscard]] inline std::string rule_problem(std::string_view family, const ScheduleRequest& request) {
  try {
    (void)make_schedule(family, request);
  } catch (const ppsched::error& e) {
    return e.what();
  }
  return ppsched::detail::concat("does not accept ", to_string(request));
}

// --chunks names a number for interleaved-1f1b and looped-bfs; given while neither is
// selected it would change nothing, which the user should hear about.
inline void check_chunks_used(const PlanOptions& options) {
  if (!options.chunks_given || options.schedules.empty()) return;
  for (const std::string& s : options.schedules) {
    if (s == "interleaved-1f1b" || s == "looped-bfs") return;
  }
  fail({"flag --chunks", "applies to interleaved-1f1b and looped-bfs, and neither is selected", "",
        "drop --chunks, or add one of them to --schedule (the V-shaped families always have 2 chunks, the others 1)"});
}

// Proves and simulates one schedule (compute-only or lowered, generated or read from a
// file) on the model, partitioned for its placement, and fills a result. A schedule with
// problems comes back with `valid` false and its problems listed, not simulated.
[[nodiscard]] inline ScheduleResult evaluate_schedule(Schedule schedule, const PlanModel& model,
                                                      const PartitionPlan& partition, const PlanResult& plan,
                                                      double w_ratio, std::int32_t chunks,
                                                      const std::vector<double>& static_bytes_per_rank) {
  ScheduleResult r;
  r.name = schedule.name;
  r.chunks = chunks;
  r.virtual_stages = schedule.stages();
  r.training = std::any_of(schedule.programs.begin(), schedule.programs.end(), [](const std::vector<Action>& p) {
    return std::any_of(p.begin(), p.end(), [](const Action& a) { return is_compute(a.op) && a.op != Op::F; });
  });
  const CostModel cost = detail::cost_model_of(partition, model, w_ratio);
  ValidateOptions check;
  check.memory.weight_fraction = w_ratio;
  check.memory.activation_bytes = detail::chunk_weights(schedule);
  ValidationReport report = validate(schedule, check);
  Schedule lowered;
  if (report.ok()) {
    lowered = is_lowered(schedule) ? schedule
                                   : lower(schedule, lower_options_for(cost, schedule.stages(), schedule.microbatches));
    report = validate(lowered, check);
  }
  r.valid = report.ok();
  for (const Problem& p : report.problems) r.problems.push_back(p.message);
  if (report.unlisted_problems != 0) {
    r.problems.push_back(ppsched::detail::concat("... and ", report.unlisted_problems, " more"));
  }
  r.schedule = std::move(schedule);
  if (!r.valid) {
    r.fits = false;
    r.fit_problem = "is not valid";
    return r;
  }
  SimResult sim = simulate(lowered, cost);
  r.makespan = sim.makespan;
  r.bubble_fraction = sim.bubble_fraction;
  r.ideal_time = sim.ideal_time;
  const std::size_t ranks = sim.ranks.size();
  for (std::size_t k = 0; k < ranks; ++k) {
    r.busy.push_back(sim.ranks[k].busy);
    r.span.push_back(sim.ranks[k].span);
    r.max_rank_span = std::max(r.max_rank_span, sim.ranks[k].span);
    r.peak_activations.push_back(report.memory[k].peak_bytes);  // the "bytes" were M_B weights
    r.peak_activation_bytes.push_back(sim.memory[k].peak_bytes);
    r.peak_memory_bytes.push_back(static_bytes_per_rank[k] + sim.memory[k].peak_bytes);
  }
  r.throughput = r.makespan > 0.0 ? r.schedule.microbatches / r.makespan : 0.0;
  r.timeline = std::move(sim.timeline);
  detail::check_fit(r, plan);
  return r;
}

namespace detail {

// Memory that does not depend on the schedule, per rank: each stage's parameters with their
// gradients and optimizer state.
[[nodiscard]] inline std::vector<double> static_bytes_per_rank(const PartitionPlan& partition, std::int32_t ranks) {
  std::vector<double> bytes(static_cast<std::size_t>(ranks), 0.0);
  for (const StagePlan& s : partition.stages) bytes[static_cast<std::size_t>(s.rank)] += s.memory_bytes;
  return bytes;
}

// Per-rank T_F, T_BI, T_BW for the closed forms (the sum over the rank's chunks), when every
// rank has the same; nothing otherwise, since the formulas assume identical ranks.
[[nodiscard]] inline std::optional<std::array<double, 3>> uniform_rank_costs(const PartitionPlan& partition,
                                                                             std::int32_t ranks) {
  std::vector<std::array<double, 3>> per_rank(static_cast<std::size_t>(ranks), std::array<double, 3>{});
  for (const StagePlan& s : partition.stages) {
    auto& t = per_rank[static_cast<std::size_t>(s.rank)];
    t[0] += s.forward;
    t[1] += s.backward_input;
    t[2] += s.backward_weight;
  }
  for (const auto& t : per_rank) {
    for (std::size_t k = 0; k < 3; ++k) {
      if (std::abs(t[k] - per_rank.front()[k]) > 1e-9 * std::max(1.0, std::abs(t[k]))) return std::nullopt;
    }
  }
  return per_rank.front();
}

inline void add_analytic(ScheduleResult& r, const PartitionPlan& partition, std::int32_t ranks, bool free_comm) {
  if (!free_comm) return;  // the closed forms leave communication out
  const auto t = uniform_rank_costs(partition, ranks);
  if (!t) return;
  static constexpr std::array<std::string_view, 6> with_formula{"gpipe", "1f1b", "interleaved-1f1b",
                                                                "zb-h1", "zb-h2", "forward-only"};
  if (std::find(with_formula.begin(), with_formula.end(), r.name) == with_formula.end()) return;
  const AnalyticBubble a = analytic_bubble(r.name, ranks, r.schedule.microbatches, r.chunks, (*t)[0], (*t)[1], (*t)[2]);
  if (!a.holds) return;
  // ZB-H2's form bounds the idle inside a rank's own span; the simulator shows it is rank
  // 0's (the later ranks idle less), so the label says whose it is.
  r.analytic_formula = a.formula + (a.measured_against == "span" ? " (idle within rank 0's span)" : "");
  r.analytic_idle_per_rank = a.idle_per_rank;
}

[[nodiscard]] inline Recommendation recommend(const PlanResult& plan) {
  using ppsched::detail::concat;
  Recommendation rec;
  std::optional<std::size_t> fastest;
  std::optional<std::size_t> best;
  std::size_t candidates = 0;
  // Makespans that differ only by rounding (sums of the same costs in another order) are
  // equal; then the schedule that stores less wins, then the one listed first.
  const auto better = [&](std::size_t a, std::size_t b) {
    const ScheduleResult& x = plan.schedules[a];
    const ScheduleResult& y = plan.schedules[b];
    if (std::abs(x.makespan - y.makespan) > 1e-9 * std::max(x.makespan, y.makespan)) return x.makespan < y.makespan;
    return *std::max_element(x.peak_activations.begin(), x.peak_activations.end()) <
           *std::max_element(y.peak_activations.begin(), y.peak_activations.end()) - 1e-9;
  };
  for (std::size_t i = 0; i < plan.schedules.size(); ++i) {
    const ScheduleResult& r = plan.schedules[i];
    if (!r.training || !r.valid) continue;
    ++candidates;
    if (!fastest || better(i, *fastest)) fastest = i;
    if (r.fits && (!best || better(i, *best))) best = i;
  }
  if (candidates == 0) {
    rec.reason = "no valid training schedule was evaluated (forward-only runs inference only)";
    return rec;
  }
  if (!best) {
    const ScheduleResult& f = plan.schedules[*fastest];
    rec.reason = concat("no schedule fits the memory cap; the fastest, ", f.name, ", ", f.fit_problem);
    return rec;
  }
  rec.index = best;
  const ScheduleResult& b = plan.schedules[*best];
  const ScheduleResult& f = plan.schedules[*fastest];
  if (better(*fastest, *best)) {
    rec.reason = concat(f.name, " is ", percent_of((b.makespan - f.makespan) / b.makespan), " faster but ", f.fit_problem);
    return rec;
  }
  // The best is the fastest of all: name the runner-up so the margin is visible.
  std::optional<std::size_t> second;
  for (std::size_t i = 0; i < plan.schedules.size(); ++i) {
    const ScheduleResult& r = plan.schedules[i];
    if (i == *best || !r.training || !r.valid) continue;
    if (!second || better(i, *second)) second = i;
  }
  const bool capped = plan.memory_cap_microbatches || plan.memory_cap_bytes || !plan.rank_memory_cap.empty();
  rec.reason = concat("fastest of the ", candidates, " training schedules", capped ? ", and it fits the memory cap" : "");
  if (second) {
    const ScheduleResult& s = plan.schedules[*second];
    rec.reason += concat("; next is ", s.name, ", ", percent_of((s.makespan - b.makespan) / s.makespan), " slower");
  }
  return rec;
}

}  // namespace detail

// Evaluates the schedules `options` asks for on `model` and recommends one.
[[nodiscard]] inline PlanResult make_plan(const PlanOptions& options, const PlanModel& model) {
  PlanResult plan;
  plan.model = model.description;
  plan.unit = model.unit;
  plan.ranks = options.stages;
  plan.microbatches = options.microbatches;
  plan.chunks = options.chunks;
  plan.memory_cap_microbatches = options.memory_cap_microbatches;
  plan.memory_cap_bytes = options.memory_cap_bytes;
  plan.rank_memory_cap = model.rank_memory_cap;

  std::map<std::vector<std::int32_t>, PartitionPlan> partitions;
  const auto partition_for = [&](const std::vector<std::int32_t>& placement) -> const PartitionPlan& {
    auto it = partitions.find(placement);
    if (it == partitions.end()) it = partitions.emplace(placement, model.partition(placement)).first;
    return it->second;
  };
  plan.partition = partition_for(one_stage_per_rank_placement(options.stages));

  check_chunks_used(options);
  const bool named = !options.schedules.empty();
  std::vector<std::string> families = options.schedules;
  if (!named) {
    for (const std::string_view name : family_names()) families.emplace_back(name);
  }
  const bool free_comm = model.link.latency == 0.0 && model.link.bandwidth == std::numeric_limits<double>::infinity();
  for (const std::string& family : families) {
    const ScheduleRequest request{options.stages, options.microbatches, chunks_for(family, options)};
    if (!named && !accepts(family, request)) {
      plan.skipped.push_back({family, rule_problem(family, request)});
      continue;
    }
    Schedule schedule = make_schedule(family, request);  // a named family's rule speaks for itself
    const PartitionPlan* partition = nullptr;
    try {
      partition = &partition_for(schedule.placement);
    } catch (const ppsched::error& e) {
      // Chunks multiply the stages to cut; say so, and let `all` go on without the family.
      const std::string reason = ppsched::detail::concat(
          "its ", schedule.stages(), " stages (", options.stages, " ranks x ", request.chunks,
          " chunks) cannot be cut from this model: ", e.what());
      if (!named) {
        plan.skipped.push_back({family, reason});
        continue;
      }
      fail({ppsched::detail::concat("schedule '", family, "'"), reason, "",
            request.chunks > 1 ? "use fewer --chunks or --stages, or a model with more layers" : "use fewer --stages"});
    }
    const std::vector<double> static_bytes = detail::static_bytes_per_rank(*partition, options.stages);
    ScheduleResult result = evaluate_schedule(std::move(schedule), model, *partition, plan, options.w_memory_ratio,
                                              request.chunks, static_bytes);
    detail::add_analytic(result, *partition, options.stages, free_comm);
    plan.schedules.push_back(std::move(result));
  }
  plan.recommended = detail::recommend(plan);
  return plan;
}

// What --validate reports: the file's schedule, proven and simulated on the model.
struct FileCheck {
  std::string path;
  PlanResult context;  // ranks, micro-batches, caps and the partition for the file's placement
  ScheduleResult result;
};

// Reads a PyTorch-format schedule CSV, validates it and, when it is valid, simulates it on
// `model` cut for the file's placement. Throws ppsched::error when the file cannot be read
// or parsed, or contradicts --stages / --microbatches; problems in the schedule itself are
// results (FileCheck::result.problems), not errors.
[[nodiscard]] inline FileCheck check_schedule_file(const PlanOptions& options, const PlanModel& model) {
  using ppsched::detail::concat;
  FileCheck check;
  check.path = options.validate_path;
  CsvReadOptions read;
  read.source = options.validate_path;
  read.name = std::filesystem::path(options.validate_path).filename().string();
  if (options.microbatches_given) read.microbatches = options.microbatches;
  if (!std::filesystem::is_regular_file(options.validate_path)) {
    fail({concat("schedule CSV '", options.validate_path, "'"), "cannot be read: no such file", "",
          "give the path of a CSV written by ppsched-plan --csv or PyTorch's _dump_csv"});
  }
  Schedule schedule = load_pytorch_csv(options.validate_path, read);
  if (options.stages_given && schedule.ranks != options.stages) {
    fail({concat("schedule CSV '", options.validate_path, "'"),
          concat("has ", schedule.ranks, " ranks (rows) but --stages is ", options.stages), "",
          "drop --stages (the file sets it) or give the file's rank count"});
  }
  PlanResult& plan = check.context;
  plan.model = model.description;
  plan.unit = model.unit;
  plan.ranks = schedule.ranks;
  plan.microbatches = schedule.microbatches;
  plan.memory_cap_microbatches = options.memory_cap_microbatches;
  plan.memory_cap_bytes = options.memory_cap_bytes;
  plan.rank_memory_cap = model.rank_memory_cap;
  // Problems found without costs are reported before the model is cut for a placement
  // that may not make sense.
  ValidateOptions shape_only;
  shape_only.check_deadlock = false;
  if (const ValidationReport first = validate(schedule, shape_only); !first.ok()) {
    check.result.name = schedule.name;
    check.result.virtual_stages = schedule.stages();
    for (const Problem& p : first.problems) check.result.problems.push_back(p.message);
    if (first.unlisted_problems != 0) check.result.problems.push_back(concat("... and ", first.unlisted_problems, " more"));
    check.result.fits = false;
    check.result.fit_problem = "is not valid";
    check.result.schedule = std::move(schedule);
    return check;
  }
  plan.partition = model.partition(schedule.placement);
  std::int32_t chunks = 1;
  for (const std::int32_t v : detail::chunks_per_rank(schedule)) chunks = std::max(chunks, v);
  plan.chunks = chunks;
  const std::vector<double> static_bytes = detail::static_bytes_per_rank(plan.partition, schedule.ranks);
  check.result = evaluate_schedule(std::move(schedule), model, plan.partition, plan, options.w_memory_ratio, chunks,
                                   static_bytes);
  return check;
}

}  // namespace ppsched::cli
