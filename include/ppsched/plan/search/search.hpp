// Schedule search: the best schedule for measured, uneven costs under a per-rank memory cap.
//
// Fixed families are the floor. `search_schedule` builds, for p ranks and m micro-batches,
//   - every fixed family (gpipe, 1f1b, zb-h1, zb-h2, zb-v, the controllable-memory v-half and
//     v-min on the V, and the looped interleaved-1f1b, interleaved-zb and looped-bfs at v = 1 and
//     at each interleaving depth asked for),
//   - the V building blocks of v_block_candidates (schedule/controllable_memory.hpp), named
//     "v-block(f=..,b=..,gap=..)": other offsets between consecutive ranks' passes than V-Min's
//     and V-Half's, and other gaps at the backward's turn, trading memory for bubble; each also
//     in the order of the paper's reference implementation ("... reordered"), V-Min's and
//     V-Half's blocks included,
//   - the zero-bubble repository's heuristic on one stage per rank (greedy.hpp,
//     try_zb_heuristic_schedule), its eight settings at the cap,
//   - DualPipeV (schedule/dualpipev.hpp) twice: with its F&B pairs (compute groups) overlapped
//     by SearchOptions::fb_overlap (CostModel::fb_overlap), and "dualpipev sequential", the
//     groups dropped so that each action of a pair starts when its own input is ready,
//   - the greedy construction (greedy.hpp) on each placement — one stage per rank, the V of
//     ZB-V, v looped chunks — with BI or forward first, forwards that wait for the critical
//     path or do not, deferred BWs filling gaps or filling eagerly; on one stage per rank also
//     with 1F1B's and ZB-H2's warm-up depths, and on one stage per rank and on the V at memory
//     levels below the cap (2, 1, 1/2 and 1/3 of 1F1B's p M_B: on the V the last two are the
//     memory of V-Half and V-Min),
// asking the caller's PlacementCosts for the model's costs on each placement. Every candidate
// is timed by a dependency-only run (dependency_run.hpp), which never exceeds its simulated
// makespan: the simulator adds streams and rendezvous to the same dependencies. Candidates are
// then simulated best bound first until the next bound is no better than the best simulated
// makespan — so the winner is the fastest of all candidates by simulation, though most are
// never simulated. With free communication on a separate comm stream the bound is the
// simulated makespan itself and only the winner is simulated.
//
// The result is the fastest candidate whose peak memory keeps to the cap — lowered, validated
// and simulated — with every candidate's figures and one line on why it won. Every fixed
// family that fits is a candidate ranked the same way, so the result is never slower than the
// best of them.
//
// `search_joint` makes the choice joint — partition x schedule x chunks x micro-batch count for
// a global batch: each way of cutting the model the caller offers answers with its costs per
// (placement, m), a search runs for every pair, and the fastest step wins.
#pragma once

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

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/controllable_memory.hpp"
#include "ppsched/schedule/dualpipev.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/plan/search/costs.hpp"
#include "ppsched/plan/search/dependency_run.hpp"
#include "ppsched/plan/search/greedy.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/sim/simulate.hpp"

