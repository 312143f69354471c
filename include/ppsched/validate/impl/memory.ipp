// The bodies of <ppsched/validate/memory.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE MemoryModel memory_model_for(const CostModel& c, std::int32_t stages) {
  MemoryModel m;
  m.weight_fraction = c.weight_memory_fraction;
  if (c.per_microbatch.empty() && (c.stages.size() == 1 || c.stages.size() == static_cast<std::size_t>(stages))) {
    m.activation_bytes.resize(static_cast<std::size_t>(stages));
    for (std::size_t s = 0; s < m.activation_bytes.size(); ++s) {
      m.activation_bytes[s] = (c.stages.size() == 1 ? c.stages.front() : c.stages[s]).activation_bytes;
    }
  }
  // The shares, from the first micro-batch's costs (a scale changes the sizes, not their shares).
  if (stages > 0 && (c.per_microbatch.empty() ? c.stages.size() == 1 || c.stages.size() == static_cast<std::size_t>(stages)
                                               : c.per_microbatch.size() % static_cast<std::size_t>(stages) == 0)) {
    bool any = false;
    bool layerwise = false;
    bool own_weight = false;
    std::vector<double> rf(static_cast<std::size_t>(stages), 1.0), of(static_cast<std::size_t>(stages), 1.0),
        pf(static_cast<std::size_t>(stages), 1.0), wf(static_cast<std::size_t>(stages), c.weight_memory_fraction);
    for (std::int32_t s = 0; s < stages; ++s) {
      const std::size_t per = c.per_microbatch.size() / static_cast<std::size_t>(stages);
      const StageCost& sc = !c.per_microbatch.empty() ? c.per_microbatch[static_cast<std::size_t>(s) * per]
                            : c.stages.size() == 1    ? c.stages.front()
                                                      : c.stages[static_cast<std::size_t>(s)];
      const auto st = static_cast<std::size_t>(s);
      if (sc.activation_bytes > 0.0) {
        rf[st] = recompute_saved_bytes(sc) / sc.activation_bytes;
        of[st] = offload_bytes(sc) / sc.activation_bytes;
        pf[st] = recompute_peak_bytes(sc) / sc.activation_bytes;
      }
      if (sc.weight_memory_fraction) wf[st] = *sc.weight_memory_fraction;
      own_weight = own_weight || sc.weight_memory_fraction.has_value();
      layerwise = layerwise || pf[st] != rf[st];
      any = any || rf[st] != 1.0 || of[st] != 1.0;
    }
    if (any) {
      m.recompute_fraction = std::move(rf);
      m.offload_fraction = std::move(of);
    }
    if (layerwise) m.recompute_peak_fraction = std::move(pf);
    if (own_weight) m.stage_weight_fraction = std::move(wf);
  }
  return m;
}

}  // namespace ppsched
