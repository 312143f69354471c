// The bodies of <ppsched/plan/devices.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

[[nodiscard]] PPSCHED_OUTLINE DevicePlan plan_devices(const Profile& profile, std::int32_t devices, std::int64_t global_batch,
                                             const MemoryCap& cap, const DevicePlanOptions& options) {
  using detail::concat;
  const std::string who = "plan_devices";
  if (devices < 1) detail::fail({who, detail::concat("devices = ", devices), "devices", "give at least one device"});
  if (global_batch < 1) detail::fail({who, detail::concat("global batch = ", global_batch), "global_batch", "give at least one sample per step"});
  for (const auto& [c, field] : {std::pair{cap.total_bytes, "cap.total_bytes"}, std::pair{cap.microbatches, "cap.microbatches"},
                                 std::pair{cap.activation_bytes, "cap.activation_bytes"}}) {
    if (!(c > 0.0)) detail::fail({who, detail::concat("a memory cap of ", c), field, "give a cap > 0, or infinity for none"});
  }
  if (!cap.rank_total_bytes.empty() || !cap.rank_activation_bytes.empty()) {
    detail::fail({who, "per-rank memory caps, for pipelines of any size", cap.rank_total_bytes.empty() ? "cap.rank_activation_bytes" : "cap.rank_total_bytes",
          "give one cap for every device (total_bytes, activation_bytes)"});
  }
  if (!(options.profile_microbatch_size > 0.0 && options.profile_microbatch_size <= std::numeric_limits<double>::max())) {
    detail::fail({who, detail::concat("profile_microbatch_size is ", options.profile_microbatch_size),
          "DevicePlanOptions::profile_microbatch_size", "give the samples the profile's micro-batch holds, > 0"});
  }
  if (!(options.optimizer_time_per_param_byte >= 0.0 &&
        options.optimizer_time_per_param_byte <= std::numeric_limits<double>::max())) {
    detail::fail({who, detail::concat("optimizer_time_per_param_byte is ", options.optimizer_time_per_param_byte),
          "DevicePlanOptions::optimizer_time_per_param_byte", "give a finite time >= 0"});
  }
  if (options.max_microbatches < 1) {
    detail::fail({who, detail::concat("max_microbatches = ", options.max_microbatches), "DevicePlanOptions::max_microbatches",
          "give at least 1"});
  }
  for (std::size_t i = 1; i < profile.devices.size(); ++i) {
    if (!(profile.devices[i] == profile.devices.front())) {
      detail::fail({who, detail::concat("the profile's devices differ (device ", i, " is not like device 0)"), "Profile::devices",
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
      std::min(machine.devices.empty() ? no_cap : machine.devices.front().memory_bytes, cap.total_bytes);
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
        detail::fail({who, detail::concat("a pipeline of ", p, " stages does not divide ", devices, " devices"),
              "DevicePlanOptions::pipeline_sizes",
              detail::concat("give pipeline sizes that divide ", devices, " (", [&] {
                       std::string list;
                       for (const std::int32_t k : detail::divisors(devices, devices)) list += detail::concat(list.empty() ? "" : ", ", k);
                       return list;
                     }(), ")")});
      }
    }
  }
  DevicePlan plan;
  plan.model = options.description.empty() ? detail::concat(profile.graph.size(), " layers") : options.description;
  plan.unit = profile.time_unit.empty() ? "unit" : profile.time_unit;
  plan.devices = devices;
  plan.global_batch = global_batch;
  plan.cap = cap;

  std::vector<const FamilyInfo*> asked;  // the families named, looked up once
  for (const std::string& f : options.families) asked.push_back(&family_info(f));
  std::vector<DeviceSplit> fitting;
  std::optional<DeviceSplit> least_hungry;  // when nothing fits: the one needing least memory
  std::vector<DeviceSplit> memory_bound;     // per p that nothing fits: its least hungry
  bool any_replica_count = false;
  for (const std::int32_t p : sizes) {
    const std::int32_t d = devices / p;
    if (global_batch % d != 0) {
      plan.per_pipeline.push_back(detail::concat("p=", p, " x d=", d, ": the global batch ", global_batch, " does not split into ", d,
                                         " equal replica batches"));
      continue;
    }
    any_replica_count = true;
    const std::int64_t per_replica = global_batch / d;
    if (static_cast<std::size_t>(p) > profile.graph.size()) {
      plan.per_pipeline.push_back(detail::concat("p=", p, " x d=", d, ": more stages than the model's ", profile.graph.size(), " layers"));
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
      model.fixed_costs.concurrent_slowdown = detail::replicated_slowdown(profile.fixed_costs.concurrent_slowdown, p, d);
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
      request.cap = cap;
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
        const Partition& cut = built.partition;
        std::vector<double> grads, optimizer;
        for (const PartitionStage& st : cut.stages) {
          grads.push_back(st.param_bytes);
          // The rate per parameter byte, and the stage's profiled optimizer step (Layer::optimizer_step).
          optimizer.push_back(st.param_bytes * options.optimizer_time_per_param_byte + st.optimizer_step);
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
        s.pipeline_time = step.pipeline_time + model.fixed_costs.step;
        s.bubble_fraction = r.bubble_fraction;
        s.all_reduce_longest = step.all_reduce_longest;
        s.all_reduce_exposed = step.all_reduce_exposed;
        s.step_time = step.step_time + model.fixed_costs.step;
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
      plan.per_pipeline.push_back(detail::concat("p=", p, " x d=", d, ": nothing fits the memory cap; the least hungry ",
                                         hungry_here->fit_problem));
      memory_bound.push_back(*hungry_here);
    } else {
      plan.per_pipeline.push_back(detail::concat("p=", p, " x d=", d, ": no schedule accepts these sizes"));
    }
  }
  if (!any_replica_count) {
    detail::fail({who, detail::concat("the global batch ", global_batch, " splits evenly over none of the replica counts ", [&] {
                        std::string list;
                        for (const std::int32_t p : sizes) list += detail::concat(list.empty() ? "" : ", ", devices / p);
                        return list;
                      }()),
          "global_batch", "give a global batch that a replica count divides (a multiple of the device count always does)"});
  }
  std::stable_sort(fitting.begin(), fitting.end(), detail::faster_split);
  if (fitting.empty()) {
    plan.reason = least_hungry ? detail::concat("no split fits the memory cap; the least hungry, ", to_string(*least_hungry))
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
  plan.reason = detail::concat("fastest of ", fitting.size(), " fitting candidates");
  if (other != fitting.end()) plan.reason += "; " + detail::why_faster(win, *other);
  for (const DeviceSplit& s : memory_bound) plan.reason += detail::concat("; p=", s.pipeline, " does not fit: ", s.fit_problem);
  return plan;
}

}  // namespace plan
}  // namespace ppsched