namespace ppsched::inline PPSCHED_MODE {

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
  // The V building blocks of v_block_candidates (schedule/controllable_memory.hpp) besides
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

namespace detail {

struct SearchPlacement {
  PlacementKind kind = PlacementKind::one_per_rank;
  std::string tag;   // in greedy names: "1", "v", "looped2"
  std::int32_t chunks = 1;
  std::vector<std::int32_t> placement;
  CostModel costs;
  MemoryCap cap;         // what activations may use on this placement
  std::string unusable;  // why nothing fits on it at all (static bytes over the limit), or empty
};

// A built schedule waiting to be measured.
struct SearchEntry {
  Candidate candidate;
  Schedule schedule;
  std::size_t placement = 0;
};

// The cap as the messages state it: the M_B and byte caps, and the per-rank byte limits when
// they say more (each rank's activation limit with no static bytes taken off: the lowest of
// its limits; with static bytes, parameters included).
[[nodiscard]] inline std::string cap_text(const MemoryCap& cap, bool with_static_bytes) {
  std::string out = concat(short_number(cap.microbatches), " M_B, ",
                           bytes_text(std::min(cap.activation_bytes, cap.total_bytes)), " per rank");
  const auto p = static_cast<std::int32_t>(std::max(cap.rank_activation_bytes.size(), cap.rank_total_bytes.size()));
  if (p == 0) return out;
  const std::string included = with_static_bytes ? ", parameters included" : "";
  bool same = true;
  for (std::int32_t r = 1; r < p; ++r) same = same && cap.activation_bytes_of(r) == cap.activation_bytes_of(0);
  if (same) return concat(out, "; ", bytes_text(cap.activation_bytes_of(0)), " on every rank", included);
  out += "; byte limits by rank ";
  for (std::int32_t r = 0; r < p; ++r) out += concat(r == 0 ? "" : ", ", bytes_text(cap.activation_bytes_of(r)));
  return out + included;
}

inline void check_search_problem(const SearchProblem& problem, const SearchOptions& options) {
  const std::string subject = "schedule search";
  if (problem.ranks < 1 || problem.microbatches < 1) {
    fail({subject, concat("p = ", problem.ranks, " ranks and m = ", problem.microbatches, " micro-batches"),
          "SearchProblem::ranks, microbatches", "give at least one rank and one micro-batch"});
  }
  if (!problem.costs) {
    fail({subject, "no costs were given", "SearchProblem::costs",
          "give a PlacementCosts callable, e.g. evenly_split(cost_model, p, m) for one cost per rank"});
  }
  check_memory_cap(problem.cap, problem.ranks);
  for (std::size_t i = 0; i < options.chunks.size(); ++i) {
    if (options.chunks[i] < 1) {
      fail({subject, concat("chunks per rank ", options.chunks[i], " is below 1"),
            concat("SearchOptions::chunks[", i, "]"), "list interleaving depths of 1 or more"});
    }
  }
  if (!(options.fb_overlap >= 0.0 && options.fb_overlap <= 1.0)) {
    fail({subject, concat("fb_overlap = ", options.fb_overlap, " is outside [0, 1]"), "SearchOptions::fb_overlap",
          "give the share of the shorter of an F&B pair hidden under the longer, 0 to 1"});
  }
  if (options.max_simulations < 0) {
    fail({subject, concat("max_simulations = ", options.max_simulations, " is negative"),
          "SearchOptions::max_simulations", "give 0 (no limit) or a positive number of simulations"});
  }
  check_objective(options.objective, "SearchOptions::objective");
  if (!options.fixed_families && !options.greedy && !options.dualpipev && !options.v_blocks) {
    fail({subject, "every kind of candidate is switched off", "SearchOptions",
          "enable fixed families, greedy, dualpipev or v_blocks"});
  }
}

// The model's costs on a placement, checked, with the caller's mistake named in context.
[[nodiscard]] inline CostModel placement_costs(const SearchProblem& problem, const SearchPlacement& p) {
  CostModel c = problem.costs(p.placement);
  try {
    check_cost_model(c, static_cast<std::int32_t>(p.placement.size()), problem.microbatches);
  } catch (const error& e) {
    fail(
        {concat("schedule search: the costs for the ", placement_kind_name(p.kind), " placement with ", p.chunks, " chunks per rank (",
                p.placement.size(), " stages)"),
         e.what(), "SearchProblem::costs",
         "return one StageCost per virtual stage of the placement given (stages in model order), or use evenly_split"});
  }
  return c;
}

[[nodiscard]] inline std::vector<SearchPlacement> search_placements(const SearchProblem& problem,
                                                                    const SearchOptions& options) {
  const std::int32_t p = problem.ranks, m = problem.microbatches;
  std::vector<std::int32_t> depths{1};
  for (const std::int32_t v : options.chunks) depths.push_back(v);
  std::sort(depths.begin(), depths.end());
  depths.erase(std::unique(depths.begin(), depths.end()), depths.end());
  std::vector<SearchPlacement> out;
  const auto add = [&](PlacementKind kind, std::string tag, std::int32_t v, std::vector<std::int32_t> placement) {
    if (3 * std::int64_t{p} * v * m > max_generated_actions) return;
    for (const SearchPlacement& q : out) {
      if (q.placement == placement && q.kind == kind) return;
    }
    SearchPlacement sp{kind, std::move(tag), v, std::move(placement), {}, problem.cap, {}};
    sp.costs = placement_costs(problem, sp);
    if (problem.static_bytes) {
      const std::vector<double> fixed = problem.static_bytes(sp.placement);
      if (fixed.size() != static_cast<std::size_t>(p)) {
        fail({concat("schedule search: the static bytes for the ", placement_kind_name(sp.kind), " placement"),
              concat("has ", fixed.size(), " entries for ", p, " ranks"), "SearchProblem::static_bytes",
              "return one entry per rank"});
      }
      // The placement's cap counts activations alone: each rank's limits less its static bytes.
      sp.cap.rank_activation_bytes.assign(static_cast<std::size_t>(p), 0.0);
      sp.cap.total_bytes = std::numeric_limits<double>::infinity();
      sp.cap.rank_total_bytes.clear();
      for (std::int32_t r = 0; r < p; ++r) {
        const double f = fixed[static_cast<std::size_t>(r)];
        if (!(f >= 0.0) || std::isinf(f)) {
          fail({concat("schedule search: the static bytes for the ", placement_kind_name(sp.kind), " placement"),
                concat("rank ", r, " has ", f), "SearchProblem::static_bytes",
                "give finite, non-negative byte counts"});
        }
        const double left = problem.cap.activation_bytes_of(r, f);
        if (!(left > 0.0) && sp.unusable.empty()) {
          sp.unusable = concat("its static bytes on rank ", r, " (", bytes_text(f), ") leave nothing of the cap of ",
                               bytes_text(problem.cap.total_bytes_of(r)), " for activations");
        }
        sp.cap.rank_activation_bytes[static_cast<std::size_t>(r)] = std::max(left, std::numeric_limits<double>::min());
      }
    }
    out.push_back(std::move(sp));
  };
  for (const std::int32_t v : depths) {
    if (v == 1) add(PlacementKind::one_per_rank, "1", 1, one_stage_per_rank_placement(p));
    if (v == 2) add(PlacementKind::v_shape, "v", 2, v_shape_placement(p));
    if (v >= 2) add(PlacementKind::looped, concat("looped", v), v, looped_placement(p, v));
  }
  return out;
}

// Memory levels of the greedy, largest first: the cap (or none), and 2, 1, 1/2, 1/3 times
// 1F1B's p M_B where they are below the cap and at least the 1 M_B a micro-batch needs.
[[nodiscard]] inline std::vector<double> greedy_memory_levels(std::int32_t ranks, const MemoryCap& cap) {
  const double q = ranks;
  std::vector<double> levels{cap.microbatches};
  for (const double f : {2.0, 1.0, 0.5, 1.0 / 3.0}) {
    const double level = std::ceil(f * q * 2.0 - 1e-9) / 2.0;  // whole or half M_B
    if (level >= 1.0 && level < cap.microbatches - memory_slack) levels.push_back(level);
  }
  std::sort(levels.begin(), levels.end(), std::greater<>());
  levels.erase(std::unique(levels.begin(), levels.end(), [](double a, double b) { return std::abs(a - b) < 1e-9; }),
               levels.end());
  return levels;
}

// The greedy variants of a placement. At the cap every combination of BI or forward first,
// forwards that wait for the critical path or not, and BWs filling gaps or filling eagerly;
// on one stage per rank also with 1F1B's and ZB-H2's warm-up depths. Below the cap (one stage
// per rank and the V, where the levels make V-Half and V-Min) the two variants that win most
// often. Looped placements add a breadth-first variant.
[[nodiscard]] inline std::vector<GreedyParams> greedy_variants(const SearchProblem& problem,
                                                               const SearchOptions& options,
                                                               const SearchPlacement& placement) {
  std::vector<GreedyParams> out;
  const std::int32_t p = problem.ranks;
  const bool one_per_rank = placement.kind == PlacementKind::one_per_rank, looped = placement.kind == PlacementKind::looped;
  std::vector<double> levels = greedy_memory_levels(p, placement.cap);
  if (looped) levels.resize(1);
  std::vector<std::vector<std::int32_t>> depths{{}};
  if (one_per_rank && p > 1) {
    std::vector<std::int32_t> one_f_one_b, zb_h2;
    for (std::int32_t s = 0; s < p; ++s) {
      one_f_one_b.push_back(p - s);
      zb_h2.push_back(2 * (p - s) - 1);
    }
    depths.push_back(std::move(one_f_one_b));
    depths.push_back(std::move(zb_h2));
  }
  const auto add = [&](double level, WeightPolicy w, bool forward_first, bool overshoot, ForwardOrder order,
                       const std::vector<std::int32_t>& depth) {
    GreedyParams g;
    g.limit = placement.cap;
    g.limit.microbatches = level;
    g.weights = options.split_backward ? w : WeightPolicy::with_input;
    g.forward_first = forward_first;
    g.forward_may_delay_backward = overshoot;
    g.forward_order = order;
    g.warmup = depth;
    out.push_back(std::move(g));
  };
  const std::vector<WeightPolicy> policies =
      options.split_backward ? std::vector<WeightPolicy>{WeightPolicy::fill_eagerly, WeightPolicy::fill_gaps}
                             : std::vector<WeightPolicy>{WeightPolicy::with_input};
  for (std::size_t k = 0; k < levels.size(); ++k) {
    if (k == 0) {
      for (const auto& depth : depths) {
        for (const bool forward_first : {false, true}) {
          for (const bool overshoot : {true, false}) {
            for (const WeightPolicy w : policies) {
              if (looped && forward_first && (!overshoot || w != policies.front())) continue;
              add(levels[k], w, forward_first, overshoot, ForwardOrder::deepest_first, depth);
            }
          }
        }
      }
      if (looped) add(levels[k], policies.front(), false, true, ForwardOrder::shallowest_first, {});
    } else {
      add(levels[k], policies.front(), false, true, ForwardOrder::deepest_first, {});
      if (options.split_backward)
        add(levels[k], WeightPolicy::fill_gaps, false, false, ForwardOrder::deepest_first, {});
    }
  }
  return out;
}

[[nodiscard]] inline std::string greedy_name(const SearchPlacement& placement, const GreedyParams& g) {
  std::string name = concat("greedy-", placement.tag, " mem<=", short_number(g.limit.microbatches),
                            " bw=", weight_policy_name(g.weights));
  if (g.forward_first) name += " f-first";
  if (g.forward_may_delay_backward) name += " f-eager";
  if (g.forward_order == ForwardOrder::shallowest_first) name += " bfs";
  if (!g.warmup.empty())
    name += concat(" warmup=", g.warmup.front() == static_cast<std::int32_t>(g.warmup.size()) ? "1f1b" : "zb-h2");
  return name;
}

// The zero-bubble heuristic's eight settings (greedy.hpp) under `cap`, the repository's order.
[[nodiscard]] inline std::vector<ZbHeuristicParams> zb_heuristic_variants(const MemoryCap& cap) {
  std::vector<ZbHeuristicParams> out;
  for (const bool bubble : {true, false})
    for (const bool prioritize : {true, false})
      for (const bool greedy : {true, false}) out.push_back({cap, bubble, prioritize, greedy});
  return out;
}

[[nodiscard]] inline std::string zb_heuristic_name(const ZbHeuristicParams& z) {
  std::string name = "zb-heuristic";
  if (z.bubble_before_first_backward) name += " warmup-bubble";
  if (z.prioritize_backward) name += " bi-first";
  if (!z.no_bubble_greedy) name += " bw-lazy";
  return name;
}

[[nodiscard]] inline bool family_accepts(const FamilyInfo& f, const ScheduleRequest& r, const SearchOptions& options) {
  if (!f.training) return false;
  if (!options.split_backward && f.split_backward) return false;
  return f.accepts(r);
}

// Fills the candidate's memory figures and whether it keeps to the cap.
inline void measure_memory_of(SearchEntry& e, const CostModel& costs, const MemoryCap& cap) {
  const PeakMemory peak = peak_memory(e.schedule, costs);
  e.candidate.peak_microbatches = peak.max_microbatches();
  e.candidate.peak_bytes = peak.max_bytes();
  const std::string excess = cap_excess(peak, cap);
  e.candidate.fits = excess.empty();
  if (!e.candidate.fits) e.candidate.note = excess;
}

[[nodiscard]] inline double longest_span(const SimResult& sim) {
  double longest = 0.0;
  for (const SimRankStats& r : sim.ranks) longest = std::max(longest, r.span);
  return longest;
}

// Simulates a candidate (its bound is already known).
inline void simulate_entry(SearchEntry& e, const CostModel& costs, const SearchOptions& options, Workspace& ws) {
  SimOptions o;
  o.record_timeline = false;
  o.comm_on_compute_stream = options.comm_on_compute_stream;
  const SimResult sim = simulate(e.schedule, costs, o, ws);
  e.candidate.makespan = sim.makespan;
  e.candidate.bubble_fraction = sim.bubble_fraction;
  e.candidate.span = longest_span(sim);
  e.candidate.timing = Timing::simulated;
}

// The dependency-only run of a candidate (its overlapped pairs included): its bound, and its
// makespan when that is exact (free communication).
inline void bound_entry(SearchEntry& e, const CostModel& costs, bool exact, Workspace& ws) {
  const DependencyRun run = run_dependencies(e.schedule, costs, ws);
  e.candidate.bound = run.makespan;
  e.candidate.makespan = run.makespan;
  e.candidate.bubble_fraction = run.bubble_fraction;
  e.candidate.timing = exact ? Timing::exact : Timing::bound;
}

// Free communication on its own stream: lowering adds no wait, so the dependency-only run is
// the simulation (docs/execution-model.md; lower.hpp).
[[nodiscard]] inline bool communication_is_free(const CostModel& c, const SearchOptions& options) {
  if (options.comm_on_compute_stream || c.link.latency != 0.0) return false;
  if (std::isinf(c.link.bandwidth)) return true;
  const auto no_bytes = [](const StageCost& s) { return s.output_bytes == 0.0; };
  return std::all_of(c.stages.begin(), c.stages.end(), no_bytes) &&
         std::all_of(c.per_microbatch.begin(), c.per_microbatch.end(), no_bytes);
}

[[nodiscard]] inline bool ranks_before(const Candidate& a, const Candidate& b) {
  constexpr double tie = 1e-9;
  const double scale = std::max({1.0, std::abs(a.makespan), std::abs(b.makespan)});
  if (a.makespan < b.makespan - tie * scale) return true;
  if (b.makespan < a.makespan - tie * scale) return false;
  if (a.peak_microbatches < b.peak_microbatches - memory_slack) return true;
  if (b.peak_microbatches < a.peak_microbatches - memory_slack) return false;
  return static_cast<int>(a.kind) < static_cast<int>(b.kind);  // a named family over a constructed one
}

// Within the memory objective's makespan bound (a candidate known only by its bound may not be).
[[nodiscard]] inline bool within_bound(const Candidate& c, const Objective& objective) {
  return objective.kind != ObjectiveKind::memory || c.makespan <= objective.makespan_bound * (1.0 + 1e-9);
}

// The order of the span and memory objectives: by the longest rank span, or, among the
// candidates within the makespan bound, by peak M_B then bytes; then as ranks_before.
[[nodiscard]] inline bool ranks_before_by(const Objective& objective, const Candidate& a, const Candidate& b) {
  if (objective.kind == ObjectiveKind::span) {
    const double scale = std::max({1.0, std::isinf(a.span) ? 0.0 : a.span, std::isinf(b.span) ? 0.0 : b.span});
    if (a.span < b.span - 1e-9 * scale) return true;
    if (b.span < a.span - 1e-9 * scale) return false;
  } else if (objective.kind == ObjectiveKind::memory) {
    const bool in_a = within_bound(a, objective), in_b = within_bound(b, objective);
    if (in_a != in_b) return in_a;
    if (a.peak_microbatches < b.peak_microbatches - memory_slack) return true;
    if (b.peak_microbatches < a.peak_microbatches - memory_slack) return false;
    if (a.peak_bytes < b.peak_bytes * (1.0 - 1e-9)) return true;
    if (b.peak_bytes < a.peak_bytes * (1.0 - 1e-9)) return false;
  }
  return ranks_before(a, b);
}

// The simulations the span and memory objectives need (the makespan's are run_search's):
// every candidate that fits for the span; for memory, the least hungry first until one is
// within the bound, and those that need as little as it.
inline void time_for_objective(std::vector<SearchEntry>& entries, const std::vector<std::size_t>& order,
                               const std::vector<SearchPlacement>& placements, const SearchOptions& options,
                               Workspace& ws, std::int32_t& simulations) {
  const Objective& objective = options.objective;
  std::vector<std::size_t> by_memory = order;
  std::stable_sort(by_memory.begin(), by_memory.end(), [&](std::size_t a, std::size_t b) {
    return entries[a].candidate.peak_microbatches < entries[b].candidate.peak_microbatches - memory_slack;
  });
  double found_memory = std::numeric_limits<double>::infinity();
  for (const std::size_t i : objective.kind == ObjectiveKind::memory ? by_memory : order) {
    Candidate& c = entries[i].candidate;
    if (objective.kind == ObjectiveKind::memory) {
      if (c.peak_microbatches > found_memory + memory_slack) break;
      if (c.bound > objective.makespan_bound * (1.0 + 1e-9)) continue;  // its makespan is at least its bound
    }
    // The span needs a simulation even where the makespan is exact (free communication).
    if (objective.kind == ObjectiveKind::span ? c.timing != Timing::simulated : c.timing == Timing::bound) {
      if (options.max_simulations > 0 && simulations >= options.max_simulations) break;
      simulate_entry(entries[i], placements[entries[i].placement].costs, options, ws);
      ++simulations;
    }
    if (objective.kind == ObjectiveKind::memory && within_bound(c, objective)) {
      found_memory = std::min(found_memory, c.peak_microbatches);
    }
  }
}

[[nodiscard]] inline std::string why_it_won(const SearchResult& r, const MemoryCap& cap, const Objective& objective) {
  const Candidate& w = r.best();
  if (objective.kind != ObjectiveKind::makespan) {
    std::size_t fitting = 0, simulated = 0;
    for (const Candidate& c : r.candidates) {
      fitting += c.built && c.fits ? 1 : 0;
      simulated += c.timing == Timing::simulated ? 1 : 0;
    }
    const bool by_span = objective.kind == ObjectiveKind::span;
    std::string line = concat(w.name, ": ", by_span ? "the shortest longest rank span" : "the least peak memory");
    if (!by_span && !std::isinf(objective.makespan_bound)) {
      line += concat(" within makespan ", short_number(objective.makespan_bound));
    }
    line += concat(" of ", fitting, " candidates that keep to the cap (", r.candidates.size(), " considered, ", simulated, " simulated), span ", short_number(w.span), " ",
                   r.costs.unit, ", makespan ", short_number(w.makespan), " ", r.costs.unit, ", peak ",
                   short_number(w.peak_microbatches), " M_B");
    if (!std::isinf(cap.microbatches)) line += concat(" of the cap ", short_number(cap.microbatches));
    return line;
  }
  std::size_t fitting = 0, simulated = 0;
  for (const Candidate& c : r.candidates) {
    fitting += c.built && c.fits ? 1 : 0;
    simulated += c.timing == Timing::simulated ? 1 : 0;
  }
  std::string line =
      concat(w.name, ": the fastest of ", fitting, " candidates that keep to the cap (", r.candidates.size(),
             " considered, ", simulated, " simulated), makespan ", short_number(w.makespan), " ", r.costs.unit,
             ", bubble ", short_number(w.bubble_fraction * 100.0), "%");
  // The winner's own pairs, not its name: "dualpipev sequential" runs the same actions ungrouped.
  const bool paired = std::any_of(r.schedule.programs.begin(), r.schedule.programs.end(), [](const auto& program) {
    return std::any_of(program.begin(), program.end(), [](const Action& a) { return a.group != 0; });
  });
  if (paired && r.costs.fb_overlap > 0.0) {
    line += concat(" with its F&B pairs overlapped (fb_overlap ", short_number(r.costs.fb_overlap), ")");
  }
  const Candidate* family = r.best_family();
  if (family == nullptr) {
    line += "; no fixed family keeps to the cap";
  } else if (family != &w) {
    line += concat("; ", short_number(detail::relative_gain(w.makespan, family->makespan) * 100.0),
                   "% faster than the best fixed family ", family->name, " (", short_number(family->makespan),
                   family->timing == Timing::bound ? " or more" : "", ")");
  } else {
    const Candidate* runner_up = nullptr;
    for (const Candidate& c : r.candidates) {
      if (&c != &w && c.built && c.fits && (runner_up == nullptr || c.makespan < runner_up->makespan)) runner_up = &c;
    }
    if (runner_up != nullptr)
      line += concat("; next best ", runner_up->name, " (", short_number(runner_up->makespan), ")");
  }
  line += concat("; peak ", short_number(w.peak_microbatches), " M_B");
  if (!std::isinf(cap.microbatches)) line += concat(" of the cap ", short_number(cap.microbatches));
  return line;
}

// The search; false with `no_fit` set when no candidate keeps to the cap.
PPSCHED_OUTLINE bool run_search(const SearchProblem& problem, const SearchOptions& options, SearchResult& result,
                       std::string& no_fit)
#if PPSCHED_OUTLINE_BODY
{
  check_search_problem(problem, options);
  const std::int32_t p = problem.ranks, m = problem.microbatches;
  std::vector<SearchPlacement> placements = search_placements(problem, options);
  for (SearchPlacement& sp : placements) sp.costs.fb_overlap = options.fb_overlap;  // only pairs read it
  const auto placement_index = [&](PlacementKind kind, std::int32_t v) -> std::ptrdiff_t {
    for (std::size_t i = 0; i < placements.size(); ++i) {
      if (placements[i].kind == kind && placements[i].chunks == v) return static_cast<std::ptrdiff_t>(i);
    }
    return -1;
  };

  std::vector<SearchEntry> entries;
  std::vector<Candidate> rejected;  // never built: listed with the reason
  const auto add_built = [&](Candidate c, Schedule s, std::size_t placement) {
    c.built = true;
    SearchEntry e{std::move(c), std::move(s), placement};
    measure_memory_of(e, placements[placement].costs, placements[placement].cap);
    if (!placements[placement].unusable.empty()) {
      e.candidate.fits = false;
      e.candidate.note = placements[placement].unusable;
    }
    entries.push_back(std::move(e));
  };

  // Fixed families, at their own placement and at each depth asked for.
  if (options.fixed_families) {
    for (const FamilyInfo& f : schedule_families) {
      if (!f.training || f.overlapped_pairs) continue;  // DualPipeV's pairs: its own kind below
      const bool looped = f.placement == PlacementKind::looped;
      std::vector<std::int32_t> depths{f.chunks_for(1)};
      if (looped) {  // v = 1 too: looped-bfs is then its own order, not GPipe's
        for (const SearchPlacement& sp : placements) {
          if (sp.kind == PlacementKind::looped) depths.push_back(sp.chunks);
        }
      }
      for (const std::int32_t v : depths) {
        // A looped family at v = 1 is placed one stage per rank.
        const PlacementKind kind = looped && v == 1 ? PlacementKind::one_per_rank : f.placement;
        Candidate c;
        c.name = looped ? concat(f.name, " v=", v) : std::string(f.name);
        c.kind = CandidateKind::family;
        c.family = &f;
        c.placement = kind;
        c.chunks = v;
        const ScheduleRequest r{p, m, v};
        const std::ptrdiff_t at = placement_index(kind, v);
        if (at < 0 || !family_accepts(f, r, options)) {
          c.note = at < 0 ? "its placement was not searched (see SearchOptions::chunks)"
                          : (!options.split_backward && f.split_backward
                                 ? "splits the backward (SearchOptions::split_backward is off)"
                                 : concat("does not accept ", to_string(r), " (", f.rule, ")"));
          rejected.push_back(std::move(c));
          continue;
        }
        Schedule s = f.make(r);
        if (looped) s.name = c.name;
        add_built(std::move(c), std::move(s), static_cast<std::size_t>(at));
      }
    }
  }

  // DualPipeV.
  if (options.dualpipev) {
    // The family whose F&B pairs overlap (DualPipeV), found by that property
    const FamilyInfo& dv = *std::find_if(schedule_families.begin(), schedule_families.end(),
                                         [](const FamilyInfo& f) { return f.overlapped_pairs; });
    Candidate c;
    c.name = std::string(dv.name);
    c.kind = CandidateKind::dualpipev;
    c.family = &dv;
    c.placement = PlacementKind::v_shape;
    c.chunks = 2;
    const ScheduleRequest r{p, m, 2};
    const std::ptrdiff_t at = placement_index(PlacementKind::v_shape, 2);
    if (!options.split_backward) {
      c.note = "splits some backwards (SearchOptions::split_backward is off)";
      rejected.push_back(std::move(c));
    } else if (at < 0) {
      c.note = "the v-shape placement was not searched (add 2 to SearchOptions::chunks)";
      rejected.push_back(std::move(c));
    } else if (!dv.accepts(r)) {
      c.note = concat("needs m >= 2p = ", 2 * p, " micro-batches");
      rejected.push_back(std::move(c));
    } else {
      // As the family builds it (its pairs overlapped by fb_overlap), and with the pairs run in
      // sequence (each action when its own input is ready): neither is always faster.
      Schedule d = dv.make(r);
      Schedule sequential = d;
      for (auto& program : sequential.programs) {
        for (Action& a : program) a.group = 0;
      }
      Candidate in_sequence = c;
      in_sequence.name = concat(dv.name, " sequential");
      sequential.name = in_sequence.name;
      add_built(std::move(c), std::move(d), static_cast<std::size_t>(at));
      add_built(std::move(in_sequence), std::move(sequential), static_cast<std::size_t>(at));
    }
  }

  // The other V building blocks. A block whose compacted schedule is one already built (V-Min,
  // V-Half, or an earlier block: several shapes can reorder to the same programs) is listed as
  // that one's twin rather than measured twice.
  if (options.v_blocks) {
    const std::ptrdiff_t at = placement_index(PlacementKind::v_shape, 2);
    const ScheduleRequest r{p, m, 2};
    const auto reject = [&](std::string name, std::string note) {
      Candidate c;
      c.name = std::move(name);
      c.kind = CandidateKind::v_block;
      c.placement = PlacementKind::v_shape;
      c.chunks = 2;
      c.note = std::move(note);
      rejected.push_back(std::move(c));
    };
    if (!options.split_backward) {
      reject("v-block", "splits the backward (SearchOptions::split_backward is off)");
    } else if (at < 0) {
      reject("v-block", "the v-shape placement was not searched (add 2 to SearchOptions::chunks)");
    } else {
      // Each block in both orders: compacted (repeat_v_block) and as the paper's reference
      // reorders it (reorder_v_block, " reordered"); V-Half and V-Min keep the one shorter with
      // unit passes, so the other is here.
      for (const VBlockCandidate& b : v_block_candidates(p)) {
        for (const bool reordered : {false, true}) {
          std::string name = reordered ? concat(b.name, " reordered") : b.name;
          Schedule s = reordered ? reorder_v_block(name, r, b.block) : repeat_v_block(name, r, b.block);
          const SearchEntry* twin = nullptr;
          for (std::size_t i = 0; i < entries.size() && twin == nullptr; ++i) {
            const SearchEntry& e = entries[i];
            if (e.placement == static_cast<std::size_t>(at) && e.schedule.programs == s.programs) twin = &e;
          }
          if (twin != nullptr) {
            reject(std::move(name), concat("the same schedule as ", twin->candidate.name));
            continue;
          }
          Candidate c;
          c.name = std::move(name);
          c.kind = CandidateKind::v_block;
          c.placement = PlacementKind::v_shape;
          c.chunks = 2;
          add_built(std::move(c), std::move(s), static_cast<std::size_t>(at));
        }
      }
    }
  }

  // Greedy variants on every placement.
  if (options.greedy) {
    for (std::size_t pi = 0; pi < placements.size(); ++pi) {
      const SearchPlacement& sp = placements[pi];
      if (!sp.unusable.empty()) {
        Candidate c;
        c.name = concat("greedy-", sp.tag);
        c.kind = CandidateKind::greedy;
        c.placement = sp.kind;
        c.chunks = sp.chunks;
        c.note = sp.unusable;
        rejected.push_back(std::move(c));
        continue;
      }
      for (const GreedyParams& g : greedy_variants(problem, options, sp)) {
        Candidate c;
        c.name = greedy_name(sp, g);
        c.kind = CandidateKind::greedy;
        c.placement = sp.kind;
        c.chunks = sp.chunks;
        GreedyOutcome out = try_greedy_schedule(c.name, p, m, sp.placement, sp.costs, g);
        if (!out.built) {
          c.note = out.problem;
          rejected.push_back(std::move(c));
          continue;
        }
        add_built(std::move(c), std::move(out.schedule), pi);
      }
    }
  }

  // The zero-bubble repository's heuristic on one stage per rank: its eight settings at the
  // cap, each distinct schedule once, so the search is never slower than it.
  if (options.greedy && options.split_backward) {
    const std::ptrdiff_t at = placement_index(PlacementKind::one_per_rank, 1);
    if (at >= 0 && placements[static_cast<std::size_t>(at)].unusable.empty()) {
      const SearchPlacement& sp = placements[static_cast<std::size_t>(at)];
      const std::size_t first = entries.size();
      for (const ZbHeuristicParams& z : zb_heuristic_variants(sp.cap)) {
        Candidate c;
        c.name = zb_heuristic_name(z);
        c.kind = CandidateKind::greedy;
        c.placement = sp.kind;
        GreedyOutcome out = try_zb_heuristic_schedule(c.name, p, m, sp.costs, z);
        if (out.built) {
          for (std::size_t i = first; i < entries.size() && out.built; ++i) {
            if (entries[i].schedule.programs != out.schedule.programs) continue;
            out.built = false;
            out.problem = concat("the same schedule as ", entries[i].candidate.name);
          }
        }
        if (!out.built) {
          c.note = out.problem;
          rejected.push_back(std::move(c));
          continue;
        }
        add_built(std::move(c), std::move(out.schedule), static_cast<std::size_t>(at));
      }
    }
  }

  // Bounds for all, then simulations best bound first until no bound can beat the best; one
  // Workspace lends every run its arrays (engine/workspace.hpp), freed when the search ends.
  Workspace ws;
  for (SearchEntry& e : entries) {
    const CostModel& costs = placements[e.placement].costs;
    bound_entry(e, costs, communication_is_free(costs, options), ws);
  }
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].candidate.fits) order.push_back(i);
  }
  const auto by_bound = [&](std::size_t a, std::size_t b) {
    Candidate x = entries[a].candidate, y = entries[b].candidate;
    x.makespan = x.bound;
    y.makespan = y.bound;
    return ranks_before(x, y);
  };
  std::int32_t simulations = 0;
  bool found = false;
  const Objective& objective = options.objective;
  const bool by_makespan = objective.kind == ObjectiveKind::makespan;
  while (!found) {
    std::stable_sort(order.begin(), order.end(), by_bound);
    double best = std::numeric_limits<double>::infinity();
    for (const std::size_t i : order) {
      if (!by_makespan) break;  // the other objectives time their candidates below
      Candidate& c = entries[i].candidate;
      const double tie = 1e-9 * std::max(1.0, std::abs(best));
      if (c.bound > best + tie) break;  // neither it nor any after it can be faster
      if (c.timing == Timing::bound) {
        if (options.max_simulations > 0 && simulations >= options.max_simulations) break;
        simulate_entry(entries[i], placements[entries[i].placement].costs, options, ws);
        ++simulations;
      }
      best = std::min(best, c.makespan);
    }
    if (!by_makespan) time_for_objective(entries, order, placements, options, ws, simulations);

    // The winner: the fastest timed candidate that fits and passes validation. Candidates with
    // only a bound rank by it (they are not faster than the best timed one, unless a
    // simulation limit cut the search short).
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return by_makespan ? ranks_before(entries[a].candidate, entries[b].candidate)
                         : ranks_before_by(objective, entries[a].candidate, entries[b].candidate);
    });
    bool recheck = false;
    for (const std::size_t i : order) {
      SearchEntry& e = entries[i];
      if (!e.candidate.fits || !within_bound(e.candidate, objective)) continue;
      const CostModel& costs = placements[e.placement].costs;
      // Kept as lower() returned it: validate() and simulate() take lowering's proof.
      LoweredSchedule lowered = lower(e.schedule, lower_options_for(costs, e.schedule.stages(), m), ws);
      ValidateOptions check;
      check.memory.weight_fraction = costs.weight_memory_fraction;
      ValidationReport report = validate(lowered, check, ws);
      if (!report.ok()) {
        e.candidate.fits = false;
        e.candidate.note = concat("failed validation: ", report.problems.empty() ? std::string("see validate()")
                                                                                 : report.problems.front().message);
        continue;
      }
      SimOptions o;
      o.comm_on_compute_stream = options.comm_on_compute_stream;
      SimResult sim = simulate(lowered, costs, o, ws);
      const bool agrees = std::abs(sim.makespan - e.candidate.makespan) <= 1e-9 * std::max(1.0, sim.makespan);
      if (e.candidate.timing == Timing::exact && !agrees) {
        // The free-communication shortcut did not hold (zero-time actions are lowered with
        // tiny times, which can reorder communication): simulate as with costly communication.
        for (SearchEntry& other : entries) {
          if (other.candidate.timing == Timing::exact) other.candidate.timing = Timing::bound;
        }
        recheck = true;
        break;
      }
      if (e.candidate.timing == Timing::bound || e.candidate.timing == Timing::exact) {
        e.candidate.makespan = sim.makespan;
        e.candidate.bubble_fraction = sim.bubble_fraction;
        e.candidate.timing = Timing::simulated;
        if (!within_bound(e.candidate, objective)) continue;  // its bound was within, its makespan is not
      }
      e.candidate.span = longest_span(sim);
      result.schedule = e.schedule;
      result.lowered = std::move(lowered).release();
      result.costs = costs;
      result.validation = std::move(report);
      result.simulation = std::move(sim);
      result.winner = i;
      found = true;
      break;
    }
    if (!found && !recheck) break;
  }

  if (!found && objective.kind == ObjectiveKind::memory) {
    const Candidate* fastest = nullptr;
    for (const SearchEntry& e : entries) {
      if (e.candidate.fits && (fastest == nullptr || e.candidate.makespan < fastest->makespan)) fastest = &e.candidate;
    }
    if (fastest != nullptr) {
      no_fit = concat("no candidate that keeps to the cap finishes within makespan ", short_number(objective.makespan_bound),
                      "; the fastest, ", fastest->name, ", takes ", short_number(fastest->makespan),
                      fastest->timing == Timing::bound ? " or more" : "", ": raise the bound");
      return false;
    }
  }
  if (!found) {
    // What the cap would have to be: the least any built candidate needs, and the floor of one
    // micro-batch through every rank's stages at once.
    const SearchEntry* least_units = nullptr;
    const SearchEntry* least_bytes = nullptr;
    for (const SearchEntry& e : entries) {
      if (least_units == nullptr || e.candidate.peak_microbatches < least_units->candidate.peak_microbatches)
        least_units = &e;
      if (least_bytes == nullptr || e.candidate.peak_bytes < least_bytes->candidate.peak_bytes) least_bytes = &e;
    }
    double floor_bytes = 0.0;
    for (const SearchPlacement& sp : placements) {
      double need = 0.0;
      for (std::int32_t mb = 0; mb < m; ++mb) {
        std::vector<double> per_rank(static_cast<std::size_t>(p), 0.0);
        for (std::size_t st = 0; st < sp.placement.size(); ++st) {
          per_rank[static_cast<std::size_t>(sp.placement[st])] +=
              stage_cost(sp.costs, static_cast<std::int32_t>(st), mb, m).activation_bytes;
        }
        need = std::max(need, *std::max_element(per_rank.begin(), per_rank.end()));
      }
      floor_bytes = &sp == &placements.front() ? need : std::min(floor_bytes, need);
    }
    no_fit =
        concat("one micro-batch alone needs 1 M_B and ", bytes_text(floor_bytes), " of activations on some rank");
    if (least_units != nullptr) {
      no_fit += concat("; the least any candidate needs is ", short_number(least_units->candidate.peak_microbatches),
                       " M_B (", least_units->candidate.name, ") and ", bytes_text(least_bytes->candidate.peak_bytes),
                       " (", least_bytes->candidate.name, ")");
    }
    no_fit += ": raise the cap, or use more ranks";
    return false;
  }

  result.candidates.reserve(entries.size() + rejected.size());
  for (SearchEntry& e : entries) result.candidates.push_back(std::move(e.candidate));
  for (Candidate& c : rejected) result.candidates.push_back(std::move(c));
  result.why = why_it_won(result, problem.cap, options.objective);
  return true;
}
#else
;
#endif

}  // namespace detail

