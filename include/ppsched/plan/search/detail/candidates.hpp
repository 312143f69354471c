// The candidates of a schedule search: the placements it tries, the greedy and zero-bubble
// heuristic variants on each, their names, which families a request admits, and the checks
// of the caller's problem (search.hpp lists the candidates).
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
#include "ppsched/plan/search/problem.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

struct SearchPlacement {
  PlacementKind kind = PlacementKind::one_per_rank;
  std::string tag;   // in greedy names: "1", "v", "looped2"
  std::int32_t chunks = 1;
  std::vector<std::int32_t> placement;
  CostModel costs;
  plan::MemoryCap cap;         // what activations may use on this placement
  std::string unusable;  // why nothing fits on it at all (static bytes over the limit), or empty
};

// A built schedule waiting to be measured.
struct SearchEntry {
  plan::Candidate candidate;
  Schedule schedule;
  std::size_t placement = 0;
  // An earlier entry with the same programs on the same placement, or -1: this one is listed
  // with that one's figures rather than measured again (run_search).
  std::ptrdiff_t same_as = -1;
};

// The cap as the messages state it: the M_B and byte caps, and the per-rank byte limits when
// they say more (each rank's activation limit with no static bytes taken off: the lowest of
// its limits; with static bytes, parameters included).
[[nodiscard]] inline std::string cap_text(const plan::MemoryCap& cap, bool with_static_bytes) {
  std::string out = detail::concat(short_number(cap.microbatches), " M_B, ",
                           bytes_text(std::min(cap.activation_bytes, cap.total_bytes)), " per rank");
  const auto p = static_cast<std::int32_t>(std::max(cap.rank_activation_bytes.size(), cap.rank_total_bytes.size()));
  if (p == 0) return out;
  const std::string included = with_static_bytes ? ", parameters included" : "";
  bool same = true;
  for (std::int32_t r = 1; r < p; ++r) same = same && cap.activation_bytes_of(r) == cap.activation_bytes_of(0);
  if (same) return detail::concat(out, "; ", bytes_text(cap.activation_bytes_of(0)), " on every rank", included);
  out += "; byte limits by rank ";
  for (std::int32_t r = 0; r < p; ++r) out += detail::concat(r == 0 ? "" : ", ", bytes_text(cap.activation_bytes_of(r)));
  return out + included;
}

inline void check_search_problem(const plan::SearchProblem& problem, const plan::SearchOptions& options) {
  const std::string subject = "schedule search";
  if (problem.ranks < 1 || problem.microbatches < 1) {
    detail::fail({subject, detail::concat("p = ", problem.ranks, " ranks and m = ", problem.microbatches, " micro-batches"),
          "SearchProblem::ranks, microbatches", "give at least one rank and one micro-batch"});
  }
  if (!problem.costs) {
    detail::fail({subject, "no costs were given", "SearchProblem::costs",
          "give a PlacementCosts callable, e.g. evenly_split(cost_model, p, m) for one cost per rank"});
  }
  check_memory_cap(problem.cap, problem.ranks);
  for (std::size_t i = 0; i < options.chunks.size(); ++i) {
    if (options.chunks[i] < 1) {
      detail::fail({subject, detail::concat("chunks per rank ", options.chunks[i], " is below 1"),
            detail::concat("SearchOptions::chunks[", i, "]"), "list interleaving depths of 1 or more"});
    }
  }
  if (!(options.fb_overlap >= 0.0 && options.fb_overlap <= 1.0)) {
    detail::fail({subject, detail::concat("fb_overlap = ", options.fb_overlap, " is outside [0, 1]"), "SearchOptions::fb_overlap",
          "give the share of the shorter of an F&B pair hidden under the longer, 0 to 1"});
  }
  if (options.max_simulations < 0) {
    detail::fail({subject, detail::concat("max_simulations = ", options.max_simulations, " is negative"),
          "SearchOptions::max_simulations", "give 0 (no limit) or a positive number of simulations"});
  }
  check_objective(options.objective, "SearchOptions::objective");
  if (!options.fixed_families && !options.greedy && !options.dualpipev && !options.v_blocks) {
    detail::fail({subject, "every kind of candidate is switched off", "SearchOptions",
          "enable fixed families, greedy, dualpipev or v_blocks"});
  }
}

// The model's costs on a placement, checked, with the caller's mistake named in context.
[[nodiscard]] inline CostModel placement_costs(const plan::SearchProblem& problem, const SearchPlacement& p) {
  CostModel c = problem.costs(p.placement);
  try {
    check_cost_model(c, static_cast<std::int32_t>(p.placement.size()), problem.microbatches);
  } catch (const error& e) {
    detail::fail(
        {detail::concat("schedule search: the costs for the ", placement_kind_name(p.kind), " placement with ", p.chunks, " chunks per rank (",
                p.placement.size(), " stages)"),
         e.what(), "SearchProblem::costs",
         "return one StageCost per virtual stage of the placement given (stages in model order), or use evenly_split"});
  }
  return c;
}

