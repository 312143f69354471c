// The schedule families a training test runs "every family" over, read from the family
// records (`schedule_families`, training ones only), so a family added to the library is
// covered by these tests without editing each of them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <utility>
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

// Memory policies written into a compute-only schedule by hand (issue 23), so that runtime
// tests do not depend on the planner's policy insertion.
// recompute_offload: both, as layer-wise recomputation with offloaded checkpoints has them
// (F, OFFLOAD, RELOAD, R, backward).
enum class MemoryPolicy { none, recompute, offload, recompute_offload };

// Where an action may go before program[i] / after program[i] without splitting an
// overlapped pair (two adjacent compute actions sharing a group).
[[nodiscard]] inline std::size_t before_unit(const std::vector<ppsched::Action>& prog, std::size_t i) {
  if (prog[i].group != 0 && i > 0 && prog[i - 1].group == prog[i].group) return i - 1;
  return i;
}
[[nodiscard]] inline std::size_t after_unit(const std::vector<ppsched::Action>& prog, std::size_t i) {
  if (prog[i].group != 0 && i + 1 < prog.size() && prog[i + 1].group == prog[i].group) return i + 2;
  return i + 1;
}

// `s` with R(s, m) right before every B/BI(s, m) (recompute), or OFFLOAD(s, m) right after
// F(s, m) and RELOAD(s, m) right before B/BI(s, m) (offload), or both, RELOAD before R
// (recompute_offload).
[[nodiscard]] inline ppsched::Schedule with_policy(ppsched::Schedule s, MemoryPolicy p) {
  using ppsched::Op;
  if (p == MemoryPolicy::none) return s;
  for (auto& prog : s.programs) {
    std::vector<std::pair<std::size_t, ppsched::Action>> inserts;  // (position, action)
    for (std::size_t i = 0; i < prog.size(); ++i) {
      const ppsched::Action& a = prog[i];
      const bool offload = p == MemoryPolicy::offload || p == MemoryPolicy::recompute_offload;
      if (offload && a.op == Op::F) {
        inserts.push_back({after_unit(prog, i), {Op::OFFLOAD, a.stage, a.microbatch, 0}});
      }
      if (a.op == Op::B || a.op == Op::BI) {
        if (offload) inserts.push_back({before_unit(prog, i), {Op::RELOAD, a.stage, a.microbatch, 0}});
        if (p != MemoryPolicy::offload) inserts.push_back({before_unit(prog, i), {Op::R, a.stage, a.microbatch, 0}});
      }
    }
    // Applied back to front; actions for one position keep the order they were found in.
    std::stable_sort(inserts.begin(), inserts.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (std::size_t k = inserts.size(); k-- > 0;) {
      prog.insert(prog.begin() + static_cast<std::ptrdiff_t>(inserts[k].first), inserts[k].second);
    }
  }
  return s;
}

}  // namespace ppsched_test
