// The bodies of <ppsched/plan/search/detail/run.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

// What the search builds before it times anything: every placement with its costs, every
// built schedule with its figures, and the candidates it could not build with the reason.
struct SearchBuild {
  std::vector<SearchPlacement> placements;
  std::int32_t microbatches = 0;
  std::vector<SearchEntry> entries;
  std::vector<plan::Candidate> rejected;  // never built: listed with the reason

  // The placement searched for `kind` at `v` chunks, or -1 when it was not searched.
  [[nodiscard]] std::ptrdiff_t placement_index(PlacementKind kind, std::int32_t v) const {
    for (std::size_t i = 0; i < placements.size(); ++i) {
      if (placements[i].kind == kind && placements[i].chunks == v) return static_cast<std::ptrdiff_t>(i);
    }
    return -1;
  }

  // A built schedule, its memory measured; on an unusable placement it does not fit, and says why.
  void add_built(plan::Candidate c, Schedule s, std::size_t placement) {
    c.built = true;
    SearchEntry e{std::move(c), std::move(s), placement};
    measure_memory_of(e, placements[placement].costs, placements[placement].cap,
                      costs_checked_for(e, placements[placement], microbatches));
    if (!placements[placement].unusable.empty()) {
      e.candidate.fits = false;
      e.candidate.note = placements[placement].unusable;
    }
    entries.push_back(std::move(e));
  }
};

// Fixed families, at their own placement and at each depth asked for.
PPSCHED_OUTLINE void build_family_candidates(SearchBuild& b, const plan::SearchProblem& problem,
                                             const plan::SearchOptions& options) {
  const std::int32_t p = problem.ranks, m = problem.microbatches;
  for (const FamilyInfo& f : schedule_families) {
    if (!f.training || f.overlapped_pairs) continue;  // DualPipeV's pairs: its own kind below
    const bool looped = f.placement == PlacementKind::looped;
    std::vector<std::int32_t> depths{f.chunks_for(1)};
    if (looped) {  // v = 1 too: looped-bfs is then its own order, not GPipe's
      for (const SearchPlacement& sp : b.placements) {
        if (sp.kind == PlacementKind::looped) depths.push_back(sp.chunks);
      }
    }
    for (const std::int32_t v : depths) {
      // A looped family at v = 1 is placed one stage per rank.
      const PlacementKind kind = looped && v == 1 ? PlacementKind::one_per_rank : f.placement;
      plan::Candidate c;
      c.name = looped ? detail::concat(f.name, " v=", v) : std::string(f.name);
      c.kind = plan::CandidateKind::family;
      c.family = &f;
      c.placement = kind;
      c.chunks = v;
      const ScheduleRequest r{p, m, v};
      const std::ptrdiff_t at = b.placement_index(kind, v);
      if (at < 0 || !family_accepts(f, r, options)) {
        c.note = at < 0 ? "its placement was not searched (see SearchOptions::chunks)"
                        : (!options.split_backward && f.split_backward
                               ? "splits the backward (SearchOptions::split_backward is off)"
                               : detail::concat("does not accept ", to_string(r), " (", f.rule, ")"));
        b.rejected.push_back(std::move(c));
        continue;
      }
      Schedule s = f.make(r);
      if (looped) s.name = c.name;
      // A looped family at v = 1 may build the very programs of a family before it
      // (interleaved-1f1b v=1 is 1f1b's order, interleaved-zb v=1 zb-h1's): it stays in the list
      // with its twin's figures, named as the same schedule, and is not measured again.
      std::ptrdiff_t twin = -1;
      for (std::size_t i = 0; i < b.entries.size() && twin < 0; ++i) {
        const SearchEntry& e = b.entries[i];
        if (e.same_as < 0 && e.placement == static_cast<std::size_t>(at) && e.schedule.microbatches == s.microbatches &&
            e.schedule.placement == s.placement && e.schedule.programs == s.programs) {
          twin = static_cast<std::ptrdiff_t>(i);
        }
      }
      if (twin >= 0) {
        const plan::Candidate& t = b.entries[static_cast<std::size_t>(twin)].candidate;
        c.built = true;
        c.peak_microbatches = t.peak_microbatches;
        c.peak_bytes = t.peak_bytes;
        c.fits = t.fits;
        c.note = detail::concat(t.note, t.note.empty() ? "" : "; ", "the same schedule as ", t.name, ", not measured again");
        SearchEntry e{std::move(c), std::move(s), static_cast<std::size_t>(at), twin};
        b.entries.push_back(std::move(e));
        continue;
      }
      b.add_built(std::move(c), std::move(s), static_cast<std::size_t>(at));
    }
  }
}