[[nodiscard]] inline std::vector<SearchPlacement> search_placements(const plan::SearchProblem& problem,
                                                                    const plan::SearchOptions& options) {
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
        detail::fail({detail::concat("schedule search: the static bytes for the ", placement_kind_name(sp.kind), " placement"),
              detail::concat("has ", fixed.size(), " entries for ", p, " ranks"), "SearchProblem::static_bytes",
              "return one entry per rank"});
      }
      // The placement's cap counts activations alone: each rank's limits less its static bytes.
      sp.cap.rank_activation_bytes.assign(static_cast<std::size_t>(p), 0.0);
      sp.cap.total_bytes = std::numeric_limits<double>::infinity();
      sp.cap.rank_total_bytes.clear();
      for (std::int32_t r = 0; r < p; ++r) {
        const double f = fixed[static_cast<std::size_t>(r)];
        if (!(f >= 0.0) || std::isinf(f)) {
          detail::fail({detail::concat("schedule search: the static bytes for the ", placement_kind_name(sp.kind), " placement"),
                detail::concat("rank ", r, " has ", f), "SearchProblem::static_bytes",
                "give finite, non-negative byte counts"});
        }
        const double left = problem.cap.activation_bytes_of(r, f);
        if (!(left > 0.0) && sp.unusable.empty()) {
          sp.unusable = detail::concat("its static bytes on rank ", r, " (", bytes_text(f), ") leave nothing of the cap of ",
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
    if (v >= 2) add(PlacementKind::looped, detail::concat("looped", v), v, looped_placement(p, v));
  }
  return out;
}

// Memory levels of the greedy, largest first: the cap (or none), and 2, 1, 1/2, 1/3 times
// 1F1B's p M_B where they are below the cap and at least the 1 M_B a micro-batch needs.
[[nodiscard]] inline std::vector<double> greedy_memory_levels(std::int32_t ranks, const plan::MemoryCap& cap) {
  const double q = ranks;
  std::vector<double> levels{cap.microbatches};
  for (const double f : {2.0, 1.0, 0.5, 1.0 / 3.0}) {
    const double level = std::ceil(f * q * 2.0 - 1e-9) / 2.0;  // whole or half M_B
    if (level >= 1.0 && level < cap.microbatches - plan::memory_slack) levels.push_back(level);
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
[[nodiscard]] inline std::vector<plan::GreedyParams> greedy_variants(const plan::SearchProblem& problem,
                                                               const plan::SearchOptions& options,
                                                               const SearchPlacement& placement) {
  std::vector<plan::GreedyParams> out;
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
  const auto add = [&](double level, plan::WeightPolicy w, bool forward_first, bool overshoot, plan::ForwardOrder order,
                       const std::vector<std::int32_t>& depth) {
    plan::GreedyParams g;
    g.limit = placement.cap;
    g.limit.microbatches = level;
    g.weights = options.split_backward ? w : plan::WeightPolicy::with_input;
    g.forward_first = forward_first;
    g.forward_may_delay_backward = overshoot;
    g.forward_order = order;
    g.warmup = depth;
    out.push_back(std::move(g));
  };
  const std::vector<plan::WeightPolicy> policies =
      options.split_backward ? std::vector<plan::WeightPolicy>{plan::WeightPolicy::fill_eagerly, plan::WeightPolicy::fill_gaps}
                             : std::vector<plan::WeightPolicy>{plan::WeightPolicy::with_input};
  for (std::size_t k = 0; k < levels.size(); ++k) {
    if (k == 0) {
      for (const auto& depth : depths) {
        for (const bool forward_first : {false, true}) {
          for (const bool overshoot : {true, false}) {
            for (const plan::WeightPolicy w : policies) {
              if (looped && forward_first && (!overshoot || w != policies.front())) continue;
              add(levels[k], w, forward_first, overshoot, plan::ForwardOrder::deepest_first, depth);
            }
          }
        }
      }
      if (looped) add(levels[k], policies.front(), false, true, plan::ForwardOrder::shallowest_first, {});
    } else {
      add(levels[k], policies.front(), false, true, plan::ForwardOrder::deepest_first, {});
      if (options.split_backward)
        add(levels[k], plan::WeightPolicy::fill_gaps, false, false, plan::ForwardOrder::deepest_first, {});
    }
  }
  return out;
}

[[nodiscard]] inline std::string greedy_name(const SearchPlacement& placement, const plan::GreedyParams& g) {
  std::string name = detail::concat("greedy-", placement.tag, " mem<=", short_number(g.limit.microbatches),
                            " bw=", plan::weight_policy_name(g.weights));
  if (g.forward_first) name += " f-first";
  if (g.forward_may_delay_backward) name += " f-eager";
  if (g.forward_order == plan::ForwardOrder::shallowest_first) name += " bfs";
  if (!g.warmup.empty())
    name += detail::concat(" warmup=", g.warmup.front() == static_cast<std::int32_t>(g.warmup.size()) ? "1f1b" : "zb-h2");
  return name;
}

// The zero-bubble heuristic's eight settings (greedy.hpp) under `cap`, the repository's order.
[[nodiscard]] inline std::vector<plan::ZbHeuristicParams> zb_heuristic_variants(const plan::MemoryCap& cap) {
  std::vector<plan::ZbHeuristicParams> out;
  for (const bool bubble : {true, false})
    for (const bool prioritize : {true, false})
      for (const bool greedy : {true, false}) out.push_back({cap, bubble, prioritize, greedy});
  return out;
}

[[nodiscard]] inline std::string zb_heuristic_name(const plan::ZbHeuristicParams& z) {
  std::string name = "zb-heuristic";
  if (z.bubble_before_first_backward) name += " warmup-bubble";
  if (z.prioritize_backward) name += " bi-first";
  if (!z.no_bubble_greedy) name += " bw-lazy";
  return name;
}

[[nodiscard]] inline bool family_accepts(const FamilyInfo& f, const ScheduleRequest& r, const plan::SearchOptions& options) {
  if (!f.training) return false;
  if (!options.split_backward && f.split_backward) return false;
  return f.accepts(r);
}

}  // namespace detail
}  // namespace ppsched
