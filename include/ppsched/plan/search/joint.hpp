// The joint choice: partition x schedule x chunks x micro-batch count for a global batch.
// Each way of cutting the model (PartitionChoice) answers with its costs per (placement, m),
// search_schedule runs for every pair, and the fastest step (or the best by the objective)
// wins.
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
#include "ppsched/plan/objective.hpp"
#include "ppsched/plan/search/problem.hpp"
#include "ppsched/plan/search/run.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

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
    detail::fail({"microbatch_counts_for",
          detail::concat("global batch ", global_batch, ", counts ", min_count, "..", max_count), "",
          "give a global batch of at least 1 and 1 <= min_count <= max_count"});
  }
  std::vector<std::int32_t> out;
  for (std::int32_t m = min_count; m <= std::min(max_count, global_batch); ++m) {
    if (global_batch % m == 0) out.push_back(m);
  }
  return out;
}

}  // namespace plan
namespace detail {

// Whether one (partition, m)'s winner beats another's by the objective: the makespan, the
// longest rank span, or (memory) the peak activation bytes — M_B are micro-batches of each m's
// own size, so they do not compare across counts — then the makespan.
[[nodiscard]] inline bool joint_before(const plan::Objective& objective, const plan::SearchResult& a, const plan::SearchResult& b) {
  const plan::Candidate& x = a.best();
  const plan::Candidate& y = b.best();
  if (objective.kind == plan::ObjectiveKind::span && x.span != y.span) return x.span < y.span;
  if (objective.kind == plan::ObjectiveKind::memory && x.peak_bytes != y.peak_bytes) return x.peak_bytes < y.peak_bytes;
  return x.makespan < y.makespan;
}

}  // namespace detail
namespace plan {

// Runs search_schedule for each partition and micro-batch count and keeps the fastest step
// (schedule, chunks and placement chosen by each search), or the best by
// SearchOptions::objective (detail::joint_before). Throws ppsched::error for an empty
// list of counts or partitions, a partition without costs, or when no (partition, m) has a
// schedule that keeps to the cap (each one's reason listed).
[[nodiscard]] inline JointSearchResult search_joint(const JointSearchProblem& problem,
                                                    const SearchOptions& options = {}) {
  using detail::concat;
  if (problem.microbatch_counts.empty()) {
    detail::fail({"joint schedule search", "no micro-batch count to try", "JointSearchProblem::microbatch_counts",
          "list the counts, e.g. microbatch_counts_for(global_batch, p, 8 * p)"});
  }
  if (problem.partitions.empty()) {
    detail::fail({"joint schedule search", "no partition to try", "JointSearchProblem::partitions",
          "give at least one PartitionChoice with the model's costs per (placement, m)"});
  }
  for (std::size_t i = 0; i < problem.partitions.size(); ++i) {
    if (!problem.partitions[i].costs) {
      detail::fail({"joint schedule search", detail::concat("partition '", problem.partitions[i].name, "' has no costs"),
            detail::concat("JointSearchProblem::partitions[", i, "].costs"), "give a BatchPlacementCosts callable"});
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
        choice.note = detail::concat("no schedule keeps to the cap: ", no_fit);
        reasons += detail::concat("\n  - partition '", partition.name, "', m=", m, ": ", no_fit);
      }
      out.choices.push_back(std::move(choice));
    }
  }
  if (!any) {
    detail::fail({"joint schedule search",
          detail::concat("no partition and micro-batch count has a schedule that keeps to the cap:", reasons), "",
          "raise the memory cap, use more ranks, or try more micro-batches (smaller ones)"});
  }
  out.why = detail::concat("partition '", out.partition, "', m=", out.microbatches, " with ", out.best.why);
  return out;
}

}  // namespace plan
}  // namespace ppsched