// DualPipeV: as the family builds it (its pairs overlapped by fb_overlap), and with the pairs
// run in sequence (each action when its own input is ready): neither is always faster.
PPSCHED_OUTLINE void build_dualpipev_candidates(SearchBuild& b, const plan::SearchProblem& problem,
                                                const plan::SearchOptions& options) {
  const std::int32_t p = problem.ranks, m = problem.microbatches;
  // The family whose F&B pairs overlap (DualPipeV), found by that property
  const FamilyInfo& dv = *std::find_if(schedule_families.begin(), schedule_families.end(),
                                       [](const FamilyInfo& f) { return f.overlapped_pairs; });
  plan::Candidate c;
  c.name = std::string(dv.name);
  c.kind = plan::CandidateKind::dualpipev;
  c.family = &dv;
  c.placement = PlacementKind::v_shape;
  c.chunks = 2;
  const ScheduleRequest r{p, m, 2};
  const std::ptrdiff_t at = b.placement_index(PlacementKind::v_shape, 2);
  if (!options.split_backward) {
    c.note = "splits some backwards (SearchOptions::split_backward is off)";
    b.rejected.push_back(std::move(c));
  } else if (at < 0) {
    c.note = "the v-shape placement was not searched (add 2 to SearchOptions::chunks)";
    b.rejected.push_back(std::move(c));
  } else if (!dv.accepts(r)) {
    c.note = detail::concat("needs m >= 2p = ", 2 * p, " micro-batches");
    b.rejected.push_back(std::move(c));
  } else {
    Schedule d = dv.make(r);
    Schedule sequential = d;
    for (auto& program : sequential.programs) {
      for (Action& a : program) a.group = 0;
    }
    plan::Candidate in_sequence = c;
    in_sequence.name = detail::concat(dv.name, " sequential");
    sequential.name = in_sequence.name;
    b.add_built(std::move(c), std::move(d), static_cast<std::size_t>(at));
    b.add_built(std::move(in_sequence), std::move(sequential), static_cast<std::size_t>(at));
  }
}

// The other V building blocks. A block whose compacted schedule is one already built (V-Min,
// V-Half, or an earlier block: several shapes can reorder to the same programs) is listed as
// that one's twin rather than measured twice.
PPSCHED_OUTLINE void build_v_block_candidates(SearchBuild& b, const plan::SearchProblem& problem,
                                              const plan::SearchOptions& options) {
  const std::int32_t p = problem.ranks, m = problem.microbatches;
  const std::ptrdiff_t at = b.placement_index(PlacementKind::v_shape, 2);
  const ScheduleRequest r{p, m, 2};
  const auto reject = [&](std::string name, std::string note) {
    plan::Candidate c;
    c.name = std::move(name);
    c.kind = plan::CandidateKind::v_block;
    c.placement = PlacementKind::v_shape;
    c.chunks = 2;
    c.note = std::move(note);
    b.rejected.push_back(std::move(c));
  };
  if (!options.split_backward) {
    reject("v-block", "splits the backward (SearchOptions::split_backward is off)");
    return;
  }
  if (at < 0) {
    reject("v-block", "the v-shape placement was not searched (add 2 to SearchOptions::chunks)");
    return;
  }
  // Each block in both orders: compacted (vblock::repeat) and as the paper's reference
  // reorders it (vblock::reorder, " reordered"); V-Half and V-Min keep the one shorter with
  // unit passes, so the other is here.
  for (const vblock::Candidate& block : vblock::candidates(p)) {
    for (const bool reordered : {false, true}) {
      std::string name = reordered ? detail::concat(block.name, " reordered") : block.name;
      Schedule s = reordered ? vblock::reorder(name, r, block.block) : vblock::repeat(name, r, block.block);
      const SearchEntry* twin = nullptr;
      for (std::size_t i = 0; i < b.entries.size() && twin == nullptr; ++i) {
        const SearchEntry& e = b.entries[i];
        if (e.placement == static_cast<std::size_t>(at) && e.schedule.programs == s.programs) twin = &e;
      }
      if (twin != nullptr) {
        reject(std::move(name), detail::concat("the same schedule as ", twin->candidate.name));
        continue;
      }
      plan::Candidate c;
      c.name = std::move(name);
      c.kind = plan::CandidateKind::v_block;
      c.placement = PlacementKind::v_shape;
      c.chunks = 2;
      b.add_built(std::move(c), std::move(s), static_cast<std::size_t>(at));
    }
  }
}

