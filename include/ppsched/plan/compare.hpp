// Comparing schedule families on a model and recommending one: for every family asked for,
// build its schedule, cut the model for its placement (PlanModel), lower it with the cut's
// costs, prove it (validate: dependencies, deadlock freedom under rendezvous, memory), simulate
// it, count its memory per rank against the caps, and pick the fastest that fits. Every step is
// also a function of its own (evaluate_schedule, recommend) for a caller with its own schedule.
//
// Units. Times are in the model's unit. Activation memory is counted in M_B: one micro-batch's
// activations of one rank's share of the model; a schedule with v chunks per rank stores 1/v of
// that per chunk (chunk_weights), so interleaved and V-shaped schedules compare directly with
// one-stage-per-rank ones (the zero-bubble paper's convention). Bytes are bytes: per rank, the
// static bytes (parameters with optimizer state) plus the simulated peak of stored activations.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/memory_choice.hpp"
#include "ppsched/plan/memory_policy.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/sim/analytic.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Per-rank memory caps a schedule must keep to; absent: no cap. A PlanModel's device caps
// (PlanModel::rank_memory_cap) apply besides these.
struct MemoryCaps {
  std::optional<double> microbatches;  // peak stored activations, in M_B
  std::optional<double> total_bytes;   // static bytes plus peak activation bytes

  friend bool operator==(const MemoryCaps&, const MemoryCaps&) = default;
};

// What compare_families does about activation memory (plan/memory_policy.hpp, issue 23).
enum class MemoryPolicyMode : std::uint8_t {
  none,       // plain schedules only
  automatic,  // a family that does not fit the byte caps is priced again with the policies
              // choose_memory_policies picks for it under the smallest of those caps
  given,      // every family runs PlanMemoryPolicy::stages
};

struct PlanMemoryPolicy {
  MemoryPolicyMode mode = MemoryPolicyMode::none;
  // given: stage index (a virtual stage of the family's schedule) -> its policy; a stage not
  // named keeps none. A layer-wise policy without its bytes (MemoryPolicy{kind}, kind
  // layerwise_recompute or layerwise_offload) is priced from the model's layers on each
  // family's cut (layerwise_recompute_policy).
  std::map<std::int32_t, MemoryPolicy> stages;
  // Between each device and its host, in the model's unit. Empty: PCIe 4 x16 (10 us, 25 GB/s),
  // which needs a model unit seconds_per_unit knows.
  std::optional<Interconnect> host_link;
  MemoryChoiceOptions choice{};  // automatic: the ladder and the placement
  // automatic, in search_plan: at most this many of the search's candidates over the byte cap
  // are priced with policies, best bound first (each is one choose_memory_policies, about 0.1
  // to 0.2 s on the default model); the bound usually stops it sooner (after 23 to 30 there).
  std::int32_t search_candidates = 64;
};

// What to plan: the pipeline's size, the families to compare and the caps.
struct PlanRequest {
  std::int32_t ranks = 8;
  std::int32_t microbatches = 32;
  // Chunks per rank for the families that take any number (FamilyInfo::chunks == 0:
  // interleaved-1f1b, looped-bfs); every other family has its own (FamilyInfo::chunks_for).
  std::int32_t chunks = 2;
  // Family names (any spelling family_info accepts). Empty: every family, leaving out (in
  // PlanResult::skipped) those whose rule the request breaks; a family named here whose rule
  // the request breaks is an error instead.
  std::vector<std::string> families;
  double weight_memory_fraction = 0.5;  // M_W / M_B: what a BI keeps alive until its BW
  MemoryCaps cap;
  // What the recommendation minimises among the schedules that fit (plan/objective.hpp):
  // the makespan by default.
  Objective objective;
  // Recomputation and offload: none by default.
  PlanMemoryPolicy memory_policy;
};

// What one stage's memory policy does in a priced schedule, and what it costs.
struct StageMemoryCost {
  MemoryPolicy policy;
  // Of the step's micro-batches, how many it applies to: the stage's R, or OFFLOAD, actions
  // (an offload whose copies could not hide keeps the activation instead).
  std::int32_t microbatches = 0;
  // Per such micro-batch: activation bytes not held from F to B (on average over them where
  // some keep what others offload: layer-wise checkpoints whose copies could not hide).
  double saved_bytes = 0.0;
  double recompute_time = 0.0;  // per step: the stage's R actions, on its compute stream
  double copy_time = 0.0;       // per step: its OFFLOAD and RELOAD, on the copy lane beside compute

  friend bool operator==(const StageMemoryCost&, const StageMemoryCost&) = default;
};

// A schedule priced with memory policies, beside the same schedule without them.
struct MemoryPolicyUse {
  bool chosen = false;  // by the planner (MemoryPolicyMode::automatic), not given
  std::vector<StageMemoryCost> stages;  // one per stage of the schedule
  double plain_makespan = 0.0;
  double plain_peak_bytes = 0.0;  // the fullest rank's, static + activations
  std::string plain_fit_problem;  // why the plain schedule did not fit; empty when it did
  // The cut the policies were priced on when the planner cut the model again under the cap
  // (no policy fit the family's own cut); empty: the family's cut.
  std::optional<PartitionPlan> partition;

  friend bool operator==(const MemoryPolicyUse&, const MemoryPolicyUse&) = default;
};

