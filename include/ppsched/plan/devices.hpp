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
  double optimizer_time_per_param_byte = 0.0;  // optimizer step time per parameter byte, model unit
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
  PartitionPlan partition;  // the model cut for schedule.placement, priced at microbatch_size
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
  std::string unit;
  std::int32_t devices = 0;
  std::int64_t global_batch = 0;
  std::optional<double> memory_cap_bytes;
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
  o.action_overhead = profile.action_overhead;
  o.transfer_overhead = profile.transfer_overhead;
  o.concurrent_slowdown = detail::replicated_slowdown(profile.concurrent_slowdown, split.pipeline, split.replicas);
  return cost_model_of(split.partition, o);
}

// "p=2 x d=4, 8 micro-batches of 4, 1f1b: step 123.4 (pipeline 120, bubble 8.1%, all-reduce +3.4 of 10), 12 GiB"
[[nodiscard]] inline std::string to_string(const DeviceSplit& s) {
  using detail::concat;
  using detail::short_number;
  std::string out = concat("p=", s.pipeline, " x d=", s.replicas, ", ", s.microbatches, " micro-batches of ",
                           short_number(s.microbatch_size), ", ", s.family != nullptr ? s.family->name : "?", s.chunks > 1 ? concat(" v=", s.chunks) : "",
                           ": ");
  out += concat("step ", short_number(s.step_time), " (pipeline ", short_number(s.pipeline_time), ", bubble ",
                percent_of(s.bubble_fraction), ", all-reduce +", short_number(s.all_reduce_exposed), " of ",
                short_number(s.all_reduce_longest), "), ", bytes_text(s.peak_memory_bytes));
  return s.fits ? out : out + ", does not fit: " + s.fit_problem;
}

[[nodiscard]] inline std::string to_string(const DevicePlan& p) {
  using detail::concat;
  std::string out = concat(p.model, ": ", p.devices, " devices, global batch ", p.global_batch,
                           p.memory_cap_bytes ? concat(", cap ", bytes_text(*p.memory_cap_bytes), " per device") : "",
                           ", times in ", p.unit, "\n");
  for (const std::string& line : p.per_pipeline) out += "  " + line + "\n";
  if (p.chosen) {
    out += "chosen: " + to_string(*p.chosen) + "\n";
    for (const DeviceSplit& a : p.alternatives) out += "  then: " + to_string(a) + "\n";
  }
  out += concat(p.chosen ? "why: " : "chosen: none (", p.reason, p.chosen ? "\n" : ")\n");
  return out;
}

inline std::ostream& operator<<(std::ostream& os, const DevicePlan& p) { return os << to_string(p); }

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
[[nodiscard]] inline bool faster_split(const DeviceSplit& x, const DeviceSplit& y) {
  if (std::abs(x.step_time - y.step_time) > 1e-9 * std::max(x.step_time, y.step_time)) return x.step_time < y.step_time;
  if (x.peak_memory_bytes != y.peak_memory_bytes) return x.peak_memory_bytes < y.peak_memory_bytes;
  if (x.chunks != y.chunks) return x.chunks < y.chunks;
  return x.pipeline < y.pipeline;
}

// Which of two splits explains the other's loss: memory, the bubble, or the all-reduce.
[[nodiscard]] inline std::string why_faster(const DeviceSplit& win, const DeviceSplit& lose) {
  const double pipeline = lose.pipeline_time - win.pipeline_time;
  const double all_reduce = lose.all_reduce_exposed - win.all_reduce_exposed;
  const std::string by = concat(percent_of(relative_gain(win.step_time, lose.step_time)), " faster");
  if (all_reduce >= pipeline) {
    return concat(by, " than p=", lose.pipeline, " x d=", lose.replicas, ", whose all-reduce adds ",
                  short_number(lose.all_reduce_exposed), " to its step (", short_number(win.all_reduce_exposed), " here)");
  }
  return concat(by, " than p=", lose.pipeline, " x d=", lose.replicas, ", whose pipeline takes ",
                short_number(lose.pipeline_time), " (bubble ", percent_of(lose.bubble_fraction), ") against ",
                short_number(win.pipeline_time), " (bubble ", percent_of(win.bubble_fraction), ")");
}

}  // namespace detail