// Greedy variants on every placement.
PPSCHED_OUTLINE void build_greedy_candidates(SearchBuild& b, const plan::SearchProblem& problem,
                                             const plan::SearchOptions& options) {
  const std::int32_t p = problem.ranks, m = problem.microbatches;
  for (std::size_t pi = 0; pi < b.placements.size(); ++pi) {
    const SearchPlacement& sp = b.placements[pi];
    if (!sp.unusable.empty()) {
      plan::Candidate c;
      c.name = detail::concat("greedy-", sp.tag);
      c.kind = plan::CandidateKind::greedy;
      c.placement = sp.kind;
      c.chunks = sp.chunks;
      c.note = sp.unusable;
      b.rejected.push_back(std::move(c));
      continue;
    }
    for (const plan::GreedyParams& g : greedy_variants(problem, options, sp)) {
      plan::Candidate c;
      c.name = greedy_name(sp, g);
      c.kind = plan::CandidateKind::greedy;
      c.placement = sp.kind;
      c.chunks = sp.chunks;
      plan::GreedyOutcome out = plan::try_greedy_schedule(c.name, p, m, sp.placement, sp.costs, g);
      if (!out.built) {
        c.note = out.problem;
        b.rejected.push_back(std::move(c));
        continue;
      }
      b.add_built(std::move(c), std::move(out.schedule), pi);
    }
  }
}

// The zero-bubble repository's heuristic on one stage per rank: its eight settings at the
// cap, each distinct schedule once, so the search is never slower than it.
PPSCHED_OUTLINE void build_zb_heuristic_candidates(SearchBuild& b, const plan::SearchProblem& problem) {
  const std::int32_t p = problem.ranks, m = problem.microbatches;
  const std::ptrdiff_t at = b.placement_index(PlacementKind::one_per_rank, 1);
  if (at < 0 || !b.placements[static_cast<std::size_t>(at)].unusable.empty()) return;
  const SearchPlacement& sp = b.placements[static_cast<std::size_t>(at)];
  const std::size_t first = b.entries.size();
  for (const plan::ZbHeuristicParams& z : zb_heuristic_variants(sp.cap)) {
    plan::Candidate c;
    c.name = zb_heuristic_name(z);
    c.kind = plan::CandidateKind::greedy;
    c.placement = sp.kind;
    plan::GreedyOutcome out = plan::try_zb_heuristic_schedule(c.name, p, m, sp.costs, z);
    if (out.built) {
      for (std::size_t i = first; i < b.entries.size() && out.built; ++i) {
        if (b.entries[i].schedule.programs != out.schedule.programs) continue;
        out.built = false;
        out.problem = detail::concat("the same schedule as ", b.entries[i].candidate.name);
      }
    }
    if (!out.built) {
      c.note = out.problem;
      b.rejected.push_back(std::move(c));
      continue;
    }
    b.add_built(std::move(c), std::move(out.schedule), static_cast<std::size_t>(at));
  }
}

