// The abstract execution of docs/execution-model.md: the one engine under lower (which orders
// the communication by an idealised run), validate (which runs it with unit times to prove
// that no timing can deadlock) and simulate (which runs it with a cost model's durations).
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/engine/detail/abstract_execution.hpp"
#include "ppsched/engine/stream_mode.hpp"

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/engine/impl/abstract_execution.ipp"
#endif
