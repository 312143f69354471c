// The one translation unit that compiles ppsched's heavy functions for a program built with
// PPSCHED_COMPILED (see <ppsched/config.hpp>): include this, and nothing else of ppsched
// before it, in exactly one .cpp file of the program. Meson's `ppsched_compiled_dep` does so
// in src/compiled.cpp.
#pragma once

#if defined(PPSCHED_OUTLINE_BODY)
#error "<ppsched/compiled.hpp> must come before every other ppsched header in its .cpp file"
#endif
#define PPSCHED_BUILDING_COMPILED

#include "ppsched/all.hpp"

// Explicit instantiations: the definitions that runtime.hpp declares `extern` in compiled mode.
template class ppsched::Executor<ppsched::CpuBackend>;
template class ppsched::World<ppsched::CpuBackend>;
