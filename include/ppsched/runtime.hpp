// Running a schedule, in one include: how user code becomes a stage (StageFunctions), the
// Executor that walks one rank's lowered program over any Backend, the World of p ranks in
// one process, synthetic stages, and the CPU backend. Opt-in so that code which only plans
// or simulates does not compile the runtime (see <ppsched/ppsched.hpp>).
#pragma once

#include "ppsched/runtime/backend.hpp"
#include "ppsched/runtime/data_parallel.hpp"
#include "ppsched/runtime/executor.hpp"
#include "ppsched/runtime/payload.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/runtime/synthetic.hpp"
#include "ppsched/runtime/world.hpp"

#include "ppsched/backend/cpu.hpp"
#include "ppsched/config.hpp"

#if defined(PPSCHED_COMPILED) && !defined(PPSCHED_BUILDING_COMPILED)
// Compiled once, in the translation unit that includes <ppsched/compiled.hpp>.
extern template class ppsched::Executor<ppsched::CpuBackend>;
extern template class ppsched::World<ppsched::CpuBackend>;
#endif
