// Everything in ppsched that needs no GPU toolkit and no third-party library, in one include:
// the thin umbrella, the runtime with the CPU backend, the planner and search, the timeline
// writers and schedule CSV, the layouts for Megatron and torchtitan. Convenient where compile
// time does not matter; <ppsched/ppsched.hpp> lists the parts to include one by one where it does.
#pragma once

#include "ppsched/ppsched.hpp"
#include "ppsched/runtime.hpp"

#include "ppsched/partition/frameworks.hpp"
#include "ppsched/plan/plan.hpp"
#include "ppsched/schedule/csv.hpp"
#include "ppsched/trace/chrome_trace.hpp"
#include "ppsched/trace/csv.hpp"
#include "ppsched/trace/svg.hpp"
