// The bodies of <ppsched/partition/cost_model.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void check_inflight_sizes(const char* subject, std::int32_t stages, std::int32_t microbatches) {
  if (stages < 0 || microbatches < 0) {
    detail::fail({subject, detail::concat(stages, " stages and ", microbatches, " micro-batches"), stages < 0 ? "stages" : "microbatches",
          "give counts >= 0"});
  }
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE std::vector<double> inflight_1f1b(
    std::int32_t stages, std::int32_t microbatches) {
  detail::check_inflight_sizes("inflight_1f1b", stages, microbatches);
  std::vector<double> counts(static_cast<std::size_t>(stages));
  for (std::int32_t j = 0; j < stages; ++j) {
    counts[static_cast<std::size_t>(j)] = static_cast<double>(std::min(stages - j, microbatches));
  }
  return counts;
}

[[nodiscard]] PPSCHED_OUTLINE std::vector<double> inflight_gpipe(std::int32_t stages, std::int32_t microbatches) {
  detail::check_inflight_sizes("inflight_gpipe", stages, microbatches);
  return std::vector<double>(static_cast<std::size_t>(stages), static_cast<double>(microbatches));
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void check_partition_cost_model(const PartitionCostModel& c, std::size_t stages) {
  const std::string subject = "partition cost model";
  if (c.devices.size() > 1 && c.devices.size() != stages) {
    detail::fail({subject, detail::concat("lists ", c.devices.size(), " devices for ", stages, " stages"), "devices",
          "give one device per stage (in pipeline order), a single device for all stages, or none"});
  }
  for (std::size_t d = 0; d < c.devices.size(); ++d) {
    const Device& dev = c.devices[d];
    if (!(dev.speed > 0.0 && dev.speed <= std::numeric_limits<double>::max())) {
      detail::fail({subject, detail::concat("device ", d, " has speed ", dev.speed), detail::concat("devices[", d, "].speed"),
            "a speed is a finite number > 0 (1 = as fast as the device the layers were profiled on)"});
    }
    if (!(dev.memory_bytes >= 0.0)) {
      detail::fail({subject, detail::concat("device ", d, " has memory cap ", dev.memory_bytes), detail::concat("devices[", d, "].memory_bytes"),
            "a memory cap is a number of bytes >= 0, or infinity for no cap"});
    }
  }
  if (!(c.link.latency >= 0.0 && c.link.latency <= std::numeric_limits<double>::max())) {
    detail::fail({subject, detail::concat("link latency is ", c.link.latency), "link.latency", "a latency is a finite time >= 0"});
  }
  if (!(c.link.bandwidth > 0.0)) {
    detail::fail({subject, detail::concat("link bandwidth is ", c.link.bandwidth), "link.bandwidth",
          "a bandwidth is bytes per time unit > 0, or infinity for free bytes"});
  }
  if (!(c.optimizer_state_factor >= 0.0 && c.optimizer_state_factor <= std::numeric_limits<double>::max())) {
    detail::fail({subject, detail::concat("optimizer_state_factor is ", c.optimizer_state_factor), "optimizer_state_factor",
          "give the finite number of bytes held per parameter byte, >= 0 (1 = weights only)"});
  }
  if (!c.inflight.empty() && c.inflight.size() != stages) {
    detail::fail({subject, detail::concat("lists in-flight counts for ", c.inflight.size(), " stages, but there are ", stages), "inflight",
          "give one count per stage, or none for 1F1B's counts"});
  }
  for (std::size_t j = 0; j < c.inflight.size(); ++j) {
    if (!(c.inflight[j] >= 0.0 && c.inflight[j] <= std::numeric_limits<double>::max())) {
      detail::fail({subject, detail::concat("stage ", j, " keeps ", c.inflight[j], " micro-batches in flight"), detail::concat("inflight[", j, "]"),
            "an in-flight count is a finite number >= 0"});
    }
  }
}

}  // namespace detail
}  // namespace ppsched
