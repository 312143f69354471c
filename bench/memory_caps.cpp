// The figure of issue 23, item 4: on the default GPT-style model of ppsched-plan (8 ranks, 32
// micro-batches, examples/cli/default_model.hpp), sweep the memory cap per rank from "everything
// fits" down to below the static memory, and print at each cap the fastest plain family schedule
// that fits and the fastest schedule with memory actions (choose_memory_policies over every
// family's schedule, offload over a 25 GB/s host link). A report, not a timed test
// (docs/performance.md, "Memory policies"). Plain plans here are the families of
// compare_families; the schedule search (search_plan) can find faster plain ones.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "cli/default_model.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/plan/plan.hpp"

int main() {
  using namespace ppsched;
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
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  double static_peak = 0.0;
  for (const ScheduleResult& r : all.schedules) {
    for (const double b : r.static_bytes) static_peak = std::max(static_peak, b);
  }
  std::printf("static memory on the fullest rank: %.2f GiB (1f1b's cut)\n", static_peak / GiB);
  std::printf("%8s  %-28s  %-52s\n", "cap GiB", "plain: family, step ms", "with memory actions: family, step ms, policies");
  for (const double cap_gib : {64.0, 30.0, 25.0, 22.0, 21.0, 20.0, 19.0, 18.0, 17.0, 16.0, 15.0, 14.0, 13.0, 12.0}) {
    const double cap = cap_gib * GiB;
    const ScheduleResult* plain = nullptr;
    for (const ScheduleResult& r : all.schedules) {
      if (!r.valid || !r.training || r.peak_memory_bytes.empty()) continue;
      if (*std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end()) > cap) continue;
      if (plain == nullptr || r.makespan < plain->makespan) plain = &r;
    }
    std::string best_name, best_policies;
    double best = std::numeric_limits<double>::infinity();
    for (const ScheduleResult& r : all.schedules) {
      if (!r.valid || !r.training || r.static_bytes.empty()) continue;
      if (*std::max_element(r.static_bytes.begin(), r.static_bytes.end()) > cap) continue;
      CostModel costs = cost_model_of(model.partition(r.schedule.placement), {.unit = "ms"});
      costs.host_link = Interconnect{0.01, 25e9 / 1e3};  // PCIe 4 x16, in bytes per ms
      const MemoryChoice c = choose_memory_policies(r.schedule, costs, r.static_bytes, cap);
      if (!c.fits || c.makespan >= best) continue;
      best = c.makespan;
      best_name = r.name;
      best_policies.clear();
      for (const MemoryPolicy& p : c.plan.policies) best_policies += (best_policies.empty() ? "" : ", ") + to_string(p);
    }
    const std::string plain_text = plain != nullptr ? plain->name + " " + std::to_string(static_cast<long>(plain->makespan)) : "none fits";
    const std::string memory_text =
        best_name.empty() ? "none fits" : best_name + " " + std::to_string(static_cast<long>(best)) + " [" + best_policies + "]";
    std::printf("%8.0f  %-28s  %s\n", cap_gib, plain_text.c_str(), memory_text.c_str());
    std::fflush(stdout);
  }
  return 0;
}
