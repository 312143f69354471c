// The simulator's cost model (<ppsched/costs/cost_model.hpp>, whose header comment says what
// each cost means): StageCost per stage and CostModel. Include <ppsched/costs/cost_model.hpp>;
// they sit in a header of their own so that the internals in costs/detail/cost_model.hpp build
// on them without including the public header back.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/time_unit.hpp"
#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct StageCost {
  double forward = 1.0;
  double backward_input = 1.0;   // BI
  double backward_weight = 1.0;  // BW
  double activation_bytes = 0.0;  // one stored activation of this stage, one micro-batch (M_B: validate/report.hpp)
  double output_bytes = 0.0;      // sent to the next stage per micro-batch; its gradient comes back the same size
  // The full backward B, when it is not BI + BW (a fused backward is often cheaper).
  std::optional<double> backward{};
  // Memory actions (docs/execution-model.md, "Memory actions"). What R restores: the part of
  // activation_bytes that F of a recomputed micro-batch does not keep (default: all of it, full
  // recomputation). R's time: default forward x recompute_saved_bytes / activation_bytes (the
  // share of the forward that produced what is restored; forward when activation_bytes is 0).
  std::optional<double> recompute_saved_bytes{};
  std::optional<double> recompute{};
  // Layer-wise recomputation: the most of what R restores that is held at once — the stage's
  // largest single layer's activation — where the stage keeps each layer's input
  // (activation_bytes - recompute_saved_bytes) and its backward recomputes one layer, runs its
  // backward and frees it, layer by layer. Empty: R restores recompute_saved_bytes at once.
  std::optional<double> recompute_peak_bytes{};
  // What OFFLOAD moves to host memory and RELOAD brings back; default activation_bytes. On a
  // micro-batch that R also recomputes (layer-wise recomputation with offloaded checkpoints),
  // OFFLOAD moves what F kept for R, activation_bytes - recompute_saved_bytes, at most.
  std::optional<double> offload_bytes{};
  // What this stage's BI keeps for its BW, per stored activation; empty: the model's
  // CostModel::weight_memory_fraction. Stages differ where their BIs do: the libtorch adapter's
  // first stage computes no input gradient and keeps exactly what F left (1), the others keep
  // the graph and the gradients they capture besides (measured: 1.7-2x).
  std::optional<double> weight_memory_fraction{};

  friend bool operator==(const StageCost&, const StageCost&) = default;
};

struct CostModel {
  // The user's cost unit, carried into the simulated Timeline: "unit" (a unit of the model's
  // own) until named, since a model of made-up costs has no relation to time; "ms" etc. when
  // the costs are measured times.
  TimeUnit unit = "unit";
  std::vector<StageCost> stages;          // one per stage, or a single entry for every stage
  std::vector<double> microbatch_scale;   // empty, or one factor per micro-batch (times and bytes)
  std::vector<StageCost> per_microbatch;  // empty, or stages x micro-batches (stage-major); overrides the two above
  Interconnect link{};                    // between neighbouring stages (graph/hardware.hpp)
  // M_W / M_B: what BI keeps for BW, per stored activation. Above 1 where BI holds more than F
  // left: the libtorch adapter's BI keeps the whole graph and adds the gradients it captures.
  double weight_memory_fraction = 0.5;
  // Share of the shorter action of each overlapped F&B pair hidden under the longer, in [0, 1]:
  // 0, the default, makes a pair take T_F + T_B (what the executor does: it runs the pair's F
  // then its B, and two kernels that each fill the GPU gain little from sharing it); 1 makes it
  // take max(T_F, T_B). Measure T_F&B and set (T_F + T_B - T_F&B) / min(T_F, T_B). Schedules
  // without pairs do not depend on it.
  double fb_overlap = 0.0;
  // The runtime's fixed costs, in `unit` (graph/hardware.hpp; the same value a Profile, a
  // plan::PlanModel and plan::PlanCostOptions hold, copied whole). Measured by
  // measure_backend_overheads and measure_concurrent_slowdown (runtime/profile.hpp); calibrate
  // (sim/calibrate.hpp) refits `action` and `step`. As the simulator prices them:
  // - `action`: fixed time of every compute action (F, B, BI, BW) on top of its stage's time,
  //   the runtime's host work, launch and synchronisation per action. A B pays it once, a BI
  //   and its BW once each.
  // - `transfer`: fixed time of every transfer (a send and its receive) on top of
  //   link.transfer_time(bytes): posting, matching and waking the two sides, which the link's
  //   latency does not count when the link is modelled as free.
  // - `step`: fixed time of every step, paid once whatever the schedule: the runtime's work
  //   before the first action and after the last (waking the rank threads, checking the batch,
  //   gathering the results). The makespan includes it; no action does, so a predicted
  //   timeline stays comparable with a measured one, which does not record it either.
  // - `concurrent_slowdown`: ranks that share one host's cores slow each other down: entry k-1
  //   is how many times longer a compute action takes while k ranks compute at once (entry 0 is
  //   1 where the profile was measured alone; each >= 1). Past the last entry the host is taken
  //   as saturated: entry K-1 x k / K. On the CPU backend two busy threads on a 2-core VM
  //   measured 1.7-2.4x here. Empty, the default: ranks never slow each other, as on separate
  //   GPUs. Every rank of the schedule is taken to share the host.
  FixedCosts fixed_costs{};
  // Between each device and its host: OFFLOAD and RELOAD take host_link.transfer_time(bytes) on
  // the rank's copy lane (free by default, as an unmodelled link is elsewhere; give PCIe's).
  Interconnect host_link{};
  // Each stage's optimizer step (StageFunctions::optimizer_step), once per step: a rank runs its
  // stages' after its last action, and their end is the rank's end of the step, which the
  // makespan includes (no span of the timeline holds it, as with fixed_costs.step). Empty, the
  // default: free; otherwise one entry per stage, or a single one for every stage.
  std::vector<double> optimizer_step{};
};

}  // namespace ppsched
