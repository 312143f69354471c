// Header-only half of the mixed program (tests/check_mixed_modes.py): the same work as
// compiled_part.cpp, through the inline definitions in ppsched::header_only. Only plain
// values cross to the other file.
#include <ppsched/ppsched.hpp>
#include <ppsched/runtime.hpp>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

static_assert(PPSCHED_OUTLINE_BODY == 1, "this file is the header-only half");

// Defined in compiled_part.cpp, in compiled mode.
double compiled_makespan(const char* family);
std::string compiled_lowered_text(const char* family);
double compiled_step_loss();

namespace {

#define PPSCHED_PART(name) header_only_##name
#include "work.inc"

}  // namespace

int main() {
  int failures = 0;
  for (const char* family : {"1f1b", "zb-h1", "gpipe"}) {
    const double a = header_only_makespan(family), b = compiled_makespan(family);
    if (a != b) {
      std::printf("FAIL %s: makespan %g header-only, %g compiled\n", family, a, b);
      ++failures;
    }
    if (header_only_lowered_text(family) != compiled_lowered_text(family)) {
      std::printf("FAIL %s: the lowered schedules differ\n", family);
      ++failures;
    }
  }
  const double a = header_only_step_loss(), b = compiled_step_loss();
  if (a != b) {
    std::printf("FAIL World: loss %.9g header-only, %.9g compiled\n", a, b);
    ++failures;
  }
  std::printf("%s\n", failures == 0 ? "both modes in one program: same results" : "mixed program FAILED");
  return failures == 0 ? 0 : 1;
}