// Plans `devices` devices for `global_batch` samples per step of the model in `profile`, each
// device holding at most `memory_cap_bytes` and the profile's device memory (either absent: no
// cap from it). The cap reaches the partitioner: a pipeline's cut is the fastest that fits.
// The profile's devices, if it lists any, must be alike: every device runs one stage. Throws
// ppsched::error when N, the batch or an option is not usable as asked (no p divides N, no d
// divides the batch, p above N); a cap that nothing fits is a result (DevicePlan::chosen empty,
// the reason naming the smallest need).
[[nodiscard]] PPSCHED_OUTLINE DevicePlan plan_devices(const Profile& profile, std::int32_t devices, std::int64_t global_batch,
                                             std::optional<double> memory_cap_bytes, const DevicePlanOptions& options = {})
#if PPSCHED_OUTLINE_BODY
{
  using detail::concat;
  const std::string who = "plan_devices";
  if (devices < 1) fail({who, concat("devices = ", devices), "devices", "give at least one device"});
  if (global_batch < 1) fail({who, concat("global batch = ", global_batch), "global_batch", "give at least one sample per step"});
  if (memory_cap_bytes && !(*memory_cap_bytes > 0.0 && *memory_cap_bytes <= std::numeric_limits<double>::max())) {
    fail({who, concat("a memory cap of ", *memory_cap_bytes), "memory_cap_bytes", "give a finite cap > 0, or none"});
  }
  if (!(options.profile_microbatch_size > 0.0 && options.profile_microbatch_size <= std::numeric_limits<double>::max())) {
    fail({who, concat("profile_microbatch_size is ", options.profile_microbatch_size),
          "DevicePlanOptions::profile_microbatch_size", "give the samples the profile's micro-batch holds, > 0"});
  }
  if (!(options.optimizer_time_per_param_byte >= 0.0 &&
        options.optimizer_time_per_param_byte <= std::numeric_limits<double>::max())) {
    fail({who, concat("optimizer_time_per_param_byte is ", options.optimizer_time_per_param_byte),
          "DevicePlanOptions::optimizer_time_per_param_byte", "give a finite time >= 0"});
  }
  if (options.max_microbatches < 1) {
    fail({who, concat("max_microbatches = ", options.max_microbatches), "DevicePlanOptions::max_microbatches",
          "give at least 1"});
  }
  for (std::size_t i = 1; i < profile.devices.size(); ++i) {
    if (!(profile.devices[i] == profile.devices.front())) {
      fail({who, concat("the profile's devices differ (device ", i, " is not like device 0)"), "Profile::devices",
            "list one device for all, or alike devices: plan_devices places any stage on any device"});
    }
  }
  Profile machine = profile;
  if (!machine.devices.empty()) machine.devices.resize(1);
  // The cap each device keeps to: the smaller of the cap asked for and the profile's device
  // memory. It goes to the partitioner, so that the one-stage-per-rank cut is the fastest one
  // that fits (not the fastest one, found too big afterwards); where no cut fits, the
  // time-optimal cut is priced instead and found not to fit (a result, not an error).
  const double no_cap = std::numeric_limits<double>::infinity();
  const double device_cap =
      std::min(machine.devices.empty() ? no_cap : machine.devices.front().memory_bytes, memory_cap_bytes.value_or(no_cap));
  Profile any_memory = machine;  // the same machine without memory caps
  if (device_cap < no_cap) {
    if (machine.devices.empty()) machine.devices.push_back(Device{});
    machine.devices.front().memory_bytes = device_cap;
    any_memory.devices = machine.devices;
    any_memory.devices.front().memory_bytes = no_cap;
  }
  const AllReduceModel link_model{1, options.all_reduce_link.value_or(profile.link), options.algorithm};
  detail::check_all_reduce_model(link_model);

  std::vector<std::int32_t> sizes = options.pipeline_sizes;
  if (sizes.empty()) {
    sizes = detail::divisors(devices, devices);
  } else {
    for (const std::int32_t p : sizes) {
      if (p < 1 || devices % p != 0) {
        fail({who, concat("a pipeline of ", p, " stages does not divide ", devices, " devices"),
              "DevicePlanOptions::pipeline_sizes",
              concat("give pipeline sizes that divide ", devices, " (", [&] {
                       std::string list;
                       for (const std::int32_t k : detail::divisors(devices, devices)) list += concat(list.empty() ? "" : ", ", k);
                       return list;
                     }(), ")")});
      }
    }
  }
  DevicePlan plan;
  plan.model = options.description.empty() ? concat(profile.graph.size(), " layers") : options.description;
  plan.unit = profile.time_unit.empty() ? "unit" : profile.time_unit;
  plan.devices = devices;
  plan.global_batch = global_batch;
  plan.memory_cap_bytes = memory_cap_bytes;

  std::vector<const FamilyInfo*> asked;  // the families named, looked up once
  for (const std::string& f : options.families) asked.push_back(&family_info(f));
  std::vector<DeviceSplit> fitting;
  std::optional<DeviceSplit> least_hungry;  // when nothing fits: the one needing least memory
  std::vector<DeviceSplit> memory_bound;     // per p that nothing fits: its least hungry
  bool any_replica_count = false;
  for (const std::int32_t p : sizes) {
    const std::int32_t d = devices / p;
    if (global_batch % d != 0) {
      plan.per_pipeline.push_back(concat("p=", p, " x d=", d, ": the global batch ", global_batch, " does not split into ", d,
                                         " equal replica batches"));
      continue;
    }
    any_replica_count = true;
    const std::int64_t per_replica = global_batch / d;
    if (static_cast<std::size_t>(p) > profile.graph.size()) {
      plan.per_pipeline.push_back(concat("p=", p, " x d=", d, ": more stages than the model's ", profile.graph.size(), " layers"));
      continue;
    }
    std::vector<std::int32_t> counts;
    if (options.microbatch_counts.empty()) {
      counts = detail::divisors(per_replica, options.max_microbatches);
    } else {
      for (const std::int32_t m : options.microbatch_counts) {
        if (m >= 1 && per_replica % m == 0) counts.push_back(m);
      }
    }
    std::optional<DeviceSplit> best_here, hungry_here;
    for (const std::int32_t m : counts) {
      const double b = static_cast<double>(per_replica / m);
      GraphModelOptions g;
      g.ranks = p;
      g.microbatches = m;
      g.optimizer_state_factor = options.optimizer_state_factor;
      g.method = options.method;
      PlanModel model = graph_model(profile_at_rows(machine, b, options.profile_microbatch_size), plan.model, g);
      model.concurrent_slowdown = detail::replicated_slowdown(profile.concurrent_slowdown, p, d);
      if (device_cap < no_cap) {
        model.partition = [fitting_cut = std::move(model.partition),
                           any_cut = graph_model(profile_at_rows(any_memory, b, options.profile_microbatch_size), plan.model, g).partition](
                              const CutRequest& cut) {
          try {
            return fitting_cut(cut);
          } catch (const error&) {
            return any_cut(cut);  // no cut fits; any other reason throws again here
          }
        };
      }
      PlanRequest request;
      request.ranks = p;
      request.microbatches = m;
      request.chunks = options.chunks;
      request.weight_memory_fraction = options.weight_memory_fraction;
      request.cap.total_bytes = memory_cap_bytes;
      std::vector<const FamilyInfo*> accepting;  // of those asked, carried by record
      for (const FamilyInfo* f : asked) {
        if (f->accepts(ScheduleRequest{p, m, f->chunks_for(options.chunks)})) {
          accepting.push_back(f);
          request.families.emplace_back(f->name);  // the request stays a complete description
        }
      }
      if (!options.families.empty() && accepting.empty()) continue;
      // compare_families' evaluation, keeping each family's cut for the split that runs it
      (void)detail::start_plan(who.c_str(), model, request);
      FamilySchedules families = family_schedules(model, request, accepting);
      Workspace ws;
      for (FamilySchedule& built : families.built) {
        const ScheduleResult r = evaluate_schedule(built.schedule, model, built.partition, request, ws);
        if (!r.training || !r.valid) continue;
        const PartitionPlan& cut = built.partition;
        std::vector<double> grads, optimizer;
        for (const PartitionStage& st : cut.stages) {
          grads.push_back(st.param_bytes);
          optimizer.push_back(st.param_bytes * options.optimizer_time_per_param_byte);
        }
        AllReduceModel ar = link_model;
        ar.replicas = d;
        const DataParallelStep step = data_parallel_step(r.timeline, grads, ar, optimizer);
        DeviceSplit s;
        s.pipeline = p;
        s.replicas = d;
        s.microbatches = m;
        s.microbatch_size = b;
        s.family = built.family;
        s.chunks = r.chunks;
        s.schedule = std::move(built.schedule);
        s.partition = std::move(built.partition);
        // The timeline holds the actions only; the step's fixed cost is paid once on top.
        s.pipeline_time = step.pipeline_time + model.step_overhead;
        s.bubble_fraction = r.bubble_fraction;
        s.all_reduce_longest = step.all_reduce_longest;
        s.all_reduce_exposed = step.all_reduce_exposed;
        s.step_time = step.step_time + model.step_overhead;
        s.peak_memory_bytes = *std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end());
        s.fits = r.fits;
        s.fit_problem = r.fit_problem;
        ++plan.evaluated;
        if (!s.fits) {
          if (!least_hungry || s.peak_memory_bytes < least_hungry->peak_memory_bytes) least_hungry = s;
          if (!hungry_here || s.peak_memory_bytes < hungry_here->peak_memory_bytes) hungry_here = s;
          continue;
        }
        if (!best_here || detail::faster_split(s, *best_here)) best_here = s;
        fitting.push_back(std::move(s));
      }
    }
    if (best_here) {
      plan.per_pipeline.push_back("best with " + to_string(*best_here));
    } else if (hungry_here) {
      plan.per_pipeline.push_back(concat("p=", p, " x d=", d, ": nothing fits the memory cap; the least hungry ",
                                         hungry_here->fit_problem));
      memory_bound.push_back(*hungry_here);
    } else {
      plan.per_pipeline.push_back(concat("p=", p, " x d=", d, ": no schedule accepts these sizes"));
    }
  }
  if (!any_replica_count) {
    fail({who, concat("the global batch ", global_batch, " splits evenly over none of the replica counts ", [&] {
                        std::string list;
                        for (const std::int32_t p : sizes) list += concat(list.empty() ? "" : ", ", devices / p);
                        return list;
                      }()),
          "global_batch", "give a global batch that a replica count divides (a multiple of the device count always does)"});
  }
  std::stable_sort(fitting.begin(), fitting.end(), detail::faster_split);
  if (fitting.empty()) {
    plan.reason = least_hungry ? concat("no split fits the memory cap; the least hungry, ", to_string(*least_hungry))
                               : "no schedule accepts any split";
    return plan;
  }
  plan.chosen = fitting.front();
  for (std::size_t i = 1; i < fitting.size() && plan.alternatives.size() < options.alternatives; ++i) {
    plan.alternatives.push_back(fitting[i]);
  }
  const DeviceSplit& win = *plan.chosen;
  // The reason compares the winner with the best of another pipeline size: the choice that
  // matters is d x p; a memory-bound size is named with its need.
  const auto other = std::find_if(fitting.begin() + 1, fitting.end(),
                                  [&](const DeviceSplit& s) { return s.pipeline != win.pipeline; });
  plan.reason = concat("fastest of ", fitting.size(), " fitting candidates");
  if (other != fitting.end()) plan.reason += "; " + detail::why_faster(win, *other);
  for (const DeviceSplit& s : memory_bound) plan.reason += concat("; p=", s.pipeline, " does not fit: ", s.fit_problem);
  return plan;
}
#else
;
#endif

}  // namespace ppsched
