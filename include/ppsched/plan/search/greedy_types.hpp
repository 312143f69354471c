// The types of the greedy construction (<ppsched/plan/search/greedy.hpp>, whose header comment
// describes it): its parameters, when weight gradients run, the order of ready forwards, and the
// outcome. They sit in a header of their own so that the internals in
// plan/search/detail/greedy.hpp build on them without including the public header back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// When the weight gradients run.
enum class WeightPolicy : std::uint8_t {
  with_input,    // right with the input gradient: one B, no split backward (1F1B-like)
  fill_gaps,     // deferred; in idle gaps they fit in, when memory needs room, and at the end
  fill_eagerly,  // deferred; whenever the rank would otherwise idle
};

[[nodiscard]] constexpr std::string_view weight_policy_name(WeightPolicy p) noexcept {
  switch (p) {
    case WeightPolicy::with_input:
      return "with-input";
    case WeightPolicy::fill_gaps:
      return "gaps";
    case WeightPolicy::fill_eagerly:
      return "eager";
  }
  return "?";
}

// Which ready forward a rank with several stages runs first.
enum class ForwardOrder : std::uint8_t {
  deepest_first,     // the stage nearest the loss: micro-batches finish sooner, memory frees sooner
  shallowest_first,  // breadth-first, as looped BFS
};

struct GreedyParams {
  MemoryCap limit{};  // the construction never lets a rank hold more
  // Warm-up depth: at most warmup[s] micro-batches in flight on stage s (forward done, BI
  // not yet); empty for no limit but memory. One stage per rank with p-s is 1F1B's and
  // ZB-H1's depth, with 2(p-s)-1 ZB-H2's. Entries are at least 1.
  std::vector<std::int32_t> warmup;
  WeightPolicy weights = WeightPolicy::fill_gaps;
  bool forward_may_delay_backward = false;  // run a ready forward even if a BI arrives before it ends
  // Run a ready forward the memory admits before a ready BI (the paper's steady state: each
  // stage's next forward, then its backward); by default the BI goes first.
  bool forward_first = false;
  ForwardOrder forward_order = ForwardOrder::deepest_first;
};

// The construction's result: the compute-only schedule, or why there is none (the limit is
// below what one micro-batch needs on some rank).
struct GreedyOutcome {
  bool built = false;
  Schedule schedule;
  std::string problem;
};

}  // namespace plan
}  // namespace ppsched
