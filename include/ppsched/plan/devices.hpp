// Planning N devices: split them into d replicas of a p-stage pipeline (d x p = N), choose the
// micro-batch count (the global batch is d x m micro-batches of b samples), the partition and
// the schedule, and predict each choice's step time with the all-reduce of every stage's
// gradients across its replicas (sim/data_parallel.hpp). For every p that divides N and every
// micro-batch count that divides the per-replica batch, the model is priced at that micro-batch
// size and the schedule families are compared as compare_families does; each valid training
// schedule that fits the memory cap becomes a candidate, and the fastest wins. The result lists
// the runners-up with their step times and says why the winner won: the cap, the bubble, or the
// all-reduce. docs/data-parallel.md says what the planner assumes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/plan/compare.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/sim/detail/shared_host.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/sim/data_parallel.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

struct DevicePlanOptions {
  std::string description;  // the model, one line for the report; empty: its layer count
  // Samples in the micro-batch the profile's times and activation sizes were measured for,
  // when the profile does not say (Profile::rows wins when it is set). Layers with measured
  // points are priced at each candidate size from them (layer_at_rows); the others scale
  // linearly with the micro-batch size (parameters do not).
  double profile_microbatch_size = 1.0;
  std::vector<std::int32_t> pipeline_sizes;     // p to consider; empty: every divisor of N
  std::vector<std::int32_t> microbatch_counts;  // m to consider; empty: every divisor of the per-replica batch
  std::int32_t max_microbatches = 64;           // with microbatch_counts empty, m up to this
  std::vector<std::string> families;            // empty: every family
  std::int32_t chunks = 2;                      // for the families that take any chunk count
  double optimizer_state_factor = default_optimizer_state_factor;  // bytes per parameter byte (GraphModelOptions)
  double weight_memory_fraction = 0.5;
  PartitionMethod method = PartitionMethod::optimal;
  std::optional<Interconnect> all_reduce_link;  // between replicas; absent: the profile's link
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::ring;
  double optimizer_time_per_param_byte = 0.0;  // optimizer step time per parameter byte, model unit (added to the profile's Layer::optimizer_step)
  std::size_t alternatives = 5;                // runners-up kept in DevicePlan::alternatives
};

// One way to run the step on the devices, with what it takes to run it: the schedule and the
// model's cut at this micro-batch size, so that cost_model_of(split.partition, ...) and
// lower(split.schedule, ...) give each replica's program with no re-planning.
struct DeviceSplit {
  std::int32_t pipeline = 1;      // p: stages' ranks per replica
  std::int32_t replicas = 1;      // d
  std::int32_t microbatches = 1;  // m per replica and step
  double microbatch_size = 1.0;   // samples per micro-batch
  const FamilyInfo* family = nullptr;  // the schedule's family
  std::int32_t chunks = 1;
  Schedule schedule;        // compute-only, as the family builds it for p, m and chunks
  Partition partition;  // the model cut for schedule.placement, priced at microbatch_size
  double pipeline_time = 0.0;  // one replica's makespan
  double bubble_fraction = 0.0;
  double all_reduce_longest = 0.0;  // the longest stage all-reduce
  double all_reduce_exposed = 0.0;  // what the all-reduces add to the step
  double step_time = 0.0;
  double peak_memory_bytes = 0.0;  // the fullest device: parameters with optimizer state + activations
  bool fits = true;
  std::string fit_problem;

  friend bool operator==(const DeviceSplit&, const DeviceSplit&) = default;
};

struct DevicePlan {
  std::string model;
  TimeUnit unit;  // the profile's, "unit" when it names none (as graph_model)
  std::int32_t devices = 0;
  std::int64_t global_batch = 0;
  MemoryCap cap;  // per device, as plan_devices was given it
  std::optional<DeviceSplit> chosen;
  std::vector<DeviceSplit> alternatives;  // the next fastest that fit, fastest first
  std::vector<std::string> per_pipeline;  // one line per p: its best, or why none fits
  std::string reason;                     // why `chosen`, or why nothing fits
  std::size_t evaluated = 0;              // candidates simulated

  friend bool operator==(const DevicePlan&, const DevicePlan&) = default;
};

// The simulator's costs of a split, as plan_devices priced it (`profile` and `options` as
// given to it): with split.schedule, what lower, validate, simulate and the runtime take to run
// one replica's pipeline.
[[nodiscard]] inline CostModel cost_model_of(const DeviceSplit& split, const Profile& profile,
                                             const DevicePlanOptions& options = {}) {
  PlanCostOptions o;
  o.unit = profile.time_unit.empty() ? "unit" : profile.time_unit;
  o.weight_memory_fraction = options.weight_memory_fraction;
  o.fixed_costs = profile.fixed_costs;
  // No step cost in the simulation: plan_devices builds the data-parallel step from the
  // timeline, which holds no span for it, and pays it once on top of that
  // (DeviceSplit::pipeline_time and step_time). Left in, a caller who adds the step cost to this
  // model's makespan, as plan_devices does, would count it twice.
  o.fixed_costs.step = 0.0;
  o.fixed_costs.concurrent_slowdown =
      detail::replicated_slowdown(profile.fixed_costs.concurrent_slowdown, split.pipeline, split.replicas);
  o.first_stage_backward_in_bw = profile.first_stage_backward_in_bw;
  return cost_model_of(split.partition, o);
}

