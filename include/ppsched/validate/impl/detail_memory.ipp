// The bodies of <ppsched/validate/detail/memory.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/validate/detail/memory.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void check_memory_options(const ValidateOptions& options, std::int32_t stages) {
  if (!options.memory.activation_bytes.empty() &&
      options.memory.activation_bytes.size() != static_cast<std::size_t>(stages)) {
    fail({"validate options", concat("MemoryModel::activation_bytes has ", options.memory.activation_bytes.size(),
                                     " entries for a schedule of ", stages, " stages"),
          "", "give one size per stage, or none"});
  }
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<double>*>{"recompute_fraction", &options.memory.recompute_fraction},
                                {"offload_fraction", &options.memory.offload_fraction},
                                {"recompute_peak_fraction", &options.memory.recompute_peak_fraction}}) {
    if (!v->empty() && v->size() != static_cast<std::size_t>(stages)) {
      fail({"validate options", concat("MemoryModel::", name, " has ", v->size(), " entries for a schedule of ", stages, " stages"),
            "", "give one fraction per stage, or none (all of the activation)"});
    }
    for (std::size_t s = 0; s < v->size(); ++s) {
      if (!((*v)[s] >= 0.0 && (*v)[s] <= 1.0)) {
        fail({"validate options", concat("MemoryModel::", name, "[", s, "] = ", (*v)[s], " is outside [0, 1]"), "",
              "give the share of the stage's stored activation, from 0 to 1"});
      }
    }
  }
  const std::vector<double>& w = options.memory.stage_weight_fraction;
  if (!w.empty() && w.size() != static_cast<std::size_t>(stages)) {
    fail({"validate options", concat("MemoryModel::stage_weight_fraction has ", w.size(), " entries for a schedule of ", stages, " stages"),
          "", "give one fraction per stage, or none (weight_fraction for every stage)"});
  }
  for (std::size_t s = 0; s <= w.size(); ++s) {
    const double v = s < w.size() ? w[s] : options.memory.weight_fraction;
    if (!(v >= 0.0 && v <= std::numeric_limits<double>::max())) {
      fail({"validate options",
            s < w.size() ? concat("MemoryModel::stage_weight_fraction[", s, "] = ", v, " is negative or not finite")
                         : concat("MemoryModel::weight_fraction = ", v, " is negative or not finite"),
            "", weight_memory_fraction_hint});
    }
  }
}

}  // namespace detail
}  // namespace ppsched