// One schedule, proven, simulated and measured against the caps.
struct ScheduleResult {
  std::string name;
  // The family's record when the schedule is a family's (compare_families fills it); nullptr
  // for a schedule of any other origin given to evaluate_schedule.
  const FamilyInfo* family = nullptr;
  std::int32_t chunks = 1;  // most stages on one rank
  std::int32_t virtual_stages = 0;
  bool training = true;  // false when it has forwards only
  bool valid = false;
  std::vector<std::string> problems;  // validate()'s, when not valid
  double makespan = 0.0;
  double max_rank_span = 0.0;
  double bubble_fraction = 0.0;  // idle / (ranks x makespan)
  double ideal_time = 0.0;       // busy time of the busiest rank
  std::vector<double> busy;      // per rank
  std::vector<double> span;      // per rank
  std::vector<double> peak_activations;       // per rank, M_B
  std::vector<double> static_bytes;           // per rank: parameters with optimizer state
  std::vector<double> peak_activation_bytes;  // per rank, as a cap judges it (capped_activation_bytes)
  std::vector<double> peak_memory_bytes;      // per rank: static + peak activations
  double throughput = 0.0;  // micro-batches per time unit
  // The family's closed form (sim/analytic.hpp), where it has one and it holds: uniform ranks
  // and free communication (compare_families fills it).
  std::optional<double> analytic_idle_per_rank;
  std::string analytic_formula;
  bool fits = true;
  std::string fit_problem;  // why it does not fit, when it does not
  Schedule schedule;        // as given (compute-only when generated, with memory actions under `memory`)
  Timeline timeline;        // simulated
  // Set when the schedule was priced with memory policies (PlanRequest::memory_policy).
  std::optional<MemoryPolicyUse> memory;

  friend bool operator==(const ScheduleResult&, const ScheduleResult&) = default;
};

// A family `PlanRequest::families` left empty would have compared, left out and why.
struct SkippedSchedule {
  std::string name;
  std::string reason;
  // True when the model cannot be cut into the family's stages (the family accepts the
  // request; the model has too few layers for its ranks x chunks).
  bool cannot_cut = false;
  std::int32_t chunks = 1;
  const FamilyInfo* family = nullptr;  // the family's record (family_schedules fills it)

  friend bool operator==(const SkippedSchedule&, const SkippedSchedule&) = default;
};

struct Recommendation {
  std::optional<std::size_t> index;  // into PlanResult::schedules; none when nothing fits
  std::string reason;                // one line

  friend bool operator==(const Recommendation&, const Recommendation&) = default;
};

struct PlanResult {
  std::string model;  // PlanModel::description
  std::string unit;
  std::int32_t ranks = 0;
  std::int32_t microbatches = 0;
  std::int32_t chunks = 0;
  PartitionPlan partition;  // the one-stage-per-rank cut
  std::vector<ScheduleResult> schedules;
  std::vector<SkippedSchedule> skipped;
  Recommendation recommended;
  MemoryCaps cap;
  std::vector<double> rank_memory_cap;  // the model's devices'

  // The recommended schedule, or nullptr.
  [[nodiscard]] const ScheduleResult* recommended_schedule() const noexcept {
    return recommended.index ? &schedules[*recommended.index] : nullptr;
  }

  friend bool operator==(const PlanResult&, const PlanResult&) = default;
};

// Percent with one decimal: "12.5%".
[[nodiscard]] inline std::string percent_of(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f%%", fraction * 100.0);
  return buffer;
}

// One line: "zb-v v=2: makespan 27.5, bubble 9.1%, peak 4 M_B, 1.2 KiB, fits" (the largest
// peak over the ranks), or why it is invalid or does not fit.
[[nodiscard]] inline std::string to_string(const ScheduleResult& r) {
  using detail::concat;
  std::string out = concat(r.name, " v=", r.chunks, r.training ? "" : " (inference)", ": ");
  if (!r.valid) return out + concat("invalid, ", r.problems.size(), r.problems.size() == 1 ? " problem" : " problems");
  const auto max_of = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
  out += concat("makespan ", r.makespan, ", bubble ", percent_of(r.bubble_fraction), ", peak ",
                max_of(r.peak_activations), " M_B, ", bytes_text(max_of(r.peak_memory_bytes)), ", ");
  return out + (r.fits ? std::string("fits") : "does not fit: " + r.fit_problem);
}

// The model and size, one line per schedule, the skipped families and the recommendation.
[[nodiscard]] inline std::string to_string(const PlanResult& p) {
  using detail::concat;
  std::string out = concat(p.model, ": ", p.ranks, " ranks, ", p.microbatches, " micro-batches, times in ", p.unit, "\n");
  for (const ScheduleResult& r : p.schedules) out += concat("  ", to_string(r), "\n");
  for (const SkippedSchedule& s : p.skipped) out += concat("  skipped ", s.name, ": ", s.reason, "\n");
  if (const ScheduleResult* best = p.recommended_schedule()) {
    out += concat("recommended: ", best->name, " (", p.recommended.reason, ")\n");
  } else {
    out += concat("recommended: none (", p.recommended.reason, ")\n");
  }
  return out;
}

inline std::ostream& operator<<(std::ostream& os, const ScheduleResult& r) { return os << to_string(r); }
inline std::ostream& operator<<(std::ostream& os, const PlanResult& p) { return os << to_string(p); }

