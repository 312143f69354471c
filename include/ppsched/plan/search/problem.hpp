// What a schedule search is asked (SearchProblem, SearchOptions) and what it answers: every
// candidate it considered (Candidate) and the winner, lowered, validated and simulated
// (SearchResult). search.hpp describes the search itself.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/plan/search/costs.hpp"
#include "ppsched/plan/search/memory.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// Bytes each rank holds whatever the schedule (parameters, gradients, optimizer state) when the
// model is cut for a placement: one entry per rank.
using PlacementStaticBytes = std::function<std::vector<double>(std::span<const std::int32_t> placement)>;

struct SearchProblem {
  std::int32_t ranks = 1;         // p
  std::int32_t microbatches = 1;  // m
  PlacementCosts costs;           // the model's costs on each placement tried (costs.hpp)
  MemoryCap cap{};                // per rank (memory.hpp); none by default
  // Optional. When given, `cap`'s total limits (MemoryCap::total_bytes, rank_total_bytes) take
  // each placement's static bytes off: a rank's activations get its total limit minus them.
  // Without it a total limit bounds the activations alone.
  PlacementStaticBytes static_bytes;
};

struct SearchOptions {
  // Interleaving depths: chunks per rank to try besides 1. 2 brings the V placements (zb-v,
  // dualpipev, the greedy V) and 2 looped chunks; v > 2 brings v looped chunks.
  std::vector<std::int32_t> chunks{1, 2, 4};
  bool fixed_families = true;
  bool greedy = true;
  bool dualpipev = true;
  // The V building blocks of vblock::candidates (schedule/controllable_memory.hpp) besides
  // V-Half and V-Min: other offsets between consecutive ranks' passes and other gaps at the
  // backward's turn, each repeated for m micro-batches. Needs 2 in `chunks` and a split backward.
  bool v_blocks = true;
  // False when the stages cannot split their backward into BI and BW: only schedules with
  // full B are built (no zero-bubble family, no dualpipev, the greedy with BW kept with BI).
  bool split_backward = true;
  // Share of the shorter of a DualPipeV F&B pair hidden under the longer (0: none, the pair
  // runs in sequence; 1: the pair takes max(T_F, T_B)). It becomes CostModel::fb_overlap of
  // every placement's costs; above 0, DualPipeV keeps its pairs (compute groups) and is
  // bounded, simulated and validated with them like every other candidate.
  double fb_overlap = 0.0;
  // At most this many simulations (0: as many as the bound needs). A limit makes the search
  // faster with costly communication at the price of exactness: candidates left unsimulated
  // are then ranked by their bound.
  std::int32_t max_simulations = 0;
  bool comm_on_compute_stream = false;  // simulate with one stream per rank (SimOptions)
  // What the winner minimises among the candidates that keep to the cap (plan/objective.hpp):
  // the makespan (the default), the longest rank span (every candidate that fits is then
  // simulated: the dependency-only run bounds no span), or the peak stored activations among
  // the candidates whose makespan is within Objective::makespan_bound.
  Objective objective;
};

enum class CandidateKind : std::uint8_t { family, dualpipev, greedy, v_block };

// How a candidate's makespan was obtained.
enum class Timing : std::uint8_t {
  bound,       // only the dependency-only bound is known: not needed to rank (or a simulation limit hit)
  simulated,   // simulate()
  exact,       // the dependency-only run, which equals simulate() with free communication
};

[[nodiscard]] constexpr std::string_view timing_name(Timing t) noexcept {
  switch (t) {
    case Timing::bound:
      return "bound";
    case Timing::simulated:
      return "simulated";
    case Timing::exact:
      return "exact";
  }
  return "?";
}

[[nodiscard]] constexpr std::string_view candidate_kind_name(CandidateKind k) noexcept {
  switch (k) {
    case CandidateKind::family:
      return "fixed family";
    case CandidateKind::dualpipev:
      return "dualpipev";
    case CandidateKind::greedy:
      return "greedy";
    case CandidateKind::v_block:
      return "v-block";
  }
  return "?";
}

// One schedule the search considered.
struct Candidate {
  std::string name;  // family name, or the greedy variant, e.g. "greedy-v mem<=16 bw=gaps"
  CandidateKind kind = CandidateKind::family;
  const FamilyInfo* family = nullptr;  // the family's record (kinds family and dualpipev); nullptr for greedy
  PlacementKind placement = PlacementKind::one_per_rank;  // placement_kind_name() prints it
  std::int32_t chunks = 1;
  bool built = false;  // false: the request is outside the family's rule, or the limit could not be met
  Timing timing = Timing::bound;
  double bound = std::numeric_limits<double>::infinity();     // dependency-only makespan
  double makespan = std::numeric_limits<double>::infinity();  // per `timing`; the bound when only that is known
  double bubble_fraction = 0.0;                               // of `makespan`: idle / (ranks x makespan)
  // The longest rank span (SimRankStats::span) once simulated; infinity while not.
  double span = std::numeric_limits<double>::infinity();
  double peak_microbatches = 0.0;                             // max over ranks, M_B
  double peak_bytes = 0.0;                                    // max over ranks, activation bytes
  bool fits = false;                                          // keeps to the cap
  std::string note;                                           // why it was not built or does not fit

  [[nodiscard]] bool timed() const noexcept { return built && timing != Timing::bound; }
};

struct SearchResult {
  Schedule schedule;                       // the winner, compute-only
  Schedule lowered;                        // lower(schedule) with the winner's costs
  CostModel costs;                         // the model's costs on the winner's placement
  SimResult simulation;                    // simulate(lowered, costs), timeline recorded
  ValidationReport validation;             // validate(lowered): ok, memory[r].peak_microbatches in M_B
  std::vector<Candidate> candidates;
  std::size_t winner = 0;  // index into candidates
  std::string why;         // one line

  [[nodiscard]] const Candidate& best() const { return candidates.at(winner); }
  // The fastest fixed family that fits (by its makespan, a bound when it was not timed: then it
  // is no faster than the winner), or null when none does.
  [[nodiscard]] const Candidate* best_family() const {
    const Candidate* best = nullptr;
    for (const Candidate& c : candidates) {
      if (c.kind == CandidateKind::family && c.fits && (best == nullptr || c.makespan < best->makespan)) best = &c;
    }
    return best;
  }
};

}  // namespace plan
}  // namespace ppsched
