// Part of <ppsched/runtime/executor.hpp> (include that): the executor's options, the faults a
// step's ranks share, and what one rank's step produces.
#pragma once

#include "ppsched/config.hpp"

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/runtime/graph_capture.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/runtime/executor/detail/options.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct ExecutorOptions {
  GradAccumulation accumulation = GradAccumulation::microbatch_order;
  // A step in which no action of a rank completes for this long ends with an error naming
  // what the rank waits for. Progress is sampled every tenth of it (clamped to 1-100 ms), so
  // the error comes at most that much later than a full period without a completion.
  std::chrono::milliseconds watchdog{10'000};
  // Record each action's start and end (two timing events per action).
  bool record_timeline = true;
  // Validate the (lowered) schedule before running it; off, a deadlocking schedule is caught
  // by the watchdog instead.
  bool validate = true;
  // The user's seed of StageContext::seed (stage_seed(seed, step, stage, micro-batch)).
  std::uint64_t seed = 0;
  // Copy the last stage's forward output of every micro-batch into the step's result
  // (RankStep::outputs, StepResult::outputs), in training and in forward-only steps.
  bool keep_outputs = false;
  // Parameters shared between stages: their gradients are summed across the owning ranks
  // after the flush, before optimizer_step (TiedWeights, runtime/stage.hpp).
  std::vector<TiedWeights> tied_weights;
  // Capture the steady-state step once and replay it (CUDA Graphs; the CPU backend models
  // them): runtime/graph_capture.hpp, docs/gpu.md ("CUDA Graphs").
  GraphOptions graphs;
};

// What Executor::set_schedule (World::set_schedule: every rank's) added to the pools: the
// backend buffers and their floats, and the events, that the new plan needed beyond every
// earlier one's. All zero when it fit.
struct PoolGrowth {
  std::size_t buffers = 0;
  std::size_t floats = 0;
  std::size_t events = 0;

  [[nodiscard]] bool grew() const noexcept { return buffers != 0 || events != 0; }
  PoolGrowth& operator+=(const PoolGrowth& o) noexcept {
    buffers += o.buffers;
    floats += o.floats;
    events += o.events;
    return *this;
  }
  friend bool operator==(const PoolGrowth&, const PoolGrowth&) = default;
};

// What an executor holds of its backend, for every plan it has run (Executor::pools): the
// buffers (boundaries, weight gradients, tied slices, the host pool, scratch) and their
// floats, the per-step events, and how many set_schedule calls grew them. A buffer or event
// is never freed before the executor is.
struct ExecutorPools {
  std::size_t buffers = 0;
  std::size_t floats = 0;
  std::size_t events = 0;
  std::size_t growths = 0;  // set_schedule calls that allocated (the constructor's plan not counted)
};

// The faults of one step, shared by its ranks: the first error reported is kept and every
// rank is asked to stop through the token.
class StepFaults {
 public:
  void report(std::exception_ptr e) noexcept {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::move(e);
    }
    stop_.request_stop();
  }
  [[nodiscard]] std::stop_token token() const noexcept { return stop_.get_token(); }
  [[nodiscard]] std::exception_ptr first() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return first_;
  }
  // Before the next step: forget the error (a stop source, once requested, is replaced).
  void reset() {
    const std::lock_guard<std::mutex> lock(mutex_);
    first_ = nullptr;
    if (stop_.stop_requested()) stop_ = std::stop_source();
  }

 private:
  mutable std::mutex mutex_;
  std::exception_ptr first_;
  std::stop_source stop_;
};

// What one rank's step produced.
struct RankStep {
  std::vector<float> losses;                       // per micro-batch; NaN on a rank without the last stage,
                                                   // and in a forward-only step without targets or loss
  std::vector<float> outputs;                      // with keep_outputs, on the last stage's rank: m x its output_size
  std::vector<Span> spans;                         // one per action of the rank's program, in ms from `origin`
  std::chrono::steady_clock::time_point origin{};  // when the step's origin was recorded (host clock)
};

}  // namespace ppsched