namespace detail {

[[nodiscard]] inline std::size_t argmax(const std::vector<double>& v) {
  return static_cast<std::size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

inline void check_plan_request(const PlanRequest& r) {
  const std::string subject = "plan request";
  if (r.ranks < 1 || r.microbatches < 1 || r.chunks < 1) {
    fail({subject, concat("ranks = ", r.ranks, ", microbatches = ", r.microbatches, ", chunks = ", r.chunks),
          "PlanRequest", "ranks, microbatches and chunks are at least 1"});
  }
  if (!(r.weight_memory_fraction >= 0.0 && r.weight_memory_fraction <= std::numeric_limits<double>::max())) {
    fail({subject, concat("weight_memory_fraction is ", r.weight_memory_fraction), "PlanRequest::weight_memory_fraction",
          detail::weight_memory_fraction_hint});
  }
  for (const auto& [cap, field] : {std::pair{r.cap.microbatches, "PlanRequest::cap.microbatches"},
                                   std::pair{r.cap.total_bytes, "PlanRequest::cap.total_bytes"}}) {
    if (cap && !(*cap > 0.0 && *cap <= std::numeric_limits<double>::max())) {
      fail({subject, concat("a memory cap of ", *cap), field, "give a finite cap > 0, or leave it empty for none"});
    }
  }
  check_objective(r.objective, "PlanRequest::objective");
}

// What compare_families and search_plan both start with: the request checked, the model
// able to cut, and the result's header copied from them.
[[nodiscard]] inline PlanResult start_plan(const char* who, const PlanModel& model, const PlanRequest& request) {
  check_plan_request(request);
  if (!model.partition) {
    fail({who, "the model has no partition function", "PlanModel::partition",
          "use per_rank_cost_model or graph_model, or set PlanModel::partition"});
  }
  // The model was cut for one size (graph_model's options): planning another would cut a
  // placement the devices' caps were not given for, so the two must agree.
  for (const auto& [asked, built, field] : {std::tuple{request.ranks, model.ranks, "ranks"},
                                            std::tuple{request.microbatches, model.microbatches, "microbatches"}}) {
    if (built != 0 && asked != built) {
      fail({who, concat("PlanRequest::", field, " is ", asked, " but the model was built with GraphModelOptions::", field,
                        " = ", built, " (PlanModel::", field, ")"),
            concat("PlanRequest::", field), concat("give the model's ", built, ", or build the model with ", asked)});
    }
  }
  PlanResult plan;
  plan.model = model.description;
  plan.unit = model.unit;
  plan.ranks = request.ranks;
  plan.microbatches = request.microbatches;
  plan.chunks = request.chunks;
  plan.cap = request.cap;
  plan.rank_memory_cap = model.rank_memory_cap;
  return plan;
}

// Each cut is made once per plan: the families (or the search's candidates) that share a
// placement and in-flight counts share its partition.
class PartitionCache {
 public:
  explicit PartitionCache(const PlanModel& model) : model_(&model) {}
  [[nodiscard]] const PartitionPlan& operator()(const CutRequest& cut) {
    Key key{{cut.placement.begin(), cut.placement.end()}, {cut.in_flight.begin(), cut.in_flight.end()}};
    auto it = cut_.find(key);
    if (it == cut_.end()) it = cut_.emplace(key, model_->partition({key.first, key.second})).first;
    return it->second;
  }

 private:
  using Key = std::pair<std::vector<std::int32_t>, std::vector<double>>;
  const PlanModel* model_;
  std::map<Key, PartitionPlan> cut_;
};

// Sets `fits` and `fit_problem` from the caps: M_B, bytes, and the devices' own memory.
inline void check_fit(ScheduleResult& r, const MemoryCaps& cap, const std::vector<double>& rank_memory_cap) {
  constexpr double slack = 1e-9;  // peaks are sums of halves; compare without rounding noise
  if (cap.microbatches) {
    const std::size_t worst = argmax(r.peak_activations);
    if (r.peak_activations[worst] > *cap.microbatches + slack) {
      r.fits = false;
      r.fit_problem = concat("needs ", short_number(r.peak_activations[worst]), " M_B on rank ", worst, " > cap ",
                             short_number(*cap.microbatches));
      return;
    }
  }
  if (cap.total_bytes) {
    const std::size_t worst = argmax(r.peak_memory_bytes);
    if (r.peak_memory_bytes[worst] > *cap.total_bytes * (1.0 + slack)) {
      r.fits = false;
      r.fit_problem = concat("needs ", bytes_text(r.peak_memory_bytes[worst]), " on rank ", worst, " > cap ",
                             bytes_text(*cap.total_bytes));
      return;
    }
  }
  for (std::size_t rank = 0; rank < rank_memory_cap.size() && rank < r.peak_memory_bytes.size(); ++rank) {
    if (r.peak_memory_bytes[rank] > rank_memory_cap[rank] * (1.0 + slack)) {
      r.fits = false;
      r.fit_problem = concat("needs ", bytes_text(r.peak_memory_bytes[rank]), " on rank ", rank, " > its device's ",
                             bytes_text(rank_memory_cap[rank]));
      return;
    }
  }
}

// Per-rank T_F, T_BI, T_BW for the closed forms (the sum over the rank's chunks), when every
// rank has the same; nothing otherwise, since the formulas assume identical ranks.
[[nodiscard]] inline std::optional<std::array<double, 3>> uniform_rank_costs(const PartitionPlan& partition,
                                                                             std::int32_t ranks) {
  std::vector<std::array<double, 3>> per_rank(static_cast<std::size_t>(ranks), std::array<double, 3>{});
  for (const PartitionStage& s : partition.stages) {
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

inline void add_analytic(ScheduleResult& r, const FamilyInfo& family, const PartitionPlan& partition,
                         std::int32_t ranks) {
  if (family.bubble == nullptr) return;
  const auto t = uniform_rank_costs(partition, ranks);
  if (!t) return;
  const AnalyticBubble a = analytic_bubble(family.name, ranks, r.schedule.microbatches, r.chunks, (*t)[0], (*t)[1], (*t)[2]);
  if (!a.holds) return;
  // ZB-H2's form bounds the idle inside a rank's own span; the simulator shows it is rank
  // 0's (the later ranks idle less), so the label says whose it is.
  r.analytic_formula = a.formula + (a.measured_against == "span" ? " (idle within rank 0's span)" : "");
  r.analytic_idle_per_rank = a.idle_per_rank;
}

}  // namespace detail

namespace detail {

// evaluate_schedule with the costs given: the cut's, or the cut's with memory policies.
[[nodiscard]] inline ScheduleResult evaluate_priced(Schedule schedule, const PlanModel& model,
                                                    const PartitionPlan& partition, const PlanRequest& request,
                                                    Workspace& ws, const CostModel& cost)
{
  if (partition.stages.size() != static_cast<std::size_t>(std::max(schedule.stages(), 0))) {
    fail({"evaluate_schedule", concat("the partition has ", partition.stages.size(), " stages for schedule '",
                                      schedule.name, "' of ", schedule.stages()),
          "", "cut the model for the schedule's placement: model.partition(schedule.placement)"});
  }
  ScheduleResult r;
  r.name = schedule.name;
  for (const std::int32_t v : chunks_per_rank(schedule)) r.chunks = std::max(r.chunks, v);
  r.virtual_stages = schedule.stages();
  r.training = std::any_of(schedule.programs.begin(), schedule.programs.end(), [](const std::vector<Action>& p) {
    return std::any_of(p.begin(), p.end(), [](const Action& a) { return is_compute(a.op) && a.op != Op::F; });
  });
  // The report's peaks in M_B (RankMemory::peak_microbatches) are what the caps compare; its
  // bytes stay unset here: simulate() counts them with the per-micro-batch scale.
  ValidateOptions check;
  check.memory.weight_fraction = request.weight_memory_fraction;
  {  // the shares R restores and OFFLOAD moves, where the costs carry memory policies
    MemoryModel shares = memory_model_for(cost, schedule.stages());
    check.memory.recompute_fraction = std::move(shares.recompute_fraction);
    check.memory.offload_fraction = std::move(shares.offload_fraction);
    check.memory.recompute_peak_fraction = std::move(shares.recompute_peak_fraction);
    check.memory.stage_weight_fraction = std::move(shares.stage_weight_fraction);
  }
  // A compute-only schedule is checked, then lowered; the lowering's proof then stands for
  // the static checks of the lowered one (validate and simulate take it), so each check runs once.
  ValidationReport report = validate(schedule, check, ws);
  std::optional<LoweredSchedule> lowered;
  if (report.ok() && !is_lowered(schedule)) {
    lowered.emplace(lower(schedule, lower_options_for(cost, schedule.stages(), schedule.microbatches), ws));
    report = validate(*lowered, check, ws);
  }
  r.valid = report.ok();
  for (const Problem& p : report.problems) r.problems.push_back(p.message);
  if (report.unlisted_problems != 0) r.problems.push_back(concat("... and ", report.unlisted_problems, " more"));
  r.schedule = std::move(schedule);
  if (!r.valid) {
    r.fits = false;
    r.fit_problem = "is not valid";
    return r;
  }
  r.static_bytes = static_bytes_per_rank(partition, r.schedule.ranks);
  SimResult sim = lowered ? simulate(*lowered, cost, {}, ws) : simulate(r.schedule, cost, {}, ws);
  const bool copies = has_copies(r.schedule);  // then the memory over time counts too
  r.makespan = sim.makespan;
  r.bubble_fraction = sim.bubble_fraction;
  r.ideal_time = sim.ideal_time;
  for (std::size_t k = 0; k < sim.ranks.size(); ++k) {
    r.busy.push_back(sim.ranks[k].busy);
    r.span.push_back(sim.ranks[k].span);
    r.max_rank_span = std::max(r.max_rank_span, sim.ranks[k].span);
    r.peak_activations.push_back(report.memory[k].peak_microbatches);
    r.peak_activation_bytes.push_back(capped_activation_bytes(sim, k, copies));
    r.peak_memory_bytes.push_back(r.static_bytes[k] + r.peak_activation_bytes.back());
  }
  r.throughput = r.makespan > 0.0 ? r.schedule.microbatches / r.makespan : 0.0;
  r.timeline = std::move(sim.timeline);
  check_fit(r, request.cap, model.rank_memory_cap);
  return r;
}

}  // namespace detail

// Proves and simulates one schedule (compute-only or lowered, generated or read from a file)
// on `partition` (the model cut for the schedule's placement), and measures it against the
// request's caps and the model's device caps. A schedule with problems comes back with `valid`
// false and its problems listed, not simulated. Throws ppsched::error when the partition does
// not have one stage per stage of the schedule. `ws` lends the checks, the lowering and the
// simulation their arrays (engine/workspace.hpp): keep one across many schedules.
[[nodiscard]] PPSCHED_OUTLINE ScheduleResult evaluate_schedule(Schedule schedule, const PlanModel& model,
                                                      const PartitionPlan& partition, const PlanRequest& request,
                                                      Workspace& ws)
#if PPSCHED_OUTLINE_BODY
{
  return detail::evaluate_priced(std::move(schedule), model, partition, request, ws,
                                 cost_model_of(partition, plan_cost_options(model, request.weight_memory_fraction)));
}
#else
;
#endif
[[nodiscard]] PPSCHED_OUTLINE ScheduleResult evaluate_schedule(Schedule schedule, const PlanModel& model,
                                                      const PartitionPlan& partition, const PlanRequest& request)
#if PPSCHED_OUTLINE_BODY
{
  Workspace ws;
  return evaluate_schedule(std::move(schedule), model, partition, request, ws);
}
#else
;
#endif

namespace detail {

[[nodiscard]] inline double largest_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

// recommend() for the span and memory objectives: the same candidates (valid training
// schedules that fit), ranked by the longest rank span, or by the largest per-rank peak of
// stored activations among those within the makespan bound; ties go to the faster, then (span)
// to the one storing less, then to the one listed first.
[[nodiscard]] inline Recommendation recommend_by(std::span<const ScheduleResult> schedules, bool capped,
                                                 const Objective& objective) {
  Recommendation rec;
  const bool by_span = objective.kind == ObjectiveKind::span;
  const double bound = objective.makespan_bound;
  const auto close = [](double x, double y) { return std::abs(x - y) <= 1e-9 * std::max({1.0, std::abs(x), std::abs(y)}); };
  const auto score = [&](const ScheduleResult& r) { return by_span ? r.max_rank_span : largest_of(r.peak_activations); };
  const auto better = [&](std::size_t a, std::size_t b) {
    const ScheduleResult& x = schedules[a];
    const ScheduleResult& y = schedules[b];
    if (!close(score(x), score(y))) return score(x) < score(y);
    if (!close(x.makespan, y.makespan)) return x.makespan < y.makespan;
    return by_span && largest_of(x.peak_activations) < largest_of(y.peak_activations) - 1e-9;
  };
  const auto in_time = [&](const ScheduleResult& r) { return by_span || r.makespan <= bound * (1.0 + 1e-9); };
  std::optional<std::size_t> best, best_any, fastest;  // best_any: in time, fitting or not
  std::size_t candidates = 0, within = 0;
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const ScheduleResult& r = schedules[i];
    if (!r.training || !r.valid) continue;
    ++candidates;
    if (!fastest || r.makespan < schedules[*fastest].makespan) fastest = i;
    if (!in_time(r)) continue;
    ++within;
    if (!best_any || better(i, *best_any)) best_any = i;
    if (r.fits && (!best || better(i, *best))) best = i;
  }
  if (candidates == 0) {
    rec.reason = "no valid training schedule was evaluated (forward-only runs inference only)";
    return rec;
  }
  const std::string time_limit = std::isinf(bound) ? "" : concat(" within the makespan bound ", short_number(bound));
  if (within == 0) {
    const ScheduleResult& f = schedules[*fastest];
    rec.reason = concat("no schedule finishes", time_limit, "; the fastest, ", f.name, ", takes ", short_number(f.makespan));
    return rec;
  }
  const std::string measure = by_span ? "the shortest longest rank span" : "the least peak activation memory";
  if (!best) {
    const ScheduleResult& a = schedules[*best_any];
    rec.reason = concat("no schedule", time_limit, " fits the memory cap; the one with ", measure, ", ", a.name, ", ",
                        a.fit_problem);
    return rec;
  }
  rec.index = best;
  const ScheduleResult& b = schedules[*best];
  const auto figures = [&](const ScheduleResult& r) {
    return by_span ? concat("span ", short_number(r.max_rank_span), ", makespan ", short_number(r.makespan))
                   : concat(short_number(largest_of(r.peak_activations)), " M_B, makespan ", short_number(r.makespan));
  };
  if (better(*best_any, *best)) {
    const ScheduleResult& a = schedules[*best_any];
    rec.reason = concat(a.name, " has ", by_span ? "a shorter longest rank span" : "less memory", " (", figures(a),
                        ") but ", a.fit_problem);
    return rec;
  }
  rec.reason = concat(measure, " of the ", by_span ? candidates : within, " training schedules", time_limit,
                      capped ? " that fit the memory cap" : "", ": ", figures(b));
  std::optional<std::size_t> second;
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const ScheduleResult& r = schedules[i];
    if (i == *best || !r.training || !r.valid || !in_time(r)) continue;
    if (!second || better(i, *second)) second = i;
  }
  if (second) rec.reason += concat("; next is ", schedules[*second].name, ", ", figures(schedules[*second]));
  return rec;
}

}  // namespace detail

// The valid training schedule that fits and is best by `objective` (plan/objective.hpp), and
// one line saying why. By makespan (the default): the smallest makespan (ties, as sums of the
// same costs in another order differ in the last bits: the one storing less, then the one
// listed first); the line names the faster schedule that does not fit and the cap it breaks,
// or the runner-up and its margin. By span or memory: detail::recommend_by. `capped` says
// whether any cap applied (for the wording). No index when nothing valid fits (or, by memory,
// nothing finishes within the bound).
[[nodiscard]] inline Recommendation recommend(std::span<const ScheduleResult> schedules, bool capped,
                                              const Objective& objective = {}) {
  using detail::concat;
  if (objective.kind != ObjectiveKind::makespan) return detail::recommend_by(schedules, capped, objective);
  Recommendation rec;
  std::optional<std::size_t> fastest;
  std::optional<std::size_t> best;
  std::size_t candidates = 0;
  const auto better = [&](std::size_t a, std::size_t b) {
    const ScheduleResult& x = schedules[a];
    const ScheduleResult& y = schedules[b];
    if (std::abs(x.makespan - y.makespan) > 1e-9 * std::max(x.makespan, y.makespan)) return x.makespan < y.makespan;
    return *std::max_element(x.peak_activations.begin(), x.peak_activations.end()) <
           *std::max_element(y.peak_activations.begin(), y.peak_activations.end()) - 1e-9;
  };
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const ScheduleResult& r = schedules[i];
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
    const ScheduleResult& f = schedules[*fastest];
    rec.reason = concat("no schedule fits the memory cap; the fastest, ", f.name, ", ", f.fit_problem);
    return rec;
  }
  rec.index = best;
  const ScheduleResult& b = schedules[*best];
  const ScheduleResult& f = schedules[*fastest];
  if (better(*fastest, *best)) {
    rec.reason = concat(f.name, " is ", percent_of(detail::relative_gain(f.makespan, b.makespan)), " faster but ", f.fit_problem);
    return rec;
  }
  std::optional<std::size_t> second;
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const ScheduleResult& r = schedules[i];
    if (i == *best || !r.training || !r.valid) continue;
    if (!second || better(i, *second)) second = i;
  }
  rec.reason = concat("fastest of the ", candidates, " training schedules", capped ? ", and it fits the memory cap" : "");
  if (second) {
    const ScheduleResult& s = schedules[*second];
    rec.reason += concat("; next is ", s.name, ", ", percent_of(detail::relative_gain(b.makespan, s.makespan)), " slower");
  }
  return rec;
}

