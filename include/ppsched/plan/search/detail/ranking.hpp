// How a schedule search times and ranks its candidates: their memory against the cap, the
// dependency-only bound, the simulation, the order by the objective, and the line on why the
// winner won (search.hpp says when each is used).
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

#include "ppsched/error.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/schedule/controllable_memory.hpp"
#include "ppsched/schedule/dualpipev.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/plan/search/costs.hpp"
#include "ppsched/plan/search/dependency_run.hpp"
#include "ppsched/plan/search/greedy.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/plan/search/detail/candidates.hpp"
#include "ppsched/plan/search/problem.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

// Whether the candidate has the shape its placement's costs were checked for (placement_costs:
// the placement's stages, m micro-batches), so that its runs need not check them again: the
// check reads every entry of a per-micro-batch table, and ran once per run and per candidate.
[[nodiscard]] inline bool costs_checked_for(const SearchEntry& e, const SearchPlacement& placement, std::int32_t microbatches) {
  return e.schedule.placement.size() == placement.placement.size() && e.schedule.microbatches == microbatches;
}

// Fills the candidate's memory figures and whether it keeps to the cap. `checked`:
// costs_checked_for.
inline void measure_memory_of(SearchEntry& e, const CostModel& costs, const plan::MemoryCap& cap, bool checked = false) {
  const plan::PeakMemory peak = peak_memory_of(e.schedule, costs, /*check_costs=*/!checked);
  e.candidate.peak_microbatches = peak.max_microbatches();
  e.candidate.peak_bytes = peak.max_bytes();
  const std::string excess = plan::cap_excess(peak, cap);
  e.candidate.fits = excess.empty();
  if (!e.candidate.fits) e.candidate.note = excess;
}

[[nodiscard]] inline double longest_span(const SimResult& sim) {
  double longest = 0.0;
  for (const SimRankStats& r : sim.ranks) longest = std::max(longest, r.span);
  return longest;
}

// Simulates a candidate (its bound is already known).
inline void simulate_entry(SearchEntry& e, const CostModel& costs, const plan::SearchOptions& options, Workspace& ws) {
  SimOptions o;
  o.record_timeline = false;
  o.comm_on_compute_stream = options.comm_on_compute_stream;
  const SimResult sim = simulate(e.schedule, costs, o, ws);
  e.candidate.makespan = sim.makespan;
  e.candidate.bubble_fraction = sim.bubble_fraction;
  e.candidate.span = longest_span(sim);
  e.candidate.timing = plan::Timing::simulated;
}

// The dependency-only run of a candidate (its overlapped pairs included): its bound, and its
// makespan when that is exact (free communication). `checked`: costs_checked_for.
inline void bound_entry(SearchEntry& e, const CostModel& costs, bool exact, Workspace& ws, bool checked = false) {
  const plan::DependencyRun run = dependency_run(e.schedule, costs, ws, /*check_costs=*/!checked);
  e.candidate.bound = run.makespan;
  e.candidate.makespan = run.makespan;
  e.candidate.bubble_fraction = run.bubble_fraction;
  e.candidate.timing = exact ? plan::Timing::exact : plan::Timing::bound;
}

// Free communication on its own stream: lowering adds no wait, so the dependency-only run is
// the simulation (docs/execution-model.md; lower.hpp).
[[nodiscard]] inline bool communication_is_free(const CostModel& c, const plan::SearchOptions& options) {
  if (options.comm_on_compute_stream || c.link.latency != 0.0) return false;
  if (std::isinf(c.link.bandwidth)) return true;
  const auto no_bytes = [](const StageCost& s) { return s.output_bytes == 0.0; };
  return std::all_of(c.stages.begin(), c.stages.end(), no_bytes) &&
         std::all_of(c.per_microbatch.begin(), c.per_microbatch.end(), no_bytes);
}

[[nodiscard]] inline bool ranks_before(const plan::Candidate& a, const plan::Candidate& b) {
  constexpr double tie = 1e-9;
  const double scale = std::max({1.0, std::abs(a.makespan), std::abs(b.makespan)});
  if (a.makespan < b.makespan - tie * scale) return true;
  if (b.makespan < a.makespan - tie * scale) return false;
  if (a.peak_microbatches < b.peak_microbatches - plan::memory_slack) return true;
  if (b.peak_microbatches < a.peak_microbatches - plan::memory_slack) return false;
  return static_cast<int>(a.kind) < static_cast<int>(b.kind);  // a named family over a constructed one
}

// Within the memory objective's makespan bound (a candidate known only by its bound may not be).
[[nodiscard]] inline bool within_bound(const plan::Candidate& c, const plan::Objective& objective) {
  return objective.kind != plan::ObjectiveKind::memory || c.makespan <= objective.makespan_bound * (1.0 + 1e-9);
}

// The order of the span and memory objectives: by the longest rank span, or, among the
// candidates within the makespan bound, by peak M_B then bytes; then as ranks_before.
[[nodiscard]] inline bool ranks_before_by(const plan::Objective& objective, const plan::Candidate& a, const plan::Candidate& b) {
  if (objective.kind == plan::ObjectiveKind::span) {
    const double scale = std::max({1.0, std::isinf(a.span) ? 0.0 : a.span, std::isinf(b.span) ? 0.0 : b.span});
    if (a.span < b.span - 1e-9 * scale) return true;
    if (b.span < a.span - 1e-9 * scale) return false;
  } else if (objective.kind == plan::ObjectiveKind::memory) {
    const bool in_a = within_bound(a, objective), in_b = within_bound(b, objective);
    if (in_a != in_b) return in_a;
    if (a.peak_microbatches < b.peak_microbatches - plan::memory_slack) return true;
    if (b.peak_microbatches < a.peak_microbatches - plan::memory_slack) return false;
    if (a.peak_bytes < b.peak_bytes * (1.0 - 1e-9)) return true;
    if (b.peak_bytes < a.peak_bytes * (1.0 - 1e-9)) return false;
  }
  return ranks_before(a, b);
}

