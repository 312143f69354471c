// The figure of issue 23, item 4: on the default GPT-style model of ppsched-plan (8 ranks, 32
// micro-batches, examples/cli/default_model.hpp), sweep the memory cap per rank from "everything
// fits" down to below the static memory, and print at each cap
// - the fastest plain family schedule that fits (compare_families);
// - the schedule search's best plain plan (search_plan, what `ppsched-plan --schedule auto
//   --memory-cap-bytes CAP` recommends: the figures);
// - the fastest schedule with memory actions: choose_memory_policies over every family's
//   schedule (offload over a 25 GB/s host link), with the ladder of whole-stage policies, and
//   with layer-wise recomputation, then layer-wise with its checkpoints offloaded, added to
//   each stage's ladder (stage_ladders), all on each family's own cut;
// - the planner's plan with memory actions (compare_families with MemoryPolicyMode::automatic:
//   the ladders with layer-wise recomputation and, where no policy fits a family's cut, a cut
//   made again under the cap), which is what `ppsched-plan --memory-policy auto` recommends;
// - the search's plan with memory actions (search_plan with MemoryPolicyMode::automatic: the
//   search's candidates over the cap, best bound first, priced as the planner prices a family),
//   which is what `ppsched-plan --schedule auto --memory-policy auto` recommends.
// Then it bisects, to 0.01 GiB, the smallest cap at which the search finds a plain plan, the
// smallest at which some plan with memory actions exists, and the planner's and the search's, and sets both beside the static
// memory (the goal: the second's excess over static at most half the first's).
// A report, not a timed test (docs/performance.md, "Memory policies").
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "cli/default_model.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/plan/memory_choice.hpp"
#include "ppsched/plan/plan.hpp"
#include "ppsched/plan/plan_search.hpp"