// Searches schedules for `problem` (see the header comment) and returns the fastest one that
// keeps to the cap (or the best by SearchOptions::objective). Throws ppsched::error for unusable
// input (sizes, a cap that is not positive, costs that do not fit a placement — the message
// names the placement) and when no candidate keeps to the cap (the message gives the least
// memory any candidate needed) or, by memory, none that does finishes within the bound.
[[nodiscard]] inline SearchResult search_schedule(const SearchProblem& problem, const SearchOptions& options = {}) {
  SearchResult result;
  std::string no_fit;
  if (!detail::run_search(problem, options, result, no_fit)) {
    fail({"schedule search",
          detail::concat("no schedule keeps to the memory cap (",
                         detail::cap_text(problem.cap, static_cast<bool>(problem.static_bytes)), ")",
                         options.objective.kind == ObjectiveKind::memory && !std::isinf(options.objective.makespan_bound)
                             ? detail::concat(" and finishes within makespan ",
                                              detail::short_number(options.objective.makespan_bound))
                             : std::string()),
          detail::concat("p=", problem.ranks, ", m=", problem.microbatches), no_fit});
  }
  return result;
}

// ------------------------------------------------------------------- joint choice

// The model's costs on a placement when the global batch is cut into `microbatches`.
using BatchPlacementCosts =
    std::function<CostModel(std::span<const std::int32_t> placement, std::int32_t microbatches)>;