// "p=2 x d=4, 8 micro-batches of 4, 1f1b: step 123.4 (pipeline 120, bubble 8.1%, all-reduce +3.4 of 10), 12 GiB"
[[nodiscard]] inline std::string to_string(const DeviceSplit& s) {
  using detail::concat;
  using detail::short_number;
  std::string out = detail::concat("p=", s.pipeline, " x d=", s.replicas, ", ", s.microbatches, " micro-batches of ",
                           short_number(s.microbatch_size), ", ", s.family != nullptr ? s.family->name : "?", s.chunks > 1 ? detail::concat(" v=", s.chunks) : "",
                           ": ");
  out += detail::concat("step ", short_number(s.step_time), " (pipeline ", short_number(s.pipeline_time), ", bubble ",
                percent_of(s.bubble_fraction), ", all-reduce +", short_number(s.all_reduce_exposed), " of ",
                short_number(s.all_reduce_longest), "), ", bytes_text(s.peak_memory_bytes));
  return s.fits ? out : out + ", does not fit: " + s.fit_problem;
}

[[nodiscard]] inline std::string to_string(const DevicePlan& p) {
  using detail::concat;
  std::string out = detail::concat(p.model, ": ", p.devices, " devices, global batch ", p.global_batch,
                           std::isinf(p.cap.total_bytes) ? "" : detail::concat(", cap ", bytes_text(p.cap.total_bytes), " per device"),
                           ", times in ", p.unit.text(), "\n");
  for (const std::string& line : p.per_pipeline) out += "  " + line + "\n";
  if (p.chosen) {
    out += "chosen: " + to_string(*p.chosen) + "\n";
    for (const DeviceSplit& a : p.alternatives) out += "  then: " + to_string(a) + "\n";
  }
  out += detail::concat(p.chosen ? "why: " : "chosen: none (", p.reason, p.chosen ? "\n" : ")\n");
  return out;
}

inline std::ostream& operator<<(std::ostream& os, const DevicePlan& p) { return os << to_string(p); }

}  // namespace plan
namespace detail {

[[nodiscard]] inline std::vector<std::int32_t> divisors(std::int64_t n, std::int64_t most) {
  std::vector<std::int32_t> out;
  for (std::int64_t k = 1; k <= n && k <= most; ++k) {
    if (n % k == 0) out.push_back(static_cast<std::int32_t>(k));
  }
  return out;
}

// Fastest first; ties (sums of the same costs in another order) to the smaller memory, then
// fewer chunks, then the shallower pipeline.
[[nodiscard]] inline bool faster_split(const plan::DeviceSplit& x, const plan::DeviceSplit& y) {
  if (std::abs(x.step_time - y.step_time) > 1e-9 * std::max(x.step_time, y.step_time)) return x.step_time < y.step_time;
  if (x.peak_memory_bytes != y.peak_memory_bytes) return x.peak_memory_bytes < y.peak_memory_bytes;
  if (x.chunks != y.chunks) return x.chunks < y.chunks;
  return x.pipeline < y.pipeline;
}

// Which of two splits explains the other's loss: memory, the bubble, or the all-reduce.
[[nodiscard]] inline std::string why_faster(const plan::DeviceSplit& win, const plan::DeviceSplit& lose) {
  const double pipeline = lose.pipeline_time - win.pipeline_time;
  const double all_reduce = lose.all_reduce_exposed - win.all_reduce_exposed;
  const std::string by = detail::concat(plan::percent_of(relative_gain(win.step_time, lose.step_time)), " faster");
  if (all_reduce >= pipeline) {
    return detail::concat(by, " than p=", lose.pipeline, " x d=", lose.replicas, ", whose all-reduce adds ",
                  short_number(lose.all_reduce_exposed), " to its step (", short_number(win.all_reduce_exposed), " here)");
  }
  return detail::concat(by, " than p=", lose.pipeline, " x d=", lose.replicas, ", whose pipeline takes ",
                short_number(lose.pipeline_time), " (bubble ", plan::percent_of(lose.bubble_fraction), ") against ",
                short_number(win.pipeline_time), " (bubble ", plan::percent_of(win.bubble_fraction), ")");
}

}  // namespace detail
namespace plan {

// Plans `devices` devices for `global_batch` samples per step of the model in `profile`, each
// device holding at most `cap.total_bytes` and the profile's device memory (either infinite or
// absent: no cap from it); `cap`'s M_B and activation limits apply to every schedule as
// compare_families applies them, and per-rank limits are refused (the pipelines differ in
// size). The byte cap reaches the partitioner: a pipeline's cut is the fastest that fits.
// The profile's devices, if it lists any, must be alike: every device runs one stage. Throws
// ppsched::error when N, the batch or an option is not usable as asked (no p divides N, no d
// divides the batch, p above N); a cap that nothing fits is a result (DevicePlan::chosen empty,
// the reason naming the smallest need).
[[nodiscard]] PPSCHED_OUTLINE DevicePlan plan_devices(const Profile& profile, std::int32_t devices, std::int64_t global_batch,
                                             const MemoryCap& cap, const DevicePlanOptions& options = {});

}  // namespace plan
}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/plan/impl/devices.ipp"
#endif
