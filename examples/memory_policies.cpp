// Memory policies (docs/execution-model.md, "Memory actions"): the same 1F1B step on 4 ranks
// with every activation kept, with full recomputation, with a selective part recomputed, and
// with activations offloaded to host memory over a PCIe-like link. Each schedule is proven by
// validate(), simulated, and printed with its step time and peak activation memory per rank,
// counted both in program order and over the simulated time.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ppsched/plan/memory_policy.hpp"
#include "ppsched/schedule/one_f_one_b.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/ascii.hpp"
#include "ppsched/validate/validate.hpp"

int main() {
  using namespace ppsched;
  using namespace ppsched::plan;  // the planner library
  // Four stages of 10 ms forward, 10 + 10 ms backward, 1 GB of stored activation per
  // micro-batch; neighbours 10 GB/s apart, each device 50 GB/s from its host (times in ms):
// offloading all of it needs 40 ms of copies per 30 ms of compute, half of it hides.
  CostModel costs;
  costs.unit = "ms";
  costs.stages.assign(4, StageCost{10.0, 10.0, 10.0, 1e9, 1e7});
  costs.link = Interconnect{0.01, 1e7};
  costs.host_link = Interconnect{0.01, 5e7};
  const Schedule plain = make_1f1b({4, 16, 1});

  struct Case {
    const char* name;
    std::vector<MemoryPolicy> policies;
  };
  const std::vector<Case> cases{
      {"keep everything", {MemoryPolicy::none()}},
      {"full recompute", {MemoryPolicy::full_recompute()}},
      {"selective 1/4 at 1 ms", {MemoryPolicy::selective_part(0.25e9, 1.0)}},
      {"offload all", {MemoryPolicy::offload()}},
      {"offload half", {MemoryPolicy::offload(0.5)}},
      {"per stage", {MemoryPolicy::offload(), MemoryPolicy::full_recompute(), MemoryPolicy::selective(0.5),
                     MemoryPolicy::none()}},
  };
  bool ok = true;
  for (const Case& c : cases) {
    const MemoryPlan plan = apply_memory_policies(plain, costs, c.policies);
    ok = ok && validate(plan.schedule).ok();
    const SimResult r = simulate(plan.schedule, plan.costs);
    std::printf("%-22s step %7.1f ms  peak GB per rank (order / time):", c.name, r.makespan);
    for (std::size_t k = 0; k < r.memory.size(); ++k) {
      std::printf(" %.2f/%.2f", r.memory[k].peak_bytes / 1e9, r.timed_peak[k].bytes / 1e9);
    }
    std::printf("\n");
    if (std::string(c.name) == "offload half") {
      AsciiOptions view;
      view.max_columns = 100;
      std::printf("%s", to_ascii(r.timeline, view).c_str());
    }
  }
  return ok ? 0 : 1;
}
