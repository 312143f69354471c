// The bodies of <ppsched/costs/cost_model.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE CostModel uniform_costs(double forward, double backward_input, double backward_weight,
                                             TimeUnit unit) {
  CostModel c;
  c.unit = std::move(unit);
  c.stages.push_back(StageCost{forward, backward_input, backward_weight, 0.0, 0.0});
  return c;
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void check_cost_value(double v, const std::string& where, bool positive) {
  if (!std::isfinite(v) || v < 0.0 || (positive && v == 0.0)) {
    detail::fail({"cost model", detail::concat("value ", v, " is not ", positive ? "a positive" : "a non-negative", " finite number"),
          where, "times and sizes are finite and >= 0"});
  }
}

PPSCHED_OUTLINE void check_stage_cost(const StageCost& c, const std::string& where) {
  check_cost_value(c.forward, where + ".forward");
  check_cost_value(c.backward_input, where + ".backward_input");
  check_cost_value(c.backward_weight, where + ".backward_weight");
  check_cost_value(c.activation_bytes, where + ".activation_bytes");
  check_cost_value(c.output_bytes, where + ".output_bytes");
  if (c.backward) check_cost_value(*c.backward, where + ".backward");
  if (c.recompute) check_cost_value(*c.recompute, where + ".recompute");
  if (c.weight_memory_fraction) check_cost_value(*c.weight_memory_fraction, where + ".weight_memory_fraction");
  if (c.recompute_saved_bytes) {
    check_cost_value(*c.recompute_saved_bytes, where + ".recompute_saved_bytes");
    if (*c.recompute_saved_bytes > c.activation_bytes) {
      detail::fail({"cost model",
            detail::concat("recompute_saved_bytes ", *c.recompute_saved_bytes, " exceeds activation_bytes ", c.activation_bytes),
            where + ".recompute_saved_bytes", "R restores part of the stored activation: give at most activation_bytes"});
    }
  }
  if (c.recompute_peak_bytes) {
    check_cost_value(*c.recompute_peak_bytes, where + ".recompute_peak_bytes");
    if (*c.recompute_peak_bytes > c.activation_bytes) {
      detail::fail({"cost model",
            detail::concat("recompute_peak_bytes ", *c.recompute_peak_bytes, " exceeds activation_bytes ", c.activation_bytes),
            where + ".recompute_peak_bytes", "give the largest single layer's activation, at most the stage's activation_bytes"});
    }
  }
  if (c.offload_bytes) {
    check_cost_value(*c.offload_bytes, where + ".offload_bytes");
    if (*c.offload_bytes > c.activation_bytes) {
      detail::fail({"cost model", detail::concat("offload_bytes ", *c.offload_bytes, " exceeds activation_bytes ", c.activation_bytes),
            where + ".offload_bytes", "OFFLOAD moves part of the stored activation: give at most activation_bytes"});
    }
  }
}

PPSCHED_OUTLINE void check_fits(const Action& a, std::int32_t stages, std::int32_t microbatches) {
  if (a.stage < 0 || a.stage >= stages || a.microbatch < 0 || a.microbatch >= microbatches) {
    detail::fail({"lower options from lower_options_for", detail::concat("asked for ", to_string(a), ", outside the ", stages,
                                                         " stages and ", microbatches, " micro-batches they were made for"),
          "", "make the options with the schedule's own stages() and microbatches"});
  }
}

PPSCHED_OUTLINE void note_largest(const StageCost& c, const std::string& where, double& largest, std::string& largest_where) {
  const std::pair<double, const char*> fields[] = {{c.forward, ".forward"},
                                                   {c.backward_input, ".backward_input"},
                                                   {c.backward_weight, ".backward_weight"},
                                                   {c.backward.value_or(0.0), ".backward"},
                                                   {c.activation_bytes, ".activation_bytes"},
                                                   {c.output_bytes, ".output_bytes"}};
  for (const auto& [value, name] : fields) {
    if (value > largest) {
      largest = value;
      largest_where = where + name;
    }
  }
}

PPSCHED_OUTLINE void check_cost_sums(const CostModel& c, std::int32_t stages, std::int32_t microbatches) {
  const double S = stages, M = microbatches;
  const auto transfer = [&c](double bytes) { return c.link.transfer_time(bytes); };
  // Every action of one (stage, micro-batch), B and BI + BW both counted (either may run).
  const auto action_time = [&](const StageCost& s) {
    return s.forward + s.backward.value_or(0.0) + s.backward_input + s.backward_weight + 4.0 * c.fixed_costs.action +
           2.0 * (transfer(s.output_bytes) + c.fixed_costs.transfer);
  };
  double times = 0.0, bytes = 0.0, largest = -1.0;
  std::string largest_where;
  if (c.per_microbatch.empty()) {
    for (std::size_t i = 0; i < c.stages.size(); ++i) {
      times += action_time(c.stages[i]);
      bytes += c.stages[i].activation_bytes;
      note_largest(c.stages[i], detail::concat("stages[", i, "]"), largest, largest_where);
    }
    const double copies = c.stages.size() == 1 ? S : 1.0;
    double scale = c.microbatch_scale.empty() ? M : 0.0;
    for (std::size_t i = 0; i < c.microbatch_scale.size(); ++i) {
      scale += c.microbatch_scale[i];
      if (c.microbatch_scale[i] > largest) {
        largest = c.microbatch_scale[i];
        largest_where = detail::concat("microbatch_scale[", i, "]");
      }
    }
    times *= copies * scale;
    bytes *= copies * scale;
  } else {
    for (std::size_t i = 0; i < c.per_microbatch.size(); ++i) {
      times += action_time(c.per_microbatch[i]);
      bytes += c.per_microbatch[i].activation_bytes;
    }
    // The largest entry is named only when the sums fail: formatting a place for each of
    // stages x micro-batches entries, on every search candidate, was most of a step plan's time.
    if (!(std::isfinite(times * S) && std::isfinite(bytes))) {
      for (std::size_t i = 0; i < c.per_microbatch.size(); ++i) {
        note_largest(c.per_microbatch[i], detail::concat("per_microbatch[", i, "]"), largest, largest_where);
      }
    }
  }
  times += c.fixed_costs.step;
  for (const double t : c.optimizer_step) times += t * (c.optimizer_step.size() == 1 ? static_cast<double>(stages) : 1.0);
  if (std::isfinite(times * S) && std::isfinite(bytes)) return;
  const double bound = std::numeric_limits<double>::max() / (8.0 * S * S * M);
  detail::fail({"cost model",
        detail::concat("its ", std::isfinite(times * S) ? "activation bytes" : "times", " add up past the largest double: ",
               stages, " stages x ", microbatches, " micro-batches sum to ", std::isfinite(times * S) ? bytes : times * S,
               " (times counted once per rank for the statistics); the largest value is ", largest_where, " = ", largest,
               c.link.bandwidth < 1.0 ? detail::concat(", with link.bandwidth = ", c.link.bandwidth) : std::string()),
        largest_where,
        detail::concat("keep the costs' sum finite: every time, size and scale well below ", bound,
               " (the largest double / (8 x stages^2 x micro-batches)), e.g. by choosing a larger unit")});
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// check_stage_cost's conditions without its messages: a per-micro-batch table holds stages x
// micro-batches entries and is checked on every search candidate, so the place is formatted only
// for an entry that fails (formatting it for every entry was most of a step plan's time).
inline bool stage_cost_fine(const StageCost& c) noexcept {
  const auto fine = [](double v) { return std::isfinite(v) && v >= 0.0; };
  const auto part = [&](const std::optional<double>& v) { return !v || (fine(*v) && *v <= c.activation_bytes); };
  return fine(c.forward) && fine(c.backward_input) && fine(c.backward_weight) && fine(c.activation_bytes) &&
         fine(c.output_bytes) && (!c.backward || fine(*c.backward)) && (!c.recompute || fine(*c.recompute)) &&
         (!c.weight_memory_fraction || fine(*c.weight_memory_fraction)) && part(c.recompute_saved_bytes) &&
         part(c.recompute_peak_bytes) && part(c.offload_bytes);
}

}  // namespace detail

PPSCHED_OUTLINE void check_cost_model(const CostModel& c, std::int32_t stages, std::int32_t microbatches) {
  using detail::concat;
  const auto S = static_cast<std::size_t>(stages), M = static_cast<std::size_t>(microbatches);
  if (c.per_microbatch.empty()) {
    if (c.stages.size() != 1 && c.stages.size() != S) {
      detail::fail({"cost model", detail::concat("has ", c.stages.size(), " stage costs for a schedule of ", stages, " stages"), "stages",
            "give one StageCost per stage, or a single one for all stages"});
    }
    for (std::size_t i = 0; i < c.stages.size(); ++i) detail::check_stage_cost(c.stages[i], detail::concat("stages[", i, "]"));
    if (!c.microbatch_scale.empty() && c.microbatch_scale.size() != M) {
      detail::fail({"cost model", detail::concat("has ", c.microbatch_scale.size(), " micro-batch scales for ", microbatches, " micro-batches"),
            "microbatch_scale", "give one factor per micro-batch, or none"});
    }
    for (std::size_t i = 0; i < c.microbatch_scale.size(); ++i) {
      detail::check_cost_value(c.microbatch_scale[i], detail::concat("microbatch_scale[", i, "]"));
    }
  } else {
    if (c.per_microbatch.size() != S * M) {
      detail::fail({"cost model", detail::concat("has ", c.per_microbatch.size(), " per-micro-batch costs; a schedule of ", stages,
                                 " stages and ", microbatches, " micro-batches needs ", S * M),
            "per_microbatch", "give stages x micro-batches entries, stage-major (index stage * microbatches + mb)"});
    }
    for (std::size_t i = 0; i < c.per_microbatch.size(); ++i) {
      if (detail::stage_cost_fine(c.per_microbatch[i])) continue;
      detail::check_stage_cost(c.per_microbatch[i], detail::concat("per_microbatch[", i, "] (stage ", i / M, ", micro-batch ", i % M, ")"));
    }
  }
  detail::check_cost_value(c.link.latency, "link.latency");
  if (!(c.link.bandwidth > 0.0)) {  // infinity allowed: free bandwidth
    detail::fail({"cost model", detail::concat("link bandwidth ", c.link.bandwidth, " is not positive"), "link.bandwidth",
          "give bytes per time unit, or infinity for free transfers"});
  }
  if (!(c.weight_memory_fraction >= 0.0 && c.weight_memory_fraction <= std::numeric_limits<double>::max())) {
    detail::fail({"cost model", detail::concat("weight_memory_fraction ", c.weight_memory_fraction, " is negative or not finite"),
          "weight_memory_fraction", detail::weight_memory_fraction_hint});
  }
  detail::check_cost_value(c.host_link.latency, "host_link.latency");
  if (!(c.host_link.bandwidth > 0.0)) {
    detail::fail({"cost model", detail::concat("host link bandwidth ", c.host_link.bandwidth, " is not positive"), "host_link.bandwidth",
          "give bytes per time unit between a device and its host, or infinity for free copies"});
  }
  detail::check_cost_value(c.fixed_costs.action, "fixed_costs.action");
  detail::check_cost_value(c.fixed_costs.transfer, "fixed_costs.transfer");
  detail::check_cost_value(c.fixed_costs.step, "fixed_costs.step");
  if (!c.optimizer_step.empty() && c.optimizer_step.size() != 1 && c.optimizer_step.size() != static_cast<std::size_t>(stages)) {
    detail::fail({"cost model", detail::concat("optimizer_step has ", c.optimizer_step.size(), " entries for ", stages, " stages"),
          "optimizer_step", "give one time per stage, a single one for every stage, or none"});
  }
  for (std::size_t s = 0; s < c.optimizer_step.size(); ++s) {
    detail::check_cost_value(c.optimizer_step[s], detail::concat("optimizer_step[", s, "]"));
  }
  detail::check_concurrent_slowdown(c.fixed_costs.concurrent_slowdown, "cost model", "fixed_costs.concurrent_slowdown");
  if (!(c.fb_overlap >= 0.0 && c.fb_overlap <= 1.0)) {
    detail::fail({"cost model", detail::concat("fb_overlap ", c.fb_overlap, " is outside [0, 1]"), "fb_overlap",
          "give the share of the shorter action of an F&B pair hidden under the longer: 0 (none) to 1 (max(T_F, T_B))"});
  }
  detail::check_cost_sums(c, stages, microbatches);
}

}  // namespace ppsched