// One way of cutting the model into stages (the partitioner's optimum, equal layer counts,
// balanced parameters, ...): its costs per (placement, m) and, optionally, its static bytes.
struct PartitionChoice {
  std::string name;
  BatchPlacementCosts costs;
  PlacementStaticBytes static_bytes;  // optional, as in SearchProblem
};

struct JointSearchProblem {
  std::int32_t ranks = 1;
  std::vector<std::int32_t> microbatch_counts;  // the m to try, e.g. microbatch_counts_for(global_batch, ...)
  std::vector<PartitionChoice> partitions;      // at least one
  MemoryCap cap{};                              // per rank; an M_B cap counts micro-batches of each m's own size
};

// The best schedule for one (partition, m), or why there is none.
struct JointChoice {
  std::string partition;
  std::int32_t microbatches = 0;
  bool found = false;    // some schedule keeps to the cap
  std::string schedule;  // its best schedule
  double makespan = std::numeric_limits<double>::infinity();
  double span = std::numeric_limits<double>::infinity();  // the longest rank span
  double bubble_fraction = 0.0;
  double peak_microbatches = 0.0;
  std::string note;  // why none was found
};

struct JointSearchResult {
  SearchResult best;                 // the winning (partition, m)'s full result
  std::string partition;             // the winning partition
  std::int32_t microbatches = 0;     // the winning m
  std::vector<JointChoice> choices;  // one per (partition, m), partitions outer, in the order given
  std::string why;
};