// Why `family` rejects `request`, in the family's own words (its rule and the nearest valid
// request); empty when it accepts it. The family record's why_not; throws ppsched::error for an
// unknown name.
[[nodiscard]] inline std::string why_rejected(std::string_view family, const ScheduleRequest& request) {
  return family_info(family).why_not(request);
}

namespace detail {
// The records of the families `request` names, looked up once, where the names enter (an
// unknown name throws); the records are carried from here on.
[[nodiscard]] inline std::vector<const FamilyInfo*> named_families(const PlanRequest& request) {
  std::vector<const FamilyInfo*> families;
  families.reserve(request.families.size());
  for (const std::string& name : request.families) families.push_back(&family_info(name));
  return families;
}

// The families `named` lists in order (every family when it is empty), each built by its own
// rule and cut (one cut per placement, from `partition_for`): `use(family, chunks, schedule,
// partition)` for each one built, the rest in `skipped`. See family_schedules.
template <class Use>
void for_each_family(const PlanRequest& request, std::span<const FamilyInfo* const> named_records,
                     PartitionCache& partition_for, std::vector<SkippedSchedule>& skipped, Use&& use) {
  const bool named = !named_records.empty();
  std::vector<const FamilyInfo*> families(named_records.begin(), named_records.end());
  if (!named) {
    for (const FamilyInfo& f : schedule_families) families.push_back(&f);
  }
  for (const FamilyInfo* family : families) {
    const ScheduleRequest r{request.ranks, request.microbatches, family->chunks_for(request.chunks)};
    if (!named && !family->accepts(r)) {
      skipped.push_back({std::string(family->name), family->why_not(r), false, r.chunks, family});
      continue;
    }
    Schedule schedule = family->make(r);  // a named family's rule speaks for itself
    const PartitionPlan* partition = nullptr;
    const std::vector<double> in_flight = family_in_flight(*family, request.ranks, request.microbatches);
    try {
      try {
        partition = &partition_for({schedule.placement, in_flight});
      } catch (const error&) {
        // No cut keeps the family's own counts under the devices' caps: cut as for 1F1B, so
        // the family is priced and reported as not fitting, as before it had counts.
        if (in_flight.empty()) throw;
        partition = &partition_for(schedule.placement);
      }
    } catch (const error& e) {
      skipped.push_back({std::string(family->name),
                         concat("its ", schedule.stages(), " stages (", request.ranks, " ranks x ", r.chunks,
                                " chunks) cannot be cut from this model: ", e.what()),
                         true, r.chunks, family});
      continue;
    }
    use(*family, r.chunks, std::move(schedule), *partition);
  }
}
}  // namespace detail

