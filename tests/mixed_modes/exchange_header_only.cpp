// The link-error half of tests/check_mixed_modes.py: a header-only file whose function takes
// a ppsched type. Its symbol names ppsched::v0_1_header_only::Schedule, so exchange_compiled.cpp,
// built in compiled mode, cannot link against it: the two modes never share a type silently.
#include <ppsched/schedule/schedule.hpp>

#include <cstddef>

std::size_t count_actions(const ppsched::Schedule& s) {
  std::size_t n = 0;
  for (const auto& program : s.programs) n += program.size();
  return n;
}