// The simulations the span and memory objectives need (the makespan's are run_search's):
// every candidate that fits for the span; for memory, the least hungry first until one is
// within the bound, and those that need as little as it.
inline void time_for_objective(std::vector<SearchEntry>& entries, const std::vector<std::size_t>& order,
                               const std::vector<SearchPlacement>& placements, const plan::SearchOptions& options,
                               Workspace& ws, std::int32_t& simulations) {
  const plan::Objective& objective = options.objective;
  std::vector<std::size_t> by_memory = order;
  std::stable_sort(by_memory.begin(), by_memory.end(), [&](std::size_t a, std::size_t b) {
    return entries[a].candidate.peak_microbatches < entries[b].candidate.peak_microbatches - plan::memory_slack;
  });
  double found_memory = std::numeric_limits<double>::infinity();
  for (const std::size_t i : objective.kind == plan::ObjectiveKind::memory ? by_memory : order) {
    plan::Candidate& c = entries[i].candidate;
    if (objective.kind == plan::ObjectiveKind::memory) {
      if (c.peak_microbatches > found_memory + plan::memory_slack) break;
      if (c.bound > objective.makespan_bound * (1.0 + 1e-9)) continue;  // its makespan is at least its bound
    }
    // The span needs a simulation even where the makespan is exact (free communication).
    if (objective.kind == plan::ObjectiveKind::span ? c.timing != plan::Timing::simulated : c.timing == plan::Timing::bound) {
      if (options.max_simulations > 0 && simulations >= options.max_simulations) break;
      simulate_entry(entries[i], placements[entries[i].placement].costs, options, ws);
      ++simulations;
    }
    if (objective.kind == plan::ObjectiveKind::memory && within_bound(c, objective)) {
      found_memory = std::min(found_memory, c.peak_microbatches);
    }
  }
}

[[nodiscard]] inline std::string why_it_won(const plan::SearchResult& r, const plan::MemoryCap& cap, const plan::Objective& objective) {
  const plan::Candidate& w = r.best();
  if (objective.kind != plan::ObjectiveKind::makespan) {
    std::size_t fitting = 0, simulated = 0;
    for (const plan::Candidate& c : r.candidates) {
      fitting += c.built && c.fits ? 1 : 0;
      simulated += c.timing == plan::Timing::simulated ? 1 : 0;
    }
    const bool by_span = objective.kind == plan::ObjectiveKind::span;
    std::string line = detail::concat(w.name, ": ", by_span ? "the shortest longest rank span" : "the least peak memory");
    if (!by_span && !std::isinf(objective.makespan_bound)) {
      line += detail::concat(" within makespan ", short_number(objective.makespan_bound));
    }
    line += detail::concat(" of ", fitting, " candidates that keep to the cap (", r.candidates.size(), " considered, ", simulated, " simulated), span ", short_number(w.span), " ",
                   r.costs.unit.text(), ", makespan ", short_number(w.makespan), " ", r.costs.unit.text(), ", peak ",
                   short_number(w.peak_microbatches), " M_B");
    if (!std::isinf(cap.microbatches)) line += detail::concat(" of the cap ", short_number(cap.microbatches));
    return line;
  }
  std::size_t fitting = 0, simulated = 0;
  for (const plan::Candidate& c : r.candidates) {
    fitting += c.built && c.fits ? 1 : 0;
    simulated += c.timing == plan::Timing::simulated ? 1 : 0;
  }
  std::string line =
      detail::concat(w.name, ": the fastest of ", fitting, " candidates that keep to the cap (", r.candidates.size(),
             " considered, ", simulated, " simulated), makespan ", short_number(w.makespan), " ", r.costs.unit.text(),
             ", bubble ", short_number(w.bubble_fraction * 100.0), "%");
  // The winner's own pairs, not its name: "dualpipev sequential" runs the same actions ungrouped.
  const bool paired = std::any_of(r.schedule.programs.begin(), r.schedule.programs.end(), [](const auto& program) {
    return std::any_of(program.begin(), program.end(), [](const Action& a) { return a.group != 0; });
  });
  if (paired && r.costs.fb_overlap > 0.0) {
    line += detail::concat(" with its F&B pairs overlapped (fb_overlap ", short_number(r.costs.fb_overlap), ")");
  }
  const plan::Candidate* family = r.best_family();
  if (family == nullptr) {
    line += "; no fixed family keeps to the cap";
  } else if (family != &w) {
    line += detail::concat("; ", short_number(detail::relative_gain(w.makespan, family->makespan) * 100.0),
                   "% faster than the best fixed family ", family->name, " (", short_number(family->makespan),
                   family->timing == plan::Timing::bound ? " or more" : "", ")");
  } else {
    const plan::Candidate* runner_up = nullptr;
    for (const plan::Candidate& c : r.candidates) {
      if (&c != &w && c.built && c.fits && (runner_up == nullptr || c.makespan < runner_up->makespan)) runner_up = &c;
    }
    if (runner_up != nullptr)
      line += detail::concat("; next best ", runner_up->name, " (", short_number(runner_up->makespan), ")");
  }
  line += detail::concat("; peak ", short_number(w.peak_microbatches), " M_B");
  if (!std::isinf(cap.microbatches)) line += detail::concat(" of the cap ", short_number(cap.microbatches));
  return line;
}

}  // namespace detail
}  // namespace ppsched