// One family's schedule for a request, with the model cut for its placement.
struct FamilySchedule {
  const FamilyInfo* family = nullptr;
  std::int32_t chunks = 1;  // per rank, by the family's rule (FamilyInfo::chunks_for)
  Schedule schedule;        // compute-only, as the family builds it
  PartitionPlan partition;  // the model cut for schedule.placement
};

struct FamilySchedules {
  std::vector<FamilySchedule> built;
  std::vector<SkippedSchedule> skipped;
};

// The schedules a comparison starts from: the families `request` names (every family when
// request.families is empty), in that order (or the family table's), each built with its own
// chunk count (FamilyInfo::chunks_for(request.chunks)) and with `model` cut for its placement.
// Unnamed, a family whose rule the request breaks is left out with its reason; a family the
// model cannot be cut for (more virtual stages than layers) is left out with the partitioner's
// reason, named or not. Throws ppsched::error for an unknown family, or a named family whose
// rule the request breaks. Only the sizes, chunks and families of `request` are read.
// `families` given, they are the families asked for, by record, and request.families is not
// read (a caller that has the records looks nothing up again).
[[nodiscard]] inline FamilySchedules family_schedules(const PlanModel& model, const PlanRequest& request,
                                                      std::span<const FamilyInfo* const> families) {
  FamilySchedules out;
  detail::PartitionCache partition_for(model);
  detail::for_each_family(request, families, partition_for, out.skipped,
                          [&](const FamilyInfo& family, std::int32_t chunks, Schedule schedule,
                              const PartitionPlan& partition) {
                            out.built.push_back({&family, chunks, std::move(schedule), partition});
                          });
  return out;
}

