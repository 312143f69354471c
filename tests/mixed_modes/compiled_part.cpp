// Compiled-mode half of the mixed program (tests/check_mixed_modes.py): its calls reach the
// definitions in ppsched::compiled, compiled once in the ppsched_compiled library.
#define PPSCHED_COMPILED
#include <ppsched/ppsched.hpp>
#include <ppsched/runtime.hpp>

#include <sstream>
#include <string>
#include <vector>

static_assert(PPSCHED_OUTLINE_BODY == 0, "this file is the compiled-mode half");

#define PPSCHED_PART(name) compiled_##name
#include "work.inc"
