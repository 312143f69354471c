// The types of the simulator (<ppsched/sim/simulate.hpp>, whose header comment describes the
// run): the options simulate() takes and the SimResult it returns. Include
// <ppsched/sim/simulate.hpp>; these sit in a header of their own so that the internals in
// sim/detail/simulate.hpp build on them without including the public header back.
#pragma once

#include <cstdint>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/validate/report.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct SimOptions {
  // One stream per rank: communication blocks compute (no overlap).
  bool comm_on_compute_stream = false;
  // Dependency-only run: no streams or rendezvous for communication, each cross-rank
  // dependency just takes its transfer time. Communication actions are ignored.
  bool ideal_communication = false;
  // Fill SimResult::timeline (one Span per action); off saves time and memory in sweeps.
  bool record_timeline = true;
};

struct SimRankStats {
  double first_start = 0.0;  // first compute start
  double last_end = 0.0;     // last compute end
  double span = 0.0;         // last_end - first_start
  double busy = 0.0;
  double input_wait = 0.0;    // compute idle while a remote input is on its way (simulate.hpp)
  double idle = 0.0;          // makespan - busy
  double idle_in_span = 0.0;  // span - busy
};

// Activation memory of one rank just after a change (docs/execution-model.md, "Memory").
struct MemorySample {
  double time = 0.0;
  double activations = 0.0;  // stored stage activations (each 1, parts for R, copies, BI..BW)
  double bytes = 0.0;        // with the cost model's activation_bytes; 0 without
  friend bool operator==(const MemorySample&, const MemorySample&) = default;
};

struct SimResult {
  Timeline timeline;
  double makespan = 0.0;
  std::vector<SimRankStats> ranks;
  double bubble_fraction = 0.0;
  double ideal_time = 0.0;
  double bubble_vs_ideal = 0.0;
  std::vector<RankMemory> memory;                  // per rank: stored stage activations and bytes (validate/report.hpp)
  std::vector<std::int32_t> stage_peak_in_flight;  // per stage
  bool lowered_internally = false;                 // the input was compute-only and was lowered
  // Per rank, memory over the simulated time: allocations at an action's start (F, R, RELOAD),
  // frees at its end (OFFLOAD, B, BI, BW; frees first where times tie). Unlike `memory` (the
  // program order's count, as validate() gives it), it sees when the copy lane really moved the
  // bytes. Its maximum per rank is `timed_peak`.
  std::vector<std::vector<MemorySample>> memory_over_time;
  std::vector<MemorySample> timed_peak;
  // The makespan's part that is not in the timeline (CostModel::fixed_costs.step): the timeline
  // holds what runs as actions, which is also all a measured timeline records.
  double step_overhead = 0.0;
};

}  // namespace ppsched