[[nodiscard]] inline FamilySchedules family_schedules(const PlanModel& model, const PlanRequest& request) {
  return family_schedules(model, request, detail::named_families(request));
}

// About how many bytes compare_families holds at its peak for `request`: every result keeps
// its schedule and simulated timeline (about 100 bytes per compute action, all families
// together), and the family being evaluated needs its lowering, validation and simulation
// besides (about 300 bytes per compute action). Fitted to ppsched-plan's peak resident memory
// at p = 16, m = 2000 and 8000 (docs/reliability.md, issue 24): within 1.3x for all families
// or one-stage-per-rank ones, up to 2.5x high for a V-shaped family alone. For refusing a
// request far beyond a machine's memory before starting it, not for sizing a pool. The
// families are those the request names, or every family that accepts it. Throws
// ppsched::error for an unknown family name.
[[nodiscard]] inline double estimate_plan_bytes(const PlanRequest& request) {
  constexpr double kept_per_action = 100.0, working_per_action = 300.0;
  const double slots = static_cast<double>(std::max(request.ranks, 0)) * static_cast<double>(std::max(request.microbatches, 0));
  double kept = 0.0, largest = 0.0;
  const auto add = [&](const FamilyInfo& f) {
    const std::int32_t v = f.chunks_for(request.chunks);
    const double per_slot = static_cast<double>(v) * (f.training ? (f.split_backward ? 3.0 : 2.0) : 1.0);
    kept += per_slot * slots;
    largest = std::max(largest, per_slot * slots);
  };
  if (request.families.empty()) {
    for (const FamilyInfo& f : schedule_families) {
      if (f.accepts(ScheduleRequest{request.ranks, request.microbatches, f.chunks_for(request.chunks)})) add(f);
    }
  } else {
    for (const std::string& name : request.families) add(family_info(name));
  }
  return kept_per_action * kept + working_per_action * largest;
}