// A dependency-only bound for every entry but the twins.
PPSCHED_OUTLINE void bound_entries(SearchBuild& b, const plan::SearchOptions& options, Workspace& ws) {
  for (SearchEntry& e : b.entries) {
    if (e.same_as >= 0) continue;
    const CostModel& costs = b.placements[e.placement].costs;
    // Ranks that share a host (concurrent_slowdown) run slower than the dependency-only run: a bound only.
    bound_entry(e, costs, communication_is_free(costs, options) && costs.fixed_costs.concurrent_slowdown.empty(), ws,
                costs_checked_for(e, b.placements[e.placement], b.microbatches));
  }
}

// A twin (SearchEntry::same_as) takes its timing from the entry it repeats, as its own run
// would have given it: never ranked itself, it ranks after that entry at equal figures
// (stable sorts, later index), so it could not have won.
PPSCHED_OUTLINE void copy_twin_timing(std::vector<SearchEntry>& entries) {
  for (SearchEntry& e : entries) {
    if (e.same_as < 0) continue;
    const plan::Candidate& t = entries[static_cast<std::size_t>(e.same_as)].candidate;
    e.candidate.timing = t.timing;
    e.candidate.bound = t.bound;
    e.candidate.makespan = t.makespan;
    e.candidate.bubble_fraction = t.bubble_fraction;
    e.candidate.span = t.span;
  }
}

// Simulations in `order` (best bound first) until no bound can beat the best makespan, or
// the simulation limit is reached.
PPSCHED_OUTLINE void simulate_while_bound_can_win(SearchBuild& b, const std::vector<std::size_t>& order,
                                                  const plan::SearchOptions& options, Workspace& ws,
                                                  std::int32_t& simulations) {
  double best = std::numeric_limits<double>::infinity();
  for (const std::size_t i : order) {
    plan::Candidate& c = b.entries[i].candidate;
    const double tie = 1e-9 * std::max(1.0, std::abs(best));
    if (c.bound > best + tie) break;  // neither it nor any after it can be faster
    if (c.timing == plan::Timing::bound) {
      if (options.max_simulations > 0 && simulations >= options.max_simulations) break;
      simulate_entry(b.entries[i], b.placements[b.entries[i].placement].costs, options, ws);
      ++simulations;
    }
    best = std::min(best, c.makespan);
  }
}

// An entry that failed validation does not fit, nor do its twins.
PPSCHED_OUTLINE void reject_invalid(std::vector<SearchEntry>& entries, std::size_t i, const ValidationReport& report) {
  SearchEntry& e = entries[i];
  e.candidate.fits = false;
  e.candidate.note = detail::concat("failed validation: ", report.problems.empty() ? std::string("see validate()")
                                                                           : report.problems.front().message);
  for (SearchEntry& twin : entries) {
    if (twin.same_as != static_cast<std::ptrdiff_t>(i)) continue;
    twin.candidate.fits = false;
    twin.candidate.note = detail::concat(e.candidate.note, "; the same schedule as ", e.candidate.name, ", not measured again");
  }
}

enum class WinnerPick : std::uint8_t { found, recheck, none };

