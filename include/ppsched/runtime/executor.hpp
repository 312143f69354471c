// The executor: runs one rank's lowered program on any Backend. The host thread issues the
// program in order — compute actions on the compute stream, each communication group on the
// comm stream as one group_start/group_end — and expresses every order between the two
// streams with one event wait, so communication overlaps compute exactly as far as the
// schedule allows (docs/execution-model.md). It never blocks while issuing: every buffer
// comes from pools sized by the plan (runtime/step_plan.hpp), allocated once, so a step
// allocates nothing. At the end of the step it waits for both streams under a watchdog.
//
// Faults. A user callable that throws becomes a ppsched::error naming the rank, stage,
// micro-batch and action, with the original message. When no action of the rank completes
// for `ExecutorOptions::watchdog`, the step ends with an error naming the actions at the
// head of each stream and what they wait for. Either way the executor reports the error to
// the step's `StepFaults` (first error wins, every other rank is asked to stop, and so is
// every callable that polls `step_stop_token()`), aborts its communicator so every pending
// transfer ends and the work queued behind it is dropped, and then waits — with no deadline —
// until its streams hold no more work: a callable that is running when the step fails is
// the user's code, which nothing can interrupt, and the step's memory stays in use until it
// returns. Only then does it throw, so the next step never meets work of a failed one, and
// the World can recover every backend and run the next step or be destroyed.
//
// The parts, one concern each, are in runtime/executor/: options.hpp, core.hpp (the class),
// setup.hpp, pools.hpp, tied.hpp, issue.hpp, watchdog.hpp, results.hpp.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/runtime/executor/options.hpp"
#include "ppsched/runtime/executor/core.hpp"
#include "ppsched/runtime/executor/setup.hpp"
#include "ppsched/runtime/executor/pools.hpp"
#include "ppsched/runtime/executor/tied.hpp"
#include "ppsched/runtime/executor/issue.hpp"
#include "ppsched/runtime/executor/watchdog.hpp"
#include "ppsched/runtime/executor/results.hpp"
#include "ppsched/runtime/executor/graphs.hpp"
