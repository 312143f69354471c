// How ppsched's heavy functions are compiled. By default the library is header-only: every
// function is inline and every translation unit that calls one compiles it. With
// PPSCHED_COMPILED defined in every translation unit of a program, the functions that cost
// the most to compile (the schedule generators behind make_schedule, lower, validate,
// simulate, the timeline text and writers, the planner and search, and the runtime's World
// and Executor over the CPU backend) are only declared, and one .cpp file of the program
// compiles them by including <ppsched/compiled.hpp>. Meson users get both from
// dependency('ppsched-compiled'), CMake users from ppsched::compiled. What runs is the same
// code either way; only where it is compiled changes (docs/performance.md, "Compile time").
//
// A moved function is declared `PPSCHED_OUTLINE T f(args);` in its header and defined in the
// folder's impl/<header>.ipp, which the header includes at its end under
// `#if PPSCHED_OUTLINE_BODY`: a compiled-mode file then never reads the bodies, nor the
// standard headers only they use (the .ipp includes those). A class's large members are moved
// the same way (declared in the class, defined `PPSCHED_OUTLINE T C::f(...)` in the .ipp), and
// so is a detail template that only moved bodies call. Move a function when its code is large or
// it instantiates standard templates (sort, vector growth, streams) that nothing else needs: the
// gain is its code and all it alone pulls in. What stays inline: templates a user's code
// instantiates, constexpr functions (partition/chain.hpp's partitioner runs at compile time),
// and small functions on a hot path (the per-action costs of costs/cost_model.hpp, accessors).
#pragma once

#if defined(PPSCHED_BUILDING_COMPILED) && !defined(PPSCHED_COMPILED)
#define PPSCHED_COMPILED
#endif

#if defined(PPSCHED_COMPILED)
// One definition for the whole program, in the translation unit that includes
// <ppsched/compiled.hpp>; everywhere else a declaration.
#define PPSCHED_OUTLINE
#if defined(PPSCHED_BUILDING_COMPILED)
#define PPSCHED_OUTLINE_BODY 1
#else
#define PPSCHED_OUTLINE_BODY 0
#endif
#else
#define PPSCHED_OUTLINE inline
#define PPSCHED_OUTLINE_BODY 1
#endif

// Every ppsched name lives in an inline namespace named after the mode, ppsched::v0_1_header_only
// or ppsched::v0_1_compiled, opened by each header as `namespace ppsched::inline PPSCHED_MODE`
// (as CUB tags its configuration). User code still writes ppsched::lower. Without the tag a
// header-only and a compiled-mode file of one program would hold an inline and a non-inline
// definition of the same function, and inline callers (lower's two-argument form, World)
// whose bodies call different functions under one name: undefined behaviour, undiagnosed.
// With it the two modes are two disjoint libraries: files that share no ppsched type across
// their boundary each run their own mode's code (well-defined); a function of one file whose
// signature names a ppsched type, called from a file of the other mode, names another symbol
// and fails to link. tests/check_mixed_modes.py checks both.
//
// The tag carries the version as well (ppsched::v0_1_header_only): two versions whose types
// may differ in layout are two libraries too, so a program whose files were built against
// different versions fails to link where they exchange a ppsched type instead of misreading
// it. Within 0.x the minor version breaks; from 1.0 only the major will.
#define PPSCHED_VERSION_MAJOR 0
#define PPSCHED_VERSION_MINOR 1
#define PPSCHED_VERSION_PATCH 0
#if defined(PPSCHED_MODE)
#error "PPSCHED_MODE is set by <ppsched/config.hpp> from PPSCHED_COMPILED; do not define it"
#endif
#if defined(PPSCHED_COMPILED)
#define PPSCHED_MODE v0_1_compiled
#else
#define PPSCHED_MODE v0_1_header_only
#endif