// The winner: the fastest timed candidate in `order` (ranked) that fits and passes validation,
// lowered, validated and simulated into `result`. Candidates with only a bound rank by it (they
// are not faster than the best timed one, unless a simulation limit cut the search short).
// `recheck` when an exact timing proved wrong: every exact timing is then a bound only.
PPSCHED_OUTLINE WinnerPick take_winner(SearchBuild& b, const std::vector<std::size_t>& order, const plan::SearchOptions& options,
                                       Workspace& ws, plan::SearchResult& result) {
  const plan::Objective& objective = options.objective;
  for (const std::size_t i : order) {
    SearchEntry& e = b.entries[i];
    if (!e.candidate.fits || !within_bound(e.candidate, objective)) continue;
    const CostModel& costs = b.placements[e.placement].costs;
    // Kept as lower() returned it: validate() and simulate() take lowering's proof.
    LoweredSchedule lowered = lower(e.schedule, lower_options_for(costs, e.schedule.stages(), b.microbatches), ws);
    ValidateOptions check;
    check.memory.weight_fraction = costs.weight_memory_fraction;
    check.memory.stage_weight_fraction = memory_model_for(costs, e.schedule.stages()).stage_weight_fraction;
    ValidationReport report = validate(lowered, check, ws);
    if (!report.ok()) {
      reject_invalid(b.entries, i, report);
      continue;
    }
    SimOptions o;
    o.comm_on_compute_stream = options.comm_on_compute_stream;
    SimResult sim = simulate(lowered, costs, o, ws);
    const bool agrees = std::abs(sim.makespan - e.candidate.makespan) <= 1e-9 * std::max(1.0, sim.makespan);
    if (e.candidate.timing == plan::Timing::exact && !agrees) {
      // The free-communication shortcut did not hold (zero-time actions are lowered with
      // tiny times, which can reorder communication): simulate as with costly communication.
      for (SearchEntry& other : b.entries) {
        if (other.candidate.timing == plan::Timing::exact) other.candidate.timing = plan::Timing::bound;
      }
      return WinnerPick::recheck;
    }
    if (e.candidate.timing == plan::Timing::bound || e.candidate.timing == plan::Timing::exact) {
      e.candidate.makespan = sim.makespan;
      e.candidate.bubble_fraction = sim.bubble_fraction;
      e.candidate.timing = plan::Timing::simulated;
      if (!within_bound(e.candidate, objective)) continue;  // its bound was within, its makespan is not
    }
    e.candidate.span = longest_span(sim);
    result.schedule = e.schedule;
    result.lowered = std::move(lowered).release();
    result.costs = costs;
    result.validation = std::move(report);
    result.simulation = std::move(sim);
    result.winner = i;
    return WinnerPick::found;
  }
  return WinnerPick::none;
}

// Bounds for all, then simulations best bound first until no bound can beat the best, then
// the winner; again when an exact timing proved wrong. One Workspace lends every run its
// arrays (engine/workspace.hpp), freed when the search ends.
PPSCHED_OUTLINE bool time_and_pick(SearchBuild& b, const plan::SearchOptions& options, plan::SearchResult& result) {
  Workspace ws;
  bound_entries(b, options, ws);
  copy_twin_timing(b.entries);
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < b.entries.size(); ++i) {
    if (b.entries[i].candidate.fits && b.entries[i].same_as < 0) order.push_back(i);
  }
  const auto by_bound = [&](std::size_t x_at, std::size_t y_at) {
    plan::Candidate x = b.entries[x_at].candidate, y = b.entries[y_at].candidate;
    x.makespan = x.bound;
    y.makespan = y.bound;
    return ranks_before(x, y);
  };
  std::int32_t simulations = 0;
  const plan::Objective& objective = options.objective;
  const bool by_makespan = objective.kind == plan::ObjectiveKind::makespan;
  for (;;) {
    std::stable_sort(order.begin(), order.end(), by_bound);
    if (by_makespan) {
      simulate_while_bound_can_win(b, order, options, ws, simulations);
    } else {
      time_for_objective(b.entries, order, b.placements, options, ws, simulations);
    }
    copy_twin_timing(b.entries);  // before the winner's own simulation, which its twin would not have had
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      return by_makespan ? ranks_before(b.entries[x].candidate, b.entries[y].candidate)
                         : ranks_before_by(objective, b.entries[x].candidate, b.entries[y].candidate);
    });
    const WinnerPick pick = take_winner(b, order, options, ws, result);
    if (pick != WinnerPick::recheck) return pick == WinnerPick::found;
  }
}

// Why nothing won under the memory objective when some candidate keeps to the cap: none
// finishes within the makespan bound. False (no_fit set) in that case.
PPSCHED_OUTLINE bool explain_makespan_bound(const SearchBuild& b, const plan::Objective& objective, std::string& no_fit) {
  const plan::Candidate* fastest = nullptr;
  for (const SearchEntry& e : b.entries) {
    if (e.candidate.fits && (fastest == nullptr || e.candidate.makespan < fastest->makespan)) fastest = &e.candidate;
  }
  if (fastest == nullptr) return true;
  no_fit = detail::concat("no candidate that keeps to the cap finishes within makespan ", short_number(objective.makespan_bound),
                  "; the fastest, ", fastest->name, ", takes ", short_number(fastest->makespan),
                  fastest->timing == plan::Timing::bound ? " or more" : "", ": raise the bound");
  return false;
}

