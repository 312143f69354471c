// The bodies of <ppsched/plan/search/detail/run.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

PPSCHED_OUTLINE bool run_search(const plan::SearchProblem& problem, const plan::SearchOptions& options, plan::SearchResult& result,
                       std::string& no_fit, SearchWork* work) {
  check_search_problem(problem, options);
  const std::int32_t p = problem.ranks, m = problem.microbatches;
  std::vector<SearchPlacement> placements = search_placements(problem, options);
  // Only pairs read it; check_search_problem holds it to [0, 1] as check_cost_model would, so the
  // placements' costs need no check again (placement_costs checked the rest).
  for (SearchPlacement& sp : placements) sp.costs.fb_overlap = options.fb_overlap;
  const auto placement_index = [&](PlacementKind kind, std::int32_t v) -> std::ptrdiff_t {
    for (std::size_t i = 0; i < placements.size(); ++i) {
      if (placements[i].kind == kind && placements[i].chunks == v) return static_cast<std::ptrdiff_t>(i);
    }
    return -1;
  };

  std::vector<SearchEntry> entries;
  std::vector<plan::Candidate> rejected;  // never built: listed with the reason
  const auto add_built = [&](plan::Candidate c, Schedule s, std::size_t placement) {
    c.built = true;
    SearchEntry e{std::move(c), std::move(s), placement};
    measure_memory_of(e, placements[placement].costs, placements[placement].cap,
                      costs_checked_for(e, placements[placement], m));
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
        plan::Candidate c;
        c.name = looped ? detail::concat(f.name, " v=", v) : std::string(f.name);
        c.kind = plan::CandidateKind::family;
        c.family = &f;
        c.placement = kind;
        c.chunks = v;
        const ScheduleRequest r{p, m, v};
        const std::ptrdiff_t at = placement_index(kind, v);
        if (at < 0 || !family_accepts(f, r, options)) {
          c.note = at < 0 ? "its placement was not searched (see SearchOptions::chunks)"
                          : (!options.split_backward && f.split_backward
                                 ? "splits the backward (SearchOptions::split_backward is off)"
                                 : detail::concat("does not accept ", to_string(r), " (", f.rule, ")"));
          rejected.push_back(std::move(c));
          continue;
        }
        Schedule s = f.make(r);
        if (looped) s.name = c.name;
        // A looped family at v = 1 may build the very programs of a family before it
        // (interleaved-1f1b v=1 is 1f1b's order, interleaved-zb v=1 zb-h1's): it stays in the list
        // with its twin's figures, named as the same schedule, and is not measured again.
        std::ptrdiff_t twin = -1;
        for (std::size_t i = 0; i < entries.size() && twin < 0; ++i) {
          const SearchEntry& e = entries[i];
          if (e.same_as < 0 && e.placement == static_cast<std::size_t>(at) && e.schedule.microbatches == s.microbatches &&
              e.schedule.placement == s.placement && e.schedule.programs == s.programs) {
            twin = static_cast<std::ptrdiff_t>(i);
          }
        }
        if (twin >= 0) {
          const plan::Candidate& t = entries[static_cast<std::size_t>(twin)].candidate;
          c.built = true;
          c.peak_microbatches = t.peak_microbatches;
          c.peak_bytes = t.peak_bytes;
          c.fits = t.fits;
          c.note = detail::concat(t.note, t.note.empty() ? "" : "; ", "the same schedule as ", t.name, ", not measured again");
          SearchEntry e{std::move(c), std::move(s), static_cast<std::size_t>(at), twin};
          entries.push_back(std::move(e));
          continue;
        }
        add_built(std::move(c), std::move(s), static_cast<std::size_t>(at));
      }
    }
  }

  // DualPipeV.
  if (options.dualpipev) {
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
    const std::ptrdiff_t at = placement_index(PlacementKind::v_shape, 2);
    if (!options.split_backward) {
      c.note = "splits some backwards (SearchOptions::split_backward is off)";
      rejected.push_back(std::move(c));
    } else if (at < 0) {
      c.note = "the v-shape placement was not searched (add 2 to SearchOptions::chunks)";
      rejected.push_back(std::move(c));
    } else if (!dv.accepts(r)) {
      c.note = detail::concat("needs m >= 2p = ", 2 * p, " micro-batches");
      rejected.push_back(std::move(c));
    } else {
      // As the family builds it (its pairs overlapped by fb_overlap), and with the pairs run in
      // sequence (each action when its own input is ready): neither is always faster.
      Schedule d = dv.make(r);
      Schedule sequential = d;
      for (auto& program : sequential.programs) {
        for (Action& a : program) a.group = 0;
      }
      plan::Candidate in_sequence = c;
      in_sequence.name = detail::concat(dv.name, " sequential");
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
      plan::Candidate c;
      c.name = std::move(name);
      c.kind = plan::CandidateKind::v_block;
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
      // Each block in both orders: compacted (vblock::repeat) and as the paper's reference
      // reorders it (vblock::reorder, " reordered"); V-Half and V-Min keep the one shorter with
      // unit passes, so the other is here.
      for (const vblock::Candidate& b : vblock::candidates(p)) {
        for (const bool reordered : {false, true}) {
          std::string name = reordered ? detail::concat(b.name, " reordered") : b.name;
          Schedule s = reordered ? vblock::reorder(name, r, b.block) : vblock::repeat(name, r, b.block);
          const SearchEntry* twin = nullptr;
          for (std::size_t i = 0; i < entries.size() && twin == nullptr; ++i) {
            const SearchEntry& e = entries[i];
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
        plan::Candidate c;
        c.name = detail::concat("greedy-", sp.tag);
        c.kind = plan::CandidateKind::greedy;
        c.placement = sp.kind;
        c.chunks = sp.chunks;
        c.note = sp.unusable;
        rejected.push_back(std::move(c));
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
      for (const plan::ZbHeuristicParams& z : zb_heuristic_variants(sp.cap)) {
        plan::Candidate c;
        c.name = zb_heuristic_name(z);
        c.kind = plan::CandidateKind::greedy;
        c.placement = sp.kind;
        plan::GreedyOutcome out = plan::try_zb_heuristic_schedule(c.name, p, m, sp.costs, z);
        if (out.built) {
          for (std::size_t i = first; i < entries.size() && out.built; ++i) {
            if (entries[i].schedule.programs != out.schedule.programs) continue;
            out.built = false;
            out.problem = detail::concat("the same schedule as ", entries[i].candidate.name);
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
    if (e.same_as >= 0) continue;
    const CostModel& costs = placements[e.placement].costs;
    // Ranks that share a host (concurrent_slowdown) run slower than the dependency-only run: a bound only.
    bound_entry(e, costs, communication_is_free(costs, options) && costs.concurrent_slowdown.empty(), ws,
                costs_checked_for(e, placements[e.placement], m));
  }
  // A twin (SearchEntry::same_as) takes its timing from the entry it repeats, as its own run
  // would have given it: never ranked itself, it ranks after that entry at equal figures
  // (stable sorts, later index), so it could not have won.
  const auto copy_timing = [&entries] {
    for (SearchEntry& e : entries) {
      if (e.same_as < 0) continue;
      const plan::Candidate& t = entries[static_cast<std::size_t>(e.same_as)].candidate;
      e.candidate.timing = t.timing;
      e.candidate.bound = t.bound;
      e.candidate.makespan = t.makespan;
      e.candidate.bubble_fraction = t.bubble_fraction;
      e.candidate.span = t.span;
    }
  };
  copy_timing();
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].candidate.fits && entries[i].same_as < 0) order.push_back(i);
  }
  const auto by_bound = [&](std::size_t a, std::size_t b) {
    plan::Candidate x = entries[a].candidate, y = entries[b].candidate;
    x.makespan = x.bound;
    y.makespan = y.bound;
    return ranks_before(x, y);
  };
  std::int32_t simulations = 0;
  bool found = false;
  const plan::Objective& objective = options.objective;
  const bool by_makespan = objective.kind == plan::ObjectiveKind::makespan;
  while (!found) {
    std::stable_sort(order.begin(), order.end(), by_bound);
    double best = std::numeric_limits<double>::infinity();
    for (const std::size_t i : order) {
      if (!by_makespan) break;  // the other objectives time their candidates below
      plan::Candidate& c = entries[i].candidate;
      const double tie = 1e-9 * std::max(1.0, std::abs(best));
      if (c.bound > best + tie) break;  // neither it nor any after it can be faster
      if (c.timing == plan::Timing::bound) {
        if (options.max_simulations > 0 && simulations >= options.max_simulations) break;
        simulate_entry(entries[i], placements[entries[i].placement].costs, options, ws);
        ++simulations;
      }
      best = std::min(best, c.makespan);
    }
    if (!by_makespan) time_for_objective(entries, order, placements, options, ws, simulations);
    copy_timing();  // before the winner's own simulation, which its twin would not have had

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
      check.memory.stage_weight_fraction = memory_model_for(costs, e.schedule.stages()).stage_weight_fraction;
      ValidationReport report = validate(lowered, check, ws);
      if (!report.ok()) {
        e.candidate.fits = false;
        e.candidate.note = detail::concat("failed validation: ", report.problems.empty() ? std::string("see validate()")
                                                                                 : report.problems.front().message);
        for (SearchEntry& twin : entries) {
          if (twin.same_as != static_cast<std::ptrdiff_t>(i)) continue;
          twin.candidate.fits = false;
          twin.candidate.note = detail::concat(e.candidate.note, "; the same schedule as ", e.candidate.name, ", not measured again");
        }
        continue;
      }
      SimOptions o;
      o.comm_on_compute_stream = options.comm_on_compute_stream;
      SimResult sim = simulate(lowered, costs, o, ws);
      const bool agrees = std::abs(sim.makespan - e.candidate.makespan) <= 1e-9 * std::max(1.0, sim.makespan);
      if (e.candidate.timing == plan::Timing::exact && !agrees) {
        // The free-communication shortcut did not hold (zero-time actions are lowered with
        // tiny times, which can reorder communication): simulate as with costly communication.
        for (SearchEntry& other : entries) {
          if (other.candidate.timing == plan::Timing::exact) other.candidate.timing = plan::Timing::bound;
        }
        recheck = true;
        break;
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
      found = true;
      break;
    }
    if (!found && !recheck) break;
  }
  if (work != nullptr) {  // copied: the candidates move into `result` below
    work->placements = placements;
    work->entries = entries;
    work->rejected = rejected;
  }

  if (!found && objective.kind == plan::ObjectiveKind::memory) {
    const plan::Candidate* fastest = nullptr;
    for (const SearchEntry& e : entries) {
      if (e.candidate.fits && (fastest == nullptr || e.candidate.makespan < fastest->makespan)) fastest = &e.candidate;
    }
    if (fastest != nullptr) {
      no_fit = detail::concat("no candidate that keeps to the cap finishes within makespan ", short_number(objective.makespan_bound),
                      "; the fastest, ", fastest->name, ", takes ", short_number(fastest->makespan),
                      fastest->timing == plan::Timing::bound ? " or more" : "", ": raise the bound");
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
        detail::concat("one micro-batch alone needs 1 M_B and ", bytes_text(floor_bytes), " of activations on some rank");
    if (least_units != nullptr) {
      no_fit += detail::concat("; the least any candidate needs is ", short_number(least_units->candidate.peak_microbatches),
                       " M_B (", least_units->candidate.name, ") and ", bytes_text(least_bytes->candidate.peak_bytes),
                       " (", least_bytes->candidate.name, ")");
    }
    no_fit += ": raise the cap, or use more ranks";
    return false;
  }

  result.candidates.reserve(entries.size() + rejected.size());
  for (SearchEntry& e : entries) result.candidates.push_back(std::move(e.candidate));
  for (plan::Candidate& c : rejected) result.candidates.push_back(std::move(c));
  result.why = why_it_won(result, problem.cap, options.objective);
  return true;
}

}  // namespace detail
}  // namespace ppsched
