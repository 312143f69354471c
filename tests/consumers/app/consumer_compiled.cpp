// A downstream program in compiled mode (dependency('ppsched-compiled')): make_schedule,
// lower and validate are only declared here and come from the subproject's library.
#include <ppsched/ppsched.hpp>

#include <iostream>

static_assert(PPSCHED_OUTLINE_BODY == 0, "dependency('ppsched-compiled') defines PPSCHED_COMPILED");

int main() {
  const ppsched::Schedule s = ppsched::make_schedule("1f1b", {.ranks = 2, .microbatches = 4});
  const bool ok = ppsched::validate(ppsched::lower(s)).ok();
  std::cout << "compiled-mode consumer: 1f1b p=2 m=4 lowers and validates: " << (ok ? "yes" : "no") << '\n';
  return ok ? 0 : 1;
}
