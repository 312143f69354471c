// The bodies of <ppsched/validate/report.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const ValidationReport& r) {
  out << "schedule '" << r.schedule_name << "': ";
  if (r.ok()) {
    out << "valid";
    if (r.deadlock_checked) {
      out << (r.lowered ? ", deadlock-free under rendezvous with communication on its own stream and on the compute stream"
                        : ", its compute order can run");
    }
  } else {
    out << (r.problems.size() + r.unlisted_problems) << " problem(s)";
  }
  if (!r.memory.empty()) {
    out << "\n  peak activations per rank (M_B):";
    for (const RankMemory& m : r.memory) out << ' ' << m.peak_microbatches;
  }
  for (const Problem& p : r.problems) out << "\n  - " << p.message;
  if (r.unlisted_problems != 0) out << "\n  - ... and " << r.unlisted_problems << " more";
  if (!r.ok() && !r.deadlock_checked) out << "\n  (deadlock freedom is checked once the problems above are fixed)";
  return out;
}

[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const ValidationReport& r) {
  std::ostringstream out;
  out << r;
  return out.str();
}

}  // namespace ppsched