namespace detail {

// The device-host link offload copies take: the request's, or PCIe 4 x16 in the model's unit.
[[nodiscard]] inline Interconnect host_link_for(const PlanRequest& request, const PlanModel& model) {
  if (request.memory_policy.host_link) return *request.memory_policy.host_link;
  const std::optional<double> s = seconds_per_unit(model.unit);
  if (!s) {
    fail({"plan request", concat("memory policies need the device-host link, and its default (10 us, 25 GB/s) cannot be given in the model's time unit '",
                                 model.unit, "'"),
          "PlanRequest::memory_policy.host_link",
          "give the link in the model's unit (ppsched-plan: --host-link T,X), or a model timed in s, ms, us or ns"});
  }
  return Interconnect{10e-6 / *s, 25e9 * *s};
}

// The smallest byte cap of any rank, the request's and the devices'; none without one.
[[nodiscard]] inline std::optional<double> smallest_byte_cap(const PlanRequest& request, const PlanModel& model) {
  std::optional<double> cap = request.cap.total_bytes;
  for (const double c : model.rank_memory_cap) cap = cap ? std::min(*cap, c) : c;
  return cap;
}

// `plain` priced again with one policy per stage of its (compute-only) schedule.
[[nodiscard]] inline ScheduleResult with_memory_policies(const ScheduleResult& plain, std::span<const MemoryPolicy> policies,
                                                         bool chosen, const PlanModel& model, const PartitionPlan& partition,
                                                         const PlanRequest& request, Workspace& ws) {
  CostModel cost = cost_model_of(partition, plan_cost_options(model, request.weight_memory_fraction));
  // Only copies use the link: recomputation alone needs none, whatever the model's unit.
  if (std::any_of(policies.begin(), policies.end(), [](const MemoryPolicy& p) { return p.offloads(); })) {
    cost.host_link = host_link_for(request, model);
  }
  MemoryPlan mp = apply_memory_policies(plain.schedule, cost, policies, request.memory_policy.choice.placement);
  ScheduleResult r = evaluate_priced(std::move(mp.schedule), model, partition, request, ws, mp.costs);
  r.name = plain.name;
  r.family = plain.family;
  MemoryPolicyUse use;
  use.chosen = chosen;
  use.plain_makespan = plain.makespan;
  use.plain_peak_bytes = largest_of(plain.peak_memory_bytes);
  use.plain_fit_problem = plain.fits ? "" : plain.fit_problem;
  const std::int32_t M = r.schedule.microbatches;
  for (std::size_t s = 0; s < mp.policies.size(); ++s) {
    StageMemoryCost c;
    c.policy = mp.policies[s];
    const StageCost& sc = !mp.costs.per_microbatch.empty() ? mp.costs.per_microbatch[s * static_cast<std::size_t>(M)]
                          : mp.costs.stages.size() == 1    ? mp.costs.stages.front()
                                                           : mp.costs.stages[s];
    if (c.policy.recomputes()) c.saved_bytes = recompute_saved_bytes(sc);
    if (c.policy.kind == MemoryPolicyKind::offload) c.saved_bytes = offload_bytes(sc);
    use.stages.push_back(c);
  }
  std::vector<std::int32_t> offloads(use.stages.size(), 0);
  for (const std::vector<Action>& program : r.schedule.programs) {
    for (const Action& a : program) {
      if (!is_memory(a.op)) continue;
      StageMemoryCost& c = use.stages[static_cast<std::size_t>(a.stage)];
      const double t = compute_time(mp.costs, a, M, c.policy.recomputes());
      if (a.op == Op::R) {
        ++c.microbatches;
        c.recompute_time += t;
      } else {
        if (a.op == Op::OFFLOAD) ++offloads[static_cast<std::size_t>(a.stage)];
        // (a micro-batch both recomputed and offloaded counts once, at its R)
        if (a.op == Op::OFFLOAD && !c.policy.recomputes()) ++c.microbatches;
        c.copy_time += t;
      }
    }
  }
  // Layer-wise with offloaded checkpoints: the recomputed part, and the checkpoints of the
  // micro-batches whose copies were placed (the others keep theirs), per micro-batch on average.
  for (std::size_t s = 0; s < use.stages.size(); ++s) {
    StageMemoryCost& c = use.stages[s];
    if (c.policy.kind != MemoryPolicyKind::layerwise_offload || c.microbatches == 0) continue;
    const StageCost& sc = !mp.costs.per_microbatch.empty() ? mp.costs.per_microbatch[s * static_cast<std::size_t>(M)]
                          : mp.costs.stages.size() == 1    ? mp.costs.stages.front()
                                                           : mp.costs.stages[s];
    c.saved_bytes += offload_bytes(sc) * static_cast<double>(offloads[s]) / static_cast<double>(c.microbatches);
  }
  r.memory = std::move(use);
  return r;
}

// A family's evaluated schedule under PlanRequest::memory_policy: as it is (none; automatic when
// it fits, or no byte cap applies), with the given policies, or with those
// choose_memory_policies picks under the smallest byte cap when they make it fit.
[[nodiscard]] inline ScheduleResult priced_with_memory_policy(ScheduleResult plain, const PlanModel& model,
                                                              const PartitionPlan& partition, const PlanRequest& request,
                                                              Workspace& ws) {
  const PlanMemoryPolicy& want = request.memory_policy;
  if (want.mode == MemoryPolicyMode::none || !plain.valid || !plain.training) return plain;
  const std::int32_t S = plain.schedule.stages();
  if (want.mode == MemoryPolicyMode::given) {
    std::vector<MemoryPolicy> policies(static_cast<std::size_t>(S), MemoryPolicy::none());
    for (const auto& [stage, policy] : want.stages) {
      if (stage < 0 || stage >= S) {
        fail({"plan request", concat("a memory policy for stage ", stage, ", and schedule '", plain.name, "' has ", S, " stages"),
              "PlanRequest::memory_policy.stages", concat("name stages 0 to ", S - 1, ", or compare only families with more stages")});
      }
      MemoryPolicy& p = policies[static_cast<std::size_t>(stage)];
      p = policy;
      if (p.layerwise() && !p.saved_bytes) {
        const std::optional<MemoryPolicy> lw =
            static_cast<std::size_t>(stage) < partition.stages.size() ? layerwise_recompute_policy(model, partition.stages[static_cast<std::size_t>(stage)])
                                                                      : std::nullopt;
        if (!lw) {
          fail({"plan request", concat("a ", memory_policy_kind_name(p.kind), " policy for stage ", stage, " of schedule '", plain.name,
                                       "', whose layers on that cut give it nothing to save (or the model has no layers)"),
                "PlanRequest::memory_policy.stages", "give that stage recompute or offload, or a model with per-layer sizes"});
        }
        p = policy.kind == MemoryPolicyKind::layerwise_offload ? lw->with_offloaded_checkpoints() : *lw;
      }
    }
    return with_memory_policies(plain, policies, false, model, partition, request, ws);
  }
  if (plain.fits) return plain;
  const std::optional<double> cap = smallest_byte_cap(request, model);
  if (!cap) return plain;
  // Each stage's ladder ends with layer-wise recomputation where the model's layers price it.
  const auto choose_on = [&](const PartitionPlan& cut, std::span<const double> static_bytes) {
    MemoryChoiceOptions options = want.choice;
    if (options.stage_ladders.empty()) options.stage_ladders = stage_ladders(model, cut, options.ladder);
    CostModel cost = cost_model_of(cut, plan_cost_options(model, request.weight_memory_fraction));
    cost.host_link = host_link_for(request, model);
    return choose_memory_policies(plain.schedule, cost, static_bytes, *cap, options);
  };
  const MemoryChoice choice = choose_on(partition, plain.static_bytes);
  // Offloading layer-wise checkpoints is the last rung: a cut made again under the cap (below)
  // may fit with cheaper policies, so where the family's cut needs that rung both are tried.
  const bool last_rung = std::any_of(choice.plan.policies.begin(), choice.plan.policies.end(),
                                     [](const MemoryPolicy& p) { return p.kind == MemoryPolicyKind::layerwise_offload; });
  if (choice.fits && !last_rung) return with_memory_policies(plain, choice.plan.policies, true, model, partition, request, ws);
  // Jointly with the partition: the family's cut balances time with every micro-batch's whole
  // activation in flight; with recomputation a rank holds little more than one, so cut again
  // with one in flight under the cap (the partitioner moves layers off the fullest rank),
  // and choose the policies on that cut. One stage per rank only: the partitioner applies
  // byte caps to that placement alone.
  const std::vector<std::int32_t>& placement = plain.schedule.placement;
  const bool one_per_rank = static_cast<std::int32_t>(placement.size()) == plain.schedule.ranks;
  if (one_per_rank && !model.layer_memory.empty()) {
    const std::vector<double> one(placement.size(), 1.0);
    CutRequest request_cut(placement, one);
    request_cut.memory_cap_bytes = *cap;
    std::optional<PartitionPlan> cut;
    try {
      cut = model.partition(request_cut);
    } catch (const error&) {
      // no cut fits even one micro-batch in flight: the plain result says what it needs
    }
    if (cut && *cut != partition) {
      const MemoryChoice again = choose_on(*cut, static_bytes_per_rank(*cut, plain.schedule.ranks));
      if (again.fits && !(choice.fits && choice.makespan <= again.makespan)) {
        ScheduleResult r = with_memory_policies(plain, again.plan.policies, true, model, *cut, request, ws);
        r.memory->partition = std::move(cut);
        return r;
      }
    }
  }
  if (choice.fits) return with_memory_policies(plain, choice.plan.policies, true, model, partition, request, ws);
  plain.fit_problem += concat("; with memory policies still ", bytes_text(largest_of(choice.peak_bytes)));
  return plain;
}

}  // namespace detail