// The micro-batch counts that cut `global_batch` samples evenly, at least `min_count` and at
// most `max_count` (e.g. p and 8p), smallest first.
[[nodiscard]] inline std::vector<std::int32_t> microbatch_counts_for(std::int32_t global_batch, std::int32_t min_count,
                                                                     std::int32_t max_count) {
  if (global_batch < 1 || min_count < 1 || max_count < min_count) {
    fail({"microbatch_counts_for",
          detail::concat("global batch ", global_batch, ", counts ", min_count, "..", max_count), "",
          "give a global batch of at least 1 and 1 <= min_count <= max_count"});
  }
  std::vector<std::int32_t> out;
  for (std::int32_t m = min_count; m <= std::min(max_count, global_batch); ++m) {
    if (global_batch % m == 0) out.push_back(m);
  }
  return out;
}

namespace detail {

// Whether one (partition, m)'s winner beats another's by the objective: the makespan, the
// longest rank span, or (memory) the peak activation bytes — M_B are micro-batches of each m's
// own size, so they do not compare across counts — then the makespan.
[[nodiscard]] inline bool joint_before(const Objective& objective, const SearchResult& a, const SearchResult& b) {
  const Candidate& x = a.best();
  const Candidate& y = b.best();
  if (objective.kind == ObjectiveKind::span && x.span != y.span) return x.span < y.span;
  if (objective.kind == ObjectiveKind::memory && x.peak_bytes != y.peak_bytes) return x.peak_bytes < y.peak_bytes;
  return x.makespan < y.makespan;
}

}  // namespace detail