// What the cap would have to be: the least any built candidate needs, and the floor of one
// micro-batch through every rank's stages at once.
PPSCHED_OUTLINE std::string explain_cap(const SearchBuild& b, std::int32_t p) {
  const std::int32_t m = b.microbatches;
  const SearchEntry* least_units = nullptr;
  const SearchEntry* least_bytes = nullptr;
  for (const SearchEntry& e : b.entries) {
    if (least_units == nullptr || e.candidate.peak_microbatches < least_units->candidate.peak_microbatches)
      least_units = &e;
    if (least_bytes == nullptr || e.candidate.peak_bytes < least_bytes->candidate.peak_bytes) least_bytes = &e;
  }
  double floor_bytes = 0.0;
  for (const SearchPlacement& sp : b.placements) {
    double need = 0.0;
    for (std::int32_t mb = 0; mb < m; ++mb) {
      std::vector<double> per_rank(static_cast<std::size_t>(p), 0.0);
      for (std::size_t st = 0; st < sp.placement.size(); ++st) {
        per_rank[static_cast<std::size_t>(sp.placement[st])] +=
            stage_cost(sp.costs, static_cast<std::int32_t>(st), mb, m).activation_bytes;
      }
      need = std::max(need, *std::max_element(per_rank.begin(), per_rank.end()));
    }
    floor_bytes = &sp == &b.placements.front() ? need : std::min(floor_bytes, need);
  }
  std::string no_fit =
      detail::concat("one micro-batch alone needs 1 M_B and ", bytes_text(floor_bytes), " of activations on some rank");
  if (least_units != nullptr) {
    no_fit += detail::concat("; the least any candidate needs is ", short_number(least_units->candidate.peak_microbatches),
                     " M_B (", least_units->candidate.name, ") and ", bytes_text(least_bytes->candidate.peak_bytes),
                     " (", least_bytes->candidate.name, ")");
  }
  no_fit += ": raise the cap, or use more ranks";
  return no_fit;
}

PPSCHED_OUTLINE bool run_search(const plan::SearchProblem& problem, const plan::SearchOptions& options, plan::SearchResult& result,
                       std::string& no_fit, SearchWork* work) {
  check_search_problem(problem, options);
  SearchBuild b;
  b.placements = search_placements(problem, options);
  b.microbatches = problem.microbatches;
  // Only pairs read it; check_search_problem holds it to [0, 1] as check_cost_model would, so the
  // placements' costs need no check again (placement_costs checked the rest).
  for (SearchPlacement& sp : b.placements) sp.costs.fb_overlap = options.fb_overlap;

  if (options.fixed_families) build_family_candidates(b, problem, options);
  if (options.dualpipev) build_dualpipev_candidates(b, problem, options);
  if (options.v_blocks) build_v_block_candidates(b, problem, options);
  if (options.greedy) build_greedy_candidates(b, problem, options);
  if (options.greedy && options.split_backward) build_zb_heuristic_candidates(b, problem);

  const bool found = time_and_pick(b, options, result);
  if (work != nullptr) {  // copied: the candidates move into `result` below
    work->placements = b.placements;
    work->entries = b.entries;
    work->rejected = b.rejected;
  }
  if (!found && options.objective.kind == plan::ObjectiveKind::memory && !explain_makespan_bound(b, options.objective, no_fit)) {
    return false;
  }
  if (!found) {
    no_fit = explain_cap(b, problem.ranks);
    return false;
  }

  result.candidates.reserve(b.entries.size() + b.rejected.size());
  for (SearchEntry& e : b.entries) result.candidates.push_back(std::move(e.candidate));
  for (plan::Candidate& c : b.rejected) result.candidates.push_back(std::move(c));
  result.why = why_it_won(result, problem.cap, options.objective);
  return true;
}

}  // namespace detail
}  // namespace ppsched
