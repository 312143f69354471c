// libFuzzer harness: the simulator (sim/simulate.hpp) fed valid schedules — every family,
// p, m and v the bytes pick — under arbitrary costs: per stage or per (stage, micro-batch),
// micro-batch scales, link latency and bandwidth, with NaN, infinite, negative and huge
// values among them (up to 1e300 x 255 and denormal bandwidths). A ppsched::error is the
// expected answer to a request or a cost model that does not fit, or whose sums overflow a
// double; anything else is a bug. An accepted run must obey what a timeline is:
// finite, every rank's busy time within the makespan, as fast as its busiest rank at least.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ppsched/error.hpp>
#include <ppsched/lower/lower.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/costs/cost_model.hpp>
#include <ppsched/sim/simulate.hpp>
#include <ppsched/validate/validate.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ppsched::fuzz::FuzzInput in(data, size);
  const auto families = ppsched::family_names();
  const auto family = families[static_cast<std::size_t>(in.byte()) % families.size()];
  ppsched::ScheduleRequest request;
  request.ranks = in.in_range(1, 6);
  request.microbatches = in.in_range(1, 12);
  request.chunks = in.in_range(1, 3);
  ppsched::Schedule schedule;
  try {
    schedule = ppsched::make_schedule(family, request);
  } catch (const ppsched::error&) {
    return 0;  // a family that does not take this p, m, v says so
  }
  const std::int32_t stages = schedule.stages();
  const std::int32_t m = schedule.microbatches;

  ppsched::CostModel cost;
  auto stage_cost = [&in] {
    ppsched::StageCost c;
    c.forward = in.cost();
    c.backward_input = in.cost();
    c.backward_weight = in.cost();
    c.activation_bytes = in.cost();
    c.output_bytes = in.cost();
    return c;
  };
  const std::uint8_t layout = in.byte();
  const std::int32_t entries = layout % 4u == 0 ? 1 : layout % 4u == 1 ? stages : in.in_range(0, stages + 1);
  for (std::int32_t j = 0; j < entries; ++j) cost.stages.push_back(stage_cost());
  if ((layout & 4u) != 0) {
    const std::int32_t n = (layout & 8u) != 0 ? m : in.in_range(0, m + 1);
    for (std::int32_t i = 0; i < n; ++i) cost.microbatch_scale.push_back(in.cost());
  }
  if ((layout & 16u) != 0) {
    const std::int32_t n = (layout & 32u) != 0 ? stages * m : in.in_range(0, stages * m + 1);
    for (std::int32_t i = 0; i < n; ++i) cost.per_microbatch.push_back(stage_cost());
  }
  if ((layout & 64u) != 0) {
    cost.link.latency = in.cost();
    cost.link.bandwidth = in.cost();
  }
  if ((layout & 128u) != 0) cost.weight_memory_fraction = in.cost();
  if (in.byte() % 2u != 0) cost.fb_overlap = in.cost();  // read by DualPipeV's overlapped pairs

  // Every finite cost is in scope: check_cost_model rejects costs whose sums cannot be
  // finite doubles (an error, the expected answer), so an accepted run must be finite.

  ppsched::SimOptions options;
  const std::uint8_t mode = in.byte();
  options.comm_on_compute_stream = (mode & 1u) != 0;
  options.ideal_communication = (mode & 2u) != 0;
  options.record_timeline = (mode & 4u) != 0;
  ppsched::SimResult result;
  try {
    const bool lowered = (mode & 8u) != 0;
    // A plain Schedule: validate() and simulate() trust a LoweredSchedule, but check a copy of
    // lower()'s output in full, which is what is fuzzed here: a valid schedule lowered under
    // any accepted costs must stay valid.
    const ppsched::Schedule input =
        lowered ? ppsched::Schedule(ppsched::lower(schedule, ppsched::lower_options_for(cost, stages, m))) : schedule;
    PPSCHED_FUZZ_CHECK(!lowered || ppsched::validate(input).ok(), "a valid schedule lowered under accepted costs is valid");
    result = ppsched::simulate(input, cost, options);
  } catch (const ppsched::error&) {
    return 0;
  }
  PPSCHED_FUZZ_CHECK(std::isfinite(result.makespan) && result.makespan >= 0.0, "an accepted run has a finite makespan");
  PPSCHED_FUZZ_CHECK(result.ranks.size() == static_cast<std::size_t>(schedule.ranks), "one statistic per rank");
  for (const ppsched::SimRankStats& r : result.ranks) {
    PPSCHED_FUZZ_CHECK(std::isfinite(r.busy) && r.busy >= 0.0, "a rank's busy time is finite");
    // Busy time is a sum of durations that also sit inside the makespan; allow rounding.
    PPSCHED_FUZZ_CHECK(r.busy <= result.makespan * (1.0 + 1e-9) + 1e-9, "a rank's busy time fits in the makespan");
  }
  return 0;
}
