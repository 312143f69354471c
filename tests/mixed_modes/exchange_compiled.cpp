// Compiled-mode caller of exchange_header_only.cpp's count_actions (see there): it asks for
// count_actions(ppsched::v0_1_compiled::Schedule const&), which no file defines.
#define PPSCHED_COMPILED
#include <ppsched/schedule/schedule.hpp>

#include <cstddef>

std::size_t count_actions(const ppsched::Schedule& s);

int main() {
  const ppsched::Schedule s;
  return count_actions(s) == 0 ? 0 : 1;
}
