// What a validation reports, and the options it takes.
//
// Memory has one unit in ppsched (validate, simulate, search, plan, controllable_memory):
// M_B, one micro-batch's stored activations of a rank's whole share of the model (the
// zero-bubble papers' unit). With one stage per rank that is one stage's activation; a rank that
// holds v stages stores 1/v M_B per stage per micro-batch. What BI leaves for BW is
// `weight_fraction` (M_W / M_B) of the activation it belongs to. M_B is a count, not bytes;
// bytes are reported beside it where the size of each stage's activation is known.
//
// RankMemory::peak_microbatches is in M_B (each stored activation of a stage weighs 1/v);
// peak_activations counts stored stage activations (each 1), which equals it with one stage
// per rank; peak_bytes is bytes. (plan/search/memory.hpp's peak_memory gives the same M_B.)
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "ppsched/engine/problems.hpp"

namespace ppsched::inline PPSCHED_MODE {

// How activation memory is counted: stored stage activations (above), and bytes when
// `activation_bytes[stage]` gives the size of one stored activation of that stage (empty:
// bytes are not reported, i.e. 0).
// Memory actions (docs/execution-model.md): F of a micro-batch with an R keeps all but
// `recompute_fraction[stage]` of its activation and R brings that part back; OFFLOAD moves
// `offload_fraction[stage]` of it to host memory and RELOAD brings it back. Empty: 1 (all).
struct MemoryModel {
  double weight_fraction = 0.5;
  // Per stage, where stages keep different shares for BW (StageCost::weight_memory_fraction);
  // empty: weight_fraction for every stage.
  std::vector<double> stage_weight_fraction;
  std::vector<double> activation_bytes;
  std::vector<double> recompute_fraction;
  std::vector<double> offload_fraction;
  // Layer-wise recomputation: the share of the activation R holds at once (the largest
  // layer's), below recompute_fraction; empty: recompute_fraction (R restores it all at once).
  std::vector<double> recompute_peak_fraction;
};

struct ValidateOptions {
  MemoryModel memory{};
  // Runs the abstract execution (deadlock proof) when the static checks pass.
  bool check_deadlock = true;
  // Hopeless inputs (a program of the wrong schedule) can have a problem per action; the
  // report lists this many and counts the rest in `unlisted_problems`.
  std::size_t max_problems = 1000;
};

struct RankMemory {
  double peak_activations = 0.0;  // stored stage activations (BI..BW counts the weight fraction); M_B at one stage per rank
  double peak_bytes = 0.0;        // with MemoryModel::activation_bytes; 0 without
  std::int32_t peak_in_flight = 0;  // micro-batches whose F is done and B/BI is not
  double peak_microbatches = 0.0;   // in M_B: a stage's stored activation weighs 1 / (stages on its rank)
};

struct ValidationReport {
  std::string schedule_name;
  bool lowered = false;           // the schedule contains communication
  bool deadlock_checked = false;  // the abstract execution ran (static checks passed)
  std::vector<Problem> problems;
  std::size_t unlisted_problems = 0;
  std::vector<RankMemory> memory;                // per rank
  std::vector<std::int32_t> stage_peak_in_flight;  // per stage

  [[nodiscard]] bool ok() const noexcept { return problems.empty() && unlisted_problems == 0; }
  [[nodiscard]] bool has(ProblemKind k) const noexcept {
    return std::any_of(problems.begin(), problems.end(), [k](const Problem& p) { return p.kind == k; });
  }
};

PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const ValidationReport& r);

[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const ValidationReport& r);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/validate/impl/report.ipp"
#endif
