// The schedule families a training test runs "every family" over, read from the family
// records (`schedule_families`, training ones only), so a family added to the library is
// covered by these tests without editing each of them.
#pragma once

#include <string_view>
#include <vector>

#include "ppsched/backend/cpu.hpp"
#include "ppsched/schedule/generators.hpp"

namespace ppsched_test {

struct Family {
  std::string_view name;
  int chunks;  // what the family takes on its own, 2 where it takes any number
};

[[nodiscard]] inline std::vector<Family> training_families() {
  std::vector<Family> out;
  for (const ppsched::FamilyInfo& f : ppsched::schedule_families) {
    if (f.training) out.push_back({f.name, f.chunks_for(2)});
  }
  return out;
}

[[nodiscard]] inline ppsched::Schedule make(const Family& f, int p, int m) {
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  req.chunks = f.chunks;
  return ppsched::make_schedule(f.name, req);
}

[[nodiscard]] inline std::vector<ppsched::CpuBackend*> backends(ppsched::CpuCluster& c) {
  std::vector<ppsched::CpuBackend*> out;
  for (int r = 0; r < c.ranks(); ++r) out.push_back(&c.rank(r));
  return out;
}

}  // namespace ppsched_test
