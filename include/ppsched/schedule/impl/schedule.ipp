// The bodies of <ppsched/schedule/schedule.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const Schedule& s) {
  out << "schedule '" << s.name << "': " << s.ranks << " ranks, " << s.stages() << " stages, "
      << s.microbatches << " micro-batches\n";
  for (std::size_t r = 0; r < s.programs.size(); ++r) {
    out << "rank " << r << ':';
    for (const Action& a : s.programs[r]) out << ' ' << a;
    out << '\n';
  }
  return out;
}

[[nodiscard]] PPSCHED_OUTLINE Schedule strip_memory_actions(Schedule s) {
  for (auto& prog : s.programs) {
    prog.erase(std::remove_if(prog.begin(), prog.end(), [](const Action& a) { return is_memory(a.op); }), prog.end());
  }
  return s;
}

}  // namespace ppsched