namespace {

using namespace ppsched;
using namespace ppsched::plan;
constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

struct MemoryBest {
  std::string name, policies;
  double makespan = std::numeric_limits<double>::infinity();
  [[nodiscard]] bool found() const { return !name.empty(); }
};

// The fastest family schedule with memory actions under `cap`.
MemoryBest best_with_memory(const PlanModel& model, const PlanResult& all, double cap, bool layerwise) {
  MemoryBest best;
  for (const ScheduleResult& r : all.schedules) {
    if (!r.valid || !r.training || r.static_bytes.empty()) continue;
    if (*std::max_element(r.static_bytes.begin(), r.static_bytes.end()) > cap) continue;
    const Partition partition = model.partition(r.schedule.placement);
    CostModel costs = cost_model_of(partition, {.unit = "ms"});
    costs.host_link = Interconnect{0.01, 25e9 / 1e3};  // PCIe 4 x16, in bytes per ms
    MemoryChoiceOptions options;
    if (layerwise) options.stage_ladders = stage_ladders(model, partition);
    const MemoryChoice c = choose_memory_policies(r.schedule, costs, r.static_bytes, cap, options);
    if (!c.fits || c.makespan >= best.makespan) continue;
    best.makespan = c.makespan;
    best.name = r.name;
    best.policies.clear();
    for (std::size_t s = 0; s < c.plan.policies.size(); ++s) {
      if (c.plan.policies[s].kind == MemoryPolicyKind::none) continue;
      best.policies += (best.policies.empty() ? "" : ", ") + std::to_string(s) + ": " + to_string(c.plan.policies[s]);
    }
  }
  return best;
}

const ScheduleResult* searched(const PlanModel& model, PlanRequest request, double cap, SearchedPlan& keep) {
  request.cap.total_bytes = cap;
  keep = search_plan(model, request);
  return keep.plan.recommended_schedule();
}

// The smallest cap in (lo, hi] at which `fits` holds, to `step`, given that it holds at hi.
template <class Fits>
double bisect(double lo, double hi, double step, const Fits& fits) {
  while (hi - lo > step) {
    const double mid = 0.5 * (lo + hi);
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

const ScheduleResult* searched_with_policies(const PlanModel& model, PlanRequest request, double cap, SearchedPlan& keep) {
  request.memory_policy.mode = MemoryPolicyMode::automatic;
  return searched(model, request, cap, keep);
}

const ScheduleResult* planned(const PlanModel& model, PlanRequest request, double cap, PlanResult& keep) {
  request.cap.total_bytes = cap;
  request.memory_policy.mode = MemoryPolicyMode::automatic;
  keep = compare_families(model, request);
  return keep.recommended_schedule();
}

std::string policies_of(const ScheduleResult& r) {
  std::string out;
  if (!r.memory) return out;
  for (std::size_t s = 0; s < r.memory->stages.size(); ++s) {
    const MemoryPolicy& p = r.memory->stages[s].policy;
    if (p.kind != MemoryPolicyKind::none) out += (out.empty() ? "" : ", ") + std::to_string(s) + ": " + to_string(p);
  }
  if (r.memory->partition) {
    out += "; cut";
    for (const PartitionStage& st : r.memory->partition->stages) out += " " + std::to_string(st.begin) + "-" + std::to_string(st.end - 1);
  }
  return out;
}

std::string ms(double t) { return std::to_string(static_cast<long>(t)); }

}  // namespace

int main() {
  Profile profile;
  profile.graph = LayerGraph(cli::gpt_layers());
  profile.time_unit = "ms";
  profile.link = Interconnect{0.02, 25e9 / 1e3};
  const std::int32_t ranks = 8, microbatches = 32;
  const PlanModel model = graph_model(profile, "gpt", {.ranks = ranks, .microbatches = microbatches, .optimizer_state_factor = 8.0});
  PlanRequest request;
  request.ranks = ranks;
  request.microbatches = microbatches;
  const PlanResult all = compare_families(model, request);  // no cap: every family's schedule and peak
  double static_peak = 0.0;
  for (const ScheduleResult& r : all.schedules) {
    for (const double b : r.static_bytes) static_peak = std::max(static_peak, b);
  }
  std::printf("static memory on the fullest rank: %.2f GiB (1f1b's cut)\n", static_peak / GiB);
  std::printf("%7s | %-16s | %-30s | %-40s | %-40s | %-40s | %s\n", "cap GiB", "plain families", "plain search",
              "memory actions (whole stages)", "with layer-wise (+ offloaded checkpoints)", "planner (policies, partition)",
              "search with policies");
  for (const double cap_gib : {64.0, 30.0, 25.0, 22.0, 21.0, 20.0, 19.0, 18.5, 18.0, 17.0, 16.5, 16.0}) {
    const double cap = cap_gib * GiB;
    const ScheduleResult* plain = nullptr;
    for (const ScheduleResult& r : all.schedules) {
      if (!r.valid || !r.training || r.peak_memory_bytes.empty()) continue;
      if (*std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end()) > cap) continue;
      if (plain == nullptr || r.makespan < plain->makespan) plain = &r;
    }
    SearchedPlan keep;
    const ScheduleResult* search = searched(model, request, cap, keep);
    const MemoryBest whole = best_with_memory(model, all, cap, false);
    const MemoryBest layers = best_with_memory(model, all, cap, true);
    PlanResult keep_plan;
    const ScheduleResult* plan = planned(model, request, cap, keep_plan);
    SearchedPlan keep_with;
    const ScheduleResult* search_with = searched_with_policies(model, request, cap, keep_with);
    const auto text = [](const MemoryBest& b) {
      return b.found() ? b.name + " " + ms(b.makespan) + " [" + b.policies + "]" : std::string("none fits");
    };
    std::printf("%7.1f | %-16s | %-30s | %-40s | %-40s | %-40s | %s\n", cap_gib,
                plain != nullptr ? (plain->name + " " + ms(plain->makespan)).c_str() : "none fits",
                search != nullptr ? (search->name + " " + ms(search->makespan)).c_str() : "none fits",
                text(whole).c_str(), text(layers).c_str(),
                plan != nullptr ? (plan->name + " " + ms(plan->makespan) + " [" + policies_of(*plan) + "]").c_str() : "none fits",
                search_with != nullptr ? (search_with->name + " " + ms(search_with->makespan) + " [" + policies_of(*search_with) + "]").c_str()
                                       : "none fits");
    std::fflush(stdout);
  }

  // The smallest caps, each bisected between the static memory (nothing fits below it) and a
  // cap that fits.
  const double step = 0.01 * GiB;
  const double plain_cap = bisect(static_peak, 25.0 * GiB, step, [&](double cap) {
    SearchedPlan keep;
    return searched(model, request, cap, keep) != nullptr;
  });
  std::printf("smallest cap with a plain plan (search): %.2f GiB (%.2f GiB above static)\n", plain_cap / GiB,
              (plain_cap - static_peak) / GiB);
  std::fflush(stdout);
  const double whole_cap = bisect(static_peak, 25.0 * GiB, step, [&](double cap) { return best_with_memory(model, all, cap, false).found(); });
  std::printf("smallest cap with memory actions (whole stages): %.2f GiB (%.2f GiB above static)\n", whole_cap / GiB,
              (whole_cap - static_peak) / GiB);
  std::fflush(stdout);
  const double layer_cap = bisect(static_peak, 25.0 * GiB, step, [&](double cap) { return best_with_memory(model, all, cap, true).found(); });
  const MemoryBest at = best_with_memory(model, all, layer_cap, true);
  std::printf("smallest cap with memory actions (with layer-wise, + offloaded checkpoints): %.2f GiB (%.2f GiB above static): %s %s [%s]\n",
              layer_cap / GiB, (layer_cap - static_peak) / GiB, at.name.c_str(), ms(at.makespan).c_str(), at.policies.c_str());
  const double ratio = (plain_cap - static_peak) / (layer_cap - static_peak);
  std::printf("on the families' cuts, the excess over static falls %.2fx (goal: 2x): %s\n", ratio, ratio >= 2.0 ? "met" : "not met");
  std::fflush(stdout);
  // The planner may cut again under the cap, below the fixed cut's static memory: bisect from
  // well below it.
  const double planner_cap = bisect(8.0 * GiB, 25.0 * GiB, step, [&](double cap) {
    PlanResult keep;
    return planned(model, request, cap, keep) != nullptr;
  });
  PlanResult keep;
  const ScheduleResult* least = planned(model, request, planner_cap, keep);
  std::printf("smallest cap with the planner's plan (policies and partition): %.2f GiB (%+.2f GiB against the fixed cut's static): %s %s [%s]\n",
              planner_cap / GiB, (planner_cap - static_peak) / GiB, least->name.c_str(), ms(least->makespan).c_str(),
              policies_of(*least).c_str());
  std::fflush(stdout);
  const double search_cap = bisect(8.0 * GiB, 25.0 * GiB, step, [&](double cap) {
    SearchedPlan keep_search;
    return searched_with_policies(model, request, cap, keep_search) != nullptr;
  });
  SearchedPlan keep_search;
  const ScheduleResult* least_search = searched_with_policies(model, request, search_cap, keep_search);
  std::printf("smallest cap with the search's plan with policies: %.2f GiB (%+.2f GiB against the fixed cut's static): %s %s [%s]\n",
              search_cap / GiB, (search_cap - static_peak) / GiB, least_search->name.c_str(), ms(least_search->makespan).c_str(),
              policies_of(*least_search).c_str());
  return 0;
}