// Runs search_schedule for each partition and micro-batch count and keeps the fastest step
// (schedule, chunks and placement chosen by each search), or the best by
// SearchOptions::objective (detail::joint_before). Throws ppsched::error for an empty
// list of counts or partitions, a partition without costs, or when no (partition, m) has a
// schedule that keeps to the cap (each one's reason listed).
[[nodiscard]] inline JointSearchResult search_joint(const JointSearchProblem& problem,
                                                    const SearchOptions& options = {}) {
  using detail::concat;
  if (problem.microbatch_counts.empty()) {
    fail({"joint schedule search", "no micro-batch count to try", "JointSearchProblem::microbatch_counts",
          "list the counts, e.g. microbatch_counts_for(global_batch, p, 8 * p)"});
  }
  if (problem.partitions.empty()) {
    fail({"joint schedule search", "no partition to try", "JointSearchProblem::partitions",
          "give at least one PartitionChoice with the model's costs per (placement, m)"});
  }
  for (std::size_t i = 0; i < problem.partitions.size(); ++i) {
    if (!problem.partitions[i].costs) {
      fail({"joint schedule search", concat("partition '", problem.partitions[i].name, "' has no costs"),
            concat("JointSearchProblem::partitions[", i, "].costs"), "give a BatchPlacementCosts callable"});
    }
  }
  JointSearchResult out;
  bool any = false;
  std::string reasons;
  for (const PartitionChoice& partition : problem.partitions) {
    for (const std::int32_t m : problem.microbatch_counts) {
      JointChoice choice;
      choice.partition = partition.name;
      choice.microbatches = m;
      SearchProblem sp;
      sp.ranks = problem.ranks;
      sp.microbatches = m;
      sp.cap = problem.cap;
      sp.static_bytes = partition.static_bytes;
      sp.costs = [&partition, m](std::span<const std::int32_t> placement) { return partition.costs(placement, m); };
      SearchResult r;
      std::string no_fit;
      if (detail::run_search(sp, options, r, no_fit)) {
        choice.found = true;
        choice.schedule = r.best().name;
        choice.makespan = r.best().makespan;
        choice.bubble_fraction = r.best().bubble_fraction;
        choice.peak_microbatches = r.best().peak_microbatches;
        choice.span = r.best().span;
        if (!any || detail::joint_before(options.objective, r, out.best)) {
          out.best = std::move(r);
          out.partition = partition.name;
          out.microbatches = m;
        }
        any = true;
      } else {
        choice.note = concat("no schedule keeps to the cap: ", no_fit);
        reasons += concat("\n  - partition '", partition.name, "', m=", m, ": ", no_fit);
      }
      out.choices.push_back(std::move(choice));
    }
  }
  if (!any) {
    fail({"joint schedule search",
          concat("no partition and micro-batch count has a schedule that keeps to the cap:", reasons), "",
          "raise the memory cap, use more ranks, or try more micro-batches (smaller ones)"});
  }
  out.why = concat("partition '", out.partition, "', m=", out.microbatches, " with ", out.best.why);
  return out;
}

}  // namespace ppsched
