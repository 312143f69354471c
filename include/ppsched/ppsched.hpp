// The umbrella header: everything in ppsched that needs no GPU toolkit. CUDA support is
// opt-in through <ppsched/backend/cuda.hpp>, included on purpose by GPU code only.
#pragma once

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/trace/timeline.hpp"
