// Internals of <ppsched/plan/compare.hpp>: pricing a schedule for a plan, the recommendation's
// reasons and the memory-policy search. They are in ppsched::detail and not part of the API: no
// example or page uses them, and they may change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/plan/compare_types.hpp> holds.
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
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/plan/compare_types.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/memory_choice.hpp"
#include "ppsched/plan/memory_policy.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/analytic.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/validate/validate.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

[[nodiscard]] inline std::size_t argmax(const std::vector<double>& v) {
  return static_cast<std::size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

inline void check_plan_request(const plan::PlanRequest& r) {
  const std::string subject = "plan request";
  if (r.ranks < 1 || r.microbatches < 1 || r.chunks < 1) {
    detail::fail({subject, detail::concat("ranks = ", r.ranks, ", microbatches = ", r.microbatches, ", chunks = ", r.chunks),
          "PlanRequest", "ranks, microbatches and chunks are at least 1"});
  }
  if (!(r.weight_memory_fraction >= 0.0 && r.weight_memory_fraction <= std::numeric_limits<double>::max())) {
    detail::fail({subject, detail::concat("weight_memory_fraction is ", r.weight_memory_fraction), "PlanRequest::weight_memory_fraction",
          detail::weight_memory_fraction_hint});
  }
  for (const auto& [cap, field] : {std::pair{r.cap.microbatches, "PlanRequest::cap.microbatches"},
                                   std::pair{r.cap.total_bytes, "PlanRequest::cap.total_bytes"},
                                   std::pair{r.cap.activation_bytes, "PlanRequest::cap.activation_bytes"}}) {
    if (!(cap > 0.0)) detail::fail({subject, detail::concat("a memory cap of ", cap), field, "give a cap > 0, or infinity for none"});
  }
  for (const auto& [caps, field] : {std::pair{&r.cap.rank_total_bytes, "PlanRequest::cap.rank_total_bytes"},
                                    std::pair{&r.cap.rank_activation_bytes, "PlanRequest::cap.rank_activation_bytes"}}) {
    if (!caps->empty() && caps->size() != static_cast<std::size_t>(r.ranks)) {
      detail::fail({subject, detail::concat(caps->size(), " per-rank caps for ", r.ranks, " ranks"), field,
            "give one cap per rank, or none"});
    }
    for (std::size_t k = 0; k < caps->size(); ++k) {
      if (!((*caps)[k] > 0.0)) {
        detail::fail({subject, detail::concat("a memory cap of ", (*caps)[k]), detail::concat(field, "[", k, "]"),
              "give a cap > 0, or infinity for none"});
      }
    }
  }
  check_objective(r.objective, "PlanRequest::objective");
}

// What compare_families and search_plan both start with: the request checked, the model
// able to cut, and the result's header copied from them.
[[nodiscard]] inline plan::PlanResult start_plan(const char* who, const plan::PlanModel& model, const plan::PlanRequest& request) {
  check_plan_request(request);
  if (!model.partition) {
    detail::fail({who, "the model has no partition function", "PlanModel::partition",
          "use per_rank_cost_model or graph_model, or set PlanModel::partition"});
  }
  // The model was cut for one size (graph_model's options): planning another would cut a
  // placement the devices' caps were not given for, so the two must agree.
  for (const auto& [asked, built, field] : {std::tuple{request.ranks, model.ranks, "ranks"},
                                            std::tuple{request.microbatches, model.microbatches, "microbatches"}}) {
    if (built != 0 && asked != built) {
      detail::fail({who, detail::concat("PlanRequest::", field, " is ", asked, " but the model was built with GraphModelOptions::", field,
                        " = ", built, " (PlanModel::", field, ")"),
            detail::concat("PlanRequest::", field), detail::concat("give the model's ", built, ", or build the model with ", asked)});
    }
  }
  plan::PlanResult plan;
  plan.model = model.description;
  plan.unit = model.unit;
  plan.ranks = request.ranks;
  plan.microbatches = request.microbatches;
  plan.chunks = request.chunks;
  plan.cap = request.cap;
  plan.device_cap = model.device_cap;
  return plan;
}

// Each cut is made once per plan: the families (or the search's candidates) that share a
// placement and in-flight counts share its partition.
class PartitionCache {
 public:
  explicit PartitionCache(const plan::PlanModel& model) : model_(&model) {}
  [[nodiscard]] const Partition& operator()(const plan::CutRequest& cut) {
    Key key{{cut.placement.begin(), cut.placement.end()}, {cut.in_flight.begin(), cut.in_flight.end()}};
    auto it = cut_.find(key);
    if (it == cut_.end()) it = cut_.emplace(key, model_->partition({key.first, key.second})).first;
    return it->second;
  }

 private:
  using Key = std::pair<std::vector<std::int32_t>, std::vector<double>>;
  const plan::PlanModel* model_;
  std::map<Key, Partition> cut_;
};

// The first excess of `r` over `cap` in words ("needs 9 M_B on rank 0 > cap 8"; `limit` names
// the cap: "cap", "its device's"); empty when it keeps to it.
[[nodiscard]] inline std::string fit_excess(const plan::ScheduleResult& r, const plan::MemoryCap& cap, std::string_view limit) {
  constexpr double slack = 1e-9;  // peaks are sums of halves; compare without rounding noise
  if (!std::isinf(cap.microbatches) && !r.peak_activations.empty()) {
    const std::size_t worst = argmax(r.peak_activations);
    if (r.peak_activations[worst] > cap.microbatches + slack) {
      return detail::concat("needs ", short_number(r.peak_activations[worst]), " M_B on rank ", worst, " > ", limit, " ",
                            short_number(cap.microbatches));
    }
  }
  if (!std::isinf(cap.total_bytes) && !r.peak_memory_bytes.empty()) {
    const std::size_t worst = argmax(r.peak_memory_bytes);
    if (r.peak_memory_bytes[worst] > cap.total_bytes * (1.0 + slack)) {
      return detail::concat("needs ", bytes_text(r.peak_memory_bytes[worst]), " on rank ", worst, " > ", limit, " ",
                            bytes_text(cap.total_bytes));
    }
  }
  for (std::size_t rank = 0; rank < cap.rank_total_bytes.size() && rank < r.peak_memory_bytes.size(); ++rank) {
    if (r.peak_memory_bytes[rank] > cap.rank_total_bytes[rank] * (1.0 + slack)) {
      return detail::concat("needs ", bytes_text(r.peak_memory_bytes[rank]), " on rank ", rank, " > ", limit, " ",
                            bytes_text(cap.rank_total_bytes[rank]));
    }
  }
  for (std::size_t rank = 0; rank < r.peak_activation_bytes.size(); ++rank) {
    const double most = cap.activation_bytes_of(static_cast<std::int32_t>(rank));
    if (!std::isinf(most) && r.peak_activation_bytes[rank] > most * (1.0 + slack)) {
      return detail::concat("needs ", bytes_text(r.peak_activation_bytes[rank]), " of activations on rank ", rank, " > ", limit, " ",
                            bytes_text(most));
    }
  }
  return {};
}

// Sets `fits` and `fit_problem` from the caps: the request's, then the devices' own memory.
inline void check_fit(plan::ScheduleResult& r, const plan::MemoryCap& cap, const plan::MemoryCap& device_cap) {
  for (const auto& [c, limit] : {std::pair{&cap, "cap"}, std::pair{&device_cap, "its device's"}}) {
    std::string problem = fit_excess(r, *c, limit);
    if (!problem.empty()) {
      r.fits = false;
      r.fit_problem = std::move(problem);
      return;
    }
  }
}

// Per-rank T_F, T_BI, T_BW for the closed forms (the sum over the rank's chunks), when every
// rank has the same; nothing otherwise, since the formulas assume identical ranks.
[[nodiscard]] inline std::optional<std::array<double, 3>> uniform_rank_costs(const Partition& partition,
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

inline void add_analytic(plan::ScheduleResult& r, const FamilyInfo& family, const Partition& partition,
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
[[nodiscard]] inline plan::ScheduleResult evaluate_priced(Schedule schedule, const plan::PlanModel& model,
                                                    const Partition& partition, const plan::PlanRequest& request,
                                                    Workspace& ws, const CostModel& cost)
{
  if (partition.stages.size() != static_cast<std::size_t>(std::max(schedule.stages(), 0))) {
    detail::fail({"evaluate_schedule", detail::concat("the partition has ", partition.stages.size(), " stages for schedule '",
                                      schedule.name, "' of ", schedule.stages()),
          "", "cut the model for the schedule's placement: model.partition(schedule.placement)"});
  }
  plan::ScheduleResult r;
  r.name = schedule.name;
  r.partition = partition;  // the very cut priced below, so a user builds what was priced
  for (const std::int32_t v : plan::chunks_per_rank(schedule)) r.chunks = std::max(r.chunks, v);
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
  if (report.unlisted_problems != 0) r.problems.push_back(detail::concat("... and ", report.unlisted_problems, " more"));
  r.schedule = std::move(schedule);
  if (!r.valid) {
    r.fits = false;
    r.fit_problem = "is not valid";
    return r;
  }
  r.static_bytes = plan::static_bytes_per_rank(partition, r.schedule.ranks);
  SimResult sim = lowered ? simulate(*lowered, cost, {}, ws) : simulate(r.schedule, cost, {}, ws);
  const bool copies = plan::has_copies(r.schedule);  // then the memory over time counts too
  r.makespan = sim.makespan;
  r.bubble_fraction = sim.bubble_fraction;
  r.ideal_time = sim.ideal_time;
  for (std::size_t k = 0; k < sim.ranks.size(); ++k) {
    r.busy.push_back(sim.ranks[k].busy);
    r.span.push_back(sim.ranks[k].span);
    r.max_rank_span = std::max(r.max_rank_span, sim.ranks[k].span);
    r.peak_activations.push_back(report.memory[k].peak_microbatches);
    r.peak_activation_bytes.push_back(plan::capped_activation_bytes(sim, k, copies));
    r.peak_memory_bytes.push_back(r.static_bytes[k] + r.peak_activation_bytes.back());
  }
  r.throughput = r.makespan > 0.0 ? r.schedule.microbatches / r.makespan : 0.0;
  r.timeline = std::move(sim.timeline);
  check_fit(r, request.cap, model.device_cap);
  return r;
}

}  // namespace detail
namespace detail {

[[nodiscard]] inline double largest_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

// recommend() for the span and memory objectives: the same candidates (valid training
// schedules that fit), ranked by the longest rank span, or by the largest per-rank peak of
// stored activations among those within the makespan bound; ties go to the faster, then (span)
// to the one storing less, then to the one listed first.
[[nodiscard]] inline plan::Recommendation recommend_by(std::span<const plan::ScheduleResult> schedules, bool capped,
                                                 const plan::Objective& objective) {
  plan::Recommendation rec;
  const bool by_span = objective.kind == plan::ObjectiveKind::span;
  const double bound = objective.makespan_bound;
  const auto close = [](double x, double y) { return std::abs(x - y) <= 1e-9 * std::max({1.0, std::abs(x), std::abs(y)}); };
  const auto score = [&](const plan::ScheduleResult& r) { return by_span ? r.max_rank_span : largest_of(r.peak_activations); };
  const auto better = [&](std::size_t a, std::size_t b) {
    const plan::ScheduleResult& x = schedules[a];
    const plan::ScheduleResult& y = schedules[b];
    if (!close(score(x), score(y))) return score(x) < score(y);
    if (!close(x.makespan, y.makespan)) return x.makespan < y.makespan;
    return by_span && largest_of(x.peak_activations) < largest_of(y.peak_activations) - 1e-9;
  };
  const auto in_time = [&](const plan::ScheduleResult& r) { return by_span || r.makespan <= bound * (1.0 + 1e-9); };
  std::optional<std::size_t> best, best_any, fastest;  // best_any: in time, fitting or not
  std::size_t candidates = 0, within = 0;
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const plan::ScheduleResult& r = schedules[i];
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
  const std::string time_limit = std::isinf(bound) ? "" : detail::concat(" within the makespan bound ", short_number(bound));
  if (within == 0) {
    const plan::ScheduleResult& f = schedules[*fastest];
    rec.reason = detail::concat("no schedule finishes", time_limit, "; the fastest, ", f.name, ", takes ", short_number(f.makespan));
    return rec;
  }
  const std::string measure = by_span ? "the shortest longest rank span" : "the least peak activation memory";
  if (!best) {
    const plan::ScheduleResult& a = schedules[*best_any];
    rec.reason = detail::concat("no schedule", time_limit, " fits the memory cap; the one with ", measure, ", ", a.name, ", ",
                        a.fit_problem);
    return rec;
  }
  rec.index = best;
  const plan::ScheduleResult& b = schedules[*best];
  const auto figures = [&](const plan::ScheduleResult& r) {
    return by_span ? detail::concat("span ", short_number(r.max_rank_span), ", makespan ", short_number(r.makespan))
                   : detail::concat(short_number(largest_of(r.peak_activations)), " M_B, makespan ", short_number(r.makespan));
  };
  if (better(*best_any, *best)) {
    const plan::ScheduleResult& a = schedules[*best_any];
    rec.reason = detail::concat(a.name, " has ", by_span ? "a shorter longest rank span" : "less memory", " (", figures(a),
                        ") but ", a.fit_problem);
    return rec;
  }
  rec.reason = detail::concat(measure, " of the ", by_span ? candidates : within, " training schedules", time_limit,
                      capped ? " that fit the memory cap" : "", ": ", figures(b));
  std::optional<std::size_t> second;
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const plan::ScheduleResult& r = schedules[i];
    if (i == *best || !r.training || !r.valid || !in_time(r)) continue;
    if (!second || better(i, *second)) second = i;
  }
  if (second) rec.reason += detail::concat("; next is ", schedules[*second].name, ", ", figures(schedules[*second]));
  return rec;
}

}  // namespace detail
namespace detail {

// The device-host link offload copies take: the request's, or PCIe 4 x16 in the model's unit.
[[nodiscard]] inline Interconnect host_link_for(const plan::PlanRequest& request, const plan::PlanModel& model) {
  if (request.memory_policy.host_link) return *request.memory_policy.host_link;
  const std::optional<double> s = model.unit.try_factor_to(TimeUnit("s"));  // seconds per model unit
  if (!s) {
    detail::fail({"plan request", detail::concat("memory policies need the device-host link, and its default (10 us, 25 GB/s) cannot be given in the model's time unit '",
                                 model.unit.text(), "'"),
          "PlanRequest::memory_policy.host_link",
          "give the link in the model's unit (ppsched-plan: --host-link T,X), or a model timed in s, ms, us or ns"});
  }
  return Interconnect{10e-6 / *s, 25e9 * *s};
}

// The smallest byte cap (static plus activations) of any rank, the request's and the devices';
// none without one.
[[nodiscard]] inline std::optional<double> smallest_byte_cap(const plan::PlanRequest& request, const plan::PlanModel& model) {
  double cap = std::numeric_limits<double>::infinity();
  for (const plan::MemoryCap* c : {&request.cap, &model.device_cap}) {
    cap = std::min(cap, c->total_bytes);
    for (const double b : c->rank_total_bytes) cap = std::min(cap, b);
  }
  if (std::isinf(cap)) return std::nullopt;
  return cap;
}

// `plain` priced again with one policy per stage of its (compute-only) schedule.
[[nodiscard]] inline plan::ScheduleResult with_memory_policies(const plan::ScheduleResult& plain, std::span<const plan::MemoryPolicy> policies,
                                                         bool chosen, const plan::PlanModel& model, const Partition& partition,
                                                         const plan::PlanRequest& request, Workspace& ws) {
  CostModel cost = plan::cost_model_of(partition, plan::plan_cost_options(model, request.weight_memory_fraction));
  // Only copies use the link: recomputation alone needs none, whatever the model's unit.
  if (std::any_of(policies.begin(), policies.end(), [](const plan::MemoryPolicy& p) { return p.offloads(); })) {
    cost.host_link = host_link_for(request, model);
  }
  plan::MemoryPlan mp = plan::apply_memory_policies(plain.schedule, cost, policies, request.memory_policy.choice.placement);
  plan::ScheduleResult r = evaluate_priced(std::move(mp.schedule), model, partition, request, ws, mp.costs);
  r.name = plain.name;
  r.family = plain.family;
  plan::MemoryPolicyUse use;
  use.chosen = chosen;
  use.plain_makespan = plain.makespan;
  use.plain_peak_bytes = largest_of(plain.peak_memory_bytes);
  use.plain_fit_problem = plain.fits ? "" : plain.fit_problem;
  const std::int32_t M = r.schedule.microbatches;
  for (std::size_t s = 0; s < mp.policies.size(); ++s) {
    plan::StageMemoryCost c;
    c.policy = mp.policies[s];
    const StageCost& sc = !mp.costs.per_microbatch.empty() ? mp.costs.per_microbatch[s * static_cast<std::size_t>(M)]
                          : mp.costs.stages.size() == 1    ? mp.costs.stages.front()
                                                           : mp.costs.stages[s];
    if (c.policy.recomputes()) c.saved_bytes = recompute_saved_bytes(sc);
    if (c.policy.kind == plan::MemoryPolicyKind::offload) c.saved_bytes = offload_bytes(sc);
    use.stages.push_back(c);
  }
  std::vector<std::int32_t> offloads(use.stages.size(), 0);
  for (const std::vector<Action>& program : r.schedule.programs) {
    for (const Action& a : program) {
      if (!is_memory(a.op)) continue;
      plan::StageMemoryCost& c = use.stages[static_cast<std::size_t>(a.stage)];
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
    plan::StageMemoryCost& c = use.stages[s];
    if (c.policy.kind != plan::MemoryPolicyKind::layerwise_offload || c.microbatches == 0) continue;
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
[[nodiscard]] inline plan::ScheduleResult priced_with_memory_policy(plan::ScheduleResult plain, const plan::PlanModel& model,
                                                              const Partition& partition, const plan::PlanRequest& request,
                                                              Workspace& ws) {
  const plan::PlanMemoryPolicy& want = request.memory_policy;
  if (want.mode == plan::MemoryPolicyMode::none || !plain.valid || !plain.training) return plain;
  const std::int32_t S = plain.schedule.stages();
  if (want.mode == plan::MemoryPolicyMode::given) {
    std::vector<plan::MemoryPolicy> policies(static_cast<std::size_t>(S), plan::MemoryPolicy::none());
    for (const auto& [stage, policy] : want.stages) {
      if (stage < 0 || stage >= S) {
        detail::fail({"plan request", detail::concat("a memory policy for stage ", stage, ", and schedule '", plain.name, "' has ", S, " stages"),
              "PlanRequest::memory_policy.stages", detail::concat("name stages 0 to ", S - 1, ", or compare only families with more stages")});
      }
      plan::MemoryPolicy& p = policies[static_cast<std::size_t>(stage)];
      p = policy;
      if (p.layerwise() && !p.saved_bytes) {
        const std::optional<plan::MemoryPolicy> lw =
            static_cast<std::size_t>(stage) < partition.stages.size() ? plan::layerwise_recompute_policy(model, partition.stages[static_cast<std::size_t>(stage)])
                                                                      : std::nullopt;
        if (!lw) {
          detail::fail({"plan request", detail::concat("a ", plan::memory_policy_kind_name(p.kind), " policy for stage ", stage, " of schedule '", plain.name,
                                       "', whose layers on that cut give it nothing to save (or the model has no layers)"),
                "PlanRequest::memory_policy.stages", "give that stage recompute or offload, or a model with per-layer sizes"});
        }
        p = policy.kind == plan::MemoryPolicyKind::layerwise_offload ? lw->with_offloaded_checkpoints() : *lw;
      }
    }
    return with_memory_policies(plain, policies, false, model, partition, request, ws);
  }
  if (plain.fits) return plain;
  const std::optional<double> cap = smallest_byte_cap(request, model);
  if (!cap) return plain;
  // Each stage's ladder ends with layer-wise recomputation where the model's layers price it.
  const auto choose_on = [&](const Partition& cut, std::span<const double> static_bytes) {
    plan::MemoryChoiceOptions options = want.choice;
    if (options.stage_ladders.empty()) options.stage_ladders = plan::stage_ladders(model, cut, options.ladder);
    CostModel cost = plan::cost_model_of(cut, plan::plan_cost_options(model, request.weight_memory_fraction));
    cost.host_link = host_link_for(request, model);
    return plan::choose_memory_policies(plain.schedule, cost, static_bytes, *cap, options);
  };
  const plan::MemoryChoice choice = choose_on(partition, plain.static_bytes);
  // Offloading layer-wise checkpoints is the last rung: a cut made again under the cap (below)
  // may fit with cheaper policies, so where the family's cut needs that rung both are tried.
  const bool last_rung = std::any_of(choice.plan.policies.begin(), choice.plan.policies.end(),
                                     [](const plan::MemoryPolicy& p) { return p.kind == plan::MemoryPolicyKind::layerwise_offload; });
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
    plan::CutRequest request_cut(placement, one);
    request_cut.cap.total_bytes = *cap;
    std::optional<Partition> cut;
    try {
      cut = model.partition(request_cut);
    } catch (const error&) {
      // no cut fits even one micro-batch in flight: the plain result says what it needs
    }
    if (cut && *cut != partition) {
      const plan::MemoryChoice again = choose_on(*cut, plan::static_bytes_per_rank(*cut, plain.schedule.ranks));
      if (again.fits && !(choice.fits && choice.makespan <= again.makespan)) {
        plan::ScheduleResult r = with_memory_policies(plain, again.plan.policies, true, model, *cut, request, ws);
        r.memory->partition = std::move(cut);
        return r;
      }
    }
  }
  if (choice.fits) return with_memory_policies(plain, choice.plan.policies, true, model, partition, request, ws);
  plain.fit_problem += detail::concat("; with memory policies still ", bytes_text(largest_of(choice.peak_bytes)));
  return plain;
}

}  // namespace detail
}  // namespace ppsched

