// The seam between ppsched-bubbles and the backend it measures on. The tool (bubbles.hpp)
// owns everything a user sees — flags, model, schedules, prediction, report, JSON — and asks
// a `BubblesBackend` only to run a lowered schedule's steps and hand back their measured
// timelines. The CPU backend's is in bubbles.hpp; the CUDA backend's is compiled by nvcc in
// examples/ppsched_bubbles_cuda.cu and declared in bubbles_cuda.hpp. This header names no
// JSON library and no CUDA header, so both compilers can include it.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ppsched/schedule/schedule.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::cli {

// The backend cannot run on this machine (a CUDA build with no usable GPU): not bad input,
// so the tool exits with its own status (3) and the message names the cause.
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BubblesBackend {
  std::string name;  // the --backend value that selects it
  // Called once, after the flags are read and before any schedule runs, with the number of
  // ranks every schedule will use. Sets the backend up (finds devices, calibrates) and
  // returns the one-line description the report and the JSON print. Throws
  // BackendUnavailable when the machine cannot run it.
  std::function<std::string(std::int32_t ranks)> prepare;
  // Runs `warmup` unmeasured and then `steps` measured steps of the lowered schedule with
  // synthetic stages taking the cost model's times (in ms) and returns the measured steps'
  // timelines, in order, in ms.
  std::function<std::vector<Timeline>(const Schedule& lowered, const CostModel& cost_ms, std::int32_t warmup,
                                      std::int32_t steps)>
      run;
};

}  // namespace ppsched::cli
