// The bodies of <ppsched/schedule/action.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const Action& a) {
  std::string s{op_name(a.op)};
  s += std::to_string(a.microbatch);
  s += "@s";
  s += std::to_string(a.stage);
  if (a.group != 0) {
    s += '#';
    s += std::to_string(a.group);
  }
  return s;
}

}  // namespace ppsched