// Compares the families `request` asks for on `model` and recommends one: each schedule of
// family_schedules (which says which are left out, and why) evaluated on its cut
// (evaluate_schedule), then under PlanRequest::memory_policy: with the given policies, or, in
// automatic mode, with choose_memory_policies' when it does not fit the byte caps plainly
// (ScheduleResult::memory says what each stage does and costs). Throws ppsched::error for a bad request, an unknown family, or a named
// family whose rule the request breaks.
[[nodiscard]] PPSCHED_OUTLINE PlanResult compare_families(const PlanModel& model, const PlanRequest& request)
#if PPSCHED_OUTLINE_BODY
{
  PlanResult plan = detail::start_plan("compare_families", model, request);
  detail::PartitionCache partition_for(model);
  plan.partition = partition_for(one_stage_per_rank_placement(request.ranks));
  const bool free_comm = model.link.is_free();
  Workspace ws;
  detail::for_each_family(request, detail::named_families(request), partition_for, plan.skipped,
                          [&](const FamilyInfo& family, std::int32_t, Schedule schedule,
                              const PartitionPlan& partition) {
                            ScheduleResult result = evaluate_schedule(std::move(schedule), model, partition, request, ws);
                            result.family = &family;
                            result = detail::priced_with_memory_policy(std::move(result), model, partition, request, ws);
                            // the closed forms leave communication and memory actions out
                            if (free_comm && !result.memory) detail::add_analytic(result, family, partition, request.ranks);
                            plan.schedules.push_back(std::move(result));
                          });
  const bool capped = request.cap.microbatches || request.cap.total_bytes || !model.rank_memory_cap.empty();
  plan.recommended = recommend(plan.schedules, capped, request.objective);
  return plan;
}
#else
;
#endif

}  // namespace ppsched
