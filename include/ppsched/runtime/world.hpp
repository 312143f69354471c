// A World runs p ranks of one schedule in one process, one host thread per rank — the shape
// the CUDA backend has with one thread per GPU. It owns an Executor per rank, starts the
// rank threads once and keeps them for every step, gathers the step's losses and a single
// Timeline of every rank, and turns a fault on any rank into one ppsched::error for the
// caller: the first error, after every rank has stopped and every backend has recovered,
// so the next step can run (or the World be destroyed) cleanly.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"
#include "ppsched/runtime/executor.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/runtime/threads.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct StepResult {
  std::vector<float> losses;  // per micro-batch, as the last stage's loss returned them (forward-only
                              // steps too, given targets; NaN without)
  std::vector<float> outputs;  // with ExecutorOptions::keep_outputs: m x the last stage's output_size
  Timeline timeline;          // every rank's actions, in ms from the step's earliest origin
                              // (no spans with ExecutorOptions::record_timeline off)

  [[nodiscard]] double mean_loss() const noexcept {
    double sum = 0.0;
    for (float l : losses) sum += static_cast<double>(l);
    return losses.empty() ? 0.0 : sum / static_cast<double>(losses.size());
  }
};

template <class B>
class World {
  static_assert(check_backend<B>());

 public:
  // `ranks[r]` is rank r's backend; they must outlive the World. A compute-only schedule is
  // lowered with unit times (lower(schedule)); with `options.validate` a schedule that came
  // with its own communication is validated once, here (one lower() wrote is proven already).
  World(std::vector<B*> ranks, const Schedule& schedule, std::vector<StageFunctions> stages,
        ExecutorOptions options = {})
      : backends_(std::move(ranks)), stages_(std::move(stages)) {
    if (is_lowered(schedule)) {
      schedule_ = schedule;
    } else {
      adopt(lower(schedule));
    }
    init(options);
  }
  // A schedule lower() wrote runs as it is, its proof kept: not lowered or validated again.
  World(std::vector<B*> ranks, const LoweredSchedule& schedule, std::vector<StageFunctions> stages,
        ExecutorOptions options = {})
      : backends_(std::move(ranks)), stages_(std::move(stages)) {
    proven_ = schedule.proven();
    schedule_ = schedule.schedule();
    init(options);
  }
  // Lowers a compute-only schedule with the cost model's times, as simulate(schedule, costs)
  // does (lower(schedule, lower_options_for(costs, ...))): the World runs exactly the
  // programs the simulator timed. A lowered schedule is run as it is.
  World(std::vector<B*> ranks, const Schedule& schedule, const CostModel& costs, std::vector<StageFunctions> stages,
        ExecutorOptions options = {})
      : backends_(std::move(ranks)), stages_(std::move(stages)) {
    if (is_lowered(schedule)) {
      schedule_ = schedule;
    } else {
      adopt(lower(schedule, lower_options_for(costs, schedule.stages(), schedule.microbatches)));
    }
    init(options);
  }

  World(const World&) = delete;
  World& operator=(const World&) = delete;
  World(World&&) = delete;
  World& operator=(World&&) = delete;
  ~World() { threads_.stop(); }

  // Runs one training step on every rank. Throws the step's first error (naming rank,
  // stage, micro-batch and action) after every rank has stopped; the World stays usable.
  // Calls from several threads wait their turn: a World runs one step at a time. The result
  // is the World's, valid until the next step starts.
  const StepResult& run_step(const Batch& batch) {
    // Held for the whole step: a second caller bumping the generation mid-step reset the
    // count of running ranks and returned while its step never ran.
    const std::lock_guard<std::mutex> one_step_at_a_time(step_mutex_);
    check_batch(batch);
    if constexpr (requires(B & b) { b.host_begin(); }) {
      for (B* b : backends_) b->host_begin();
    }
    batch_ = batch;
    threads_.begin();
    threads_.wait();
    if (const std::exception_ptr first = faults_.first()) {
      for (B* b : backends_) b->recover();
      faults_.reset();
      std::rethrow_exception(first);
    }
    gather();
    return result_;
  }

  // A new schedule from the next step on the same ranks and stages (a plan every step,
  // plan/varlen.hpp: another family, placement or micro-batch count), lowered and validated
  // once here as the constructors do, then each rank's executor plans it and takes its buffers
  // and events from those it holds (Executor::set_schedule). Returns what the ranks' pools
  // grew by: nothing when every rank's new plan fits what earlier plans needed, else the
  // buffers and events allocated here, before the step (counted in pools()). A schedule for
  // another rank or stage count is refused, naming both, and the World keeps its schedule.
  // Waits for a running step to end first.
  PoolGrowth set_schedule(const Schedule& schedule) {
    if (is_lowered(schedule)) return replan(schedule, false);
    LoweredSchedule lowered = lower(schedule);
    const bool proven = lowered.proven();
    return replan(std::move(lowered).release(), proven);
  }
  PoolGrowth set_schedule(const LoweredSchedule& schedule) { return replan(schedule.schedule(), schedule.proven()); }
  PoolGrowth set_schedule(const Schedule& schedule, const CostModel& costs) {
    if (is_lowered(schedule)) return replan(schedule, false);
    LoweredSchedule lowered = lower(schedule, lower_options_for(costs, schedule.stages(), schedule.microbatches));
    const bool proven = lowered.proven();
    return replan(std::move(lowered).release(), proven);
  }
  // Every rank's pools together (Executor::pools); `growths` counts the set_schedule calls
  // that grew any rank's.
  [[nodiscard]] ExecutorPools pools() const noexcept {
    ExecutorPools all;
    for (const auto& e : executors_) {
      all.buffers += e->pools().buffers;
      all.floats += e->pools().floats;
      all.events += e->pools().events;
    }
    all.growths = growths_;
    return all;
  }

  // Every rank's watchdog from the next step (waits for a running step to end first).
  void set_watchdog(std::chrono::milliseconds watchdog) {
    const std::lock_guard<std::mutex> between_steps(step_mutex_);
    for (auto& e : executors_) e->set_watchdog(watchdog);
  }

  // Data parallelism: rank `rank`'s gradient reducer (Executor::set_gradient_reducer), from
  // the next step (waits for a running step to end first).
  void set_gradient_reducer(int rank, typename Executor<B>::GradientReducer reducer) {
    const std::lock_guard<std::mutex> between_steps(step_mutex_);
    executors_.at(static_cast<std::size_t>(rank))->set_gradient_reducer(std::move(reducer));
  }

  [[nodiscard]] const Schedule& schedule() const noexcept { return schedule_; }
  [[nodiscard]] int ranks() const noexcept { return schedule_.ranks; }
  [[nodiscard]] const Executor<B>& executor(int rank) const { return *executors_.at(static_cast<std::size_t>(rank)); }
  [[nodiscard]] const StepResult& last_step() const noexcept { return result_; }

 private:
  std::vector<B*> backends_;
  Schedule schedule_;
  bool proven_ = false;  // lower() wrote schedule_: validate()'s checks hold by construction
  bool validate_ = true;  // ExecutorOptions::validate: set_schedule validates as the constructor did
  std::vector<StageFunctions> stages_;
  std::vector<std::unique_ptr<Executor<B>>> executors_;
  std::mutex step_mutex_;  // one run_step at a time
  Batch batch_{};
  bool record_timeline_ = true;
  bool has_backward_ = false;
  StepFaults faults_;
  StepResult result_;
  std::size_t growths_ = 0;  // set_schedule calls that grew a rank's pools
  detail::StepThreads threads_;  // one per rank; last, so that it stops before the rest goes

  void adopt(LoweredSchedule lowered) {
    proven_ = lowered.proven();
    schedule_ = std::move(lowered).release();
  }

  void init(ExecutorOptions options) {
    if (backends_.size() != static_cast<std::size_t>(schedule_.ranks)) {
      detail::fail({"World",
            detail::concat("got ", backends_.size(), " backends for schedule '", schedule_.name, "' with ",
                           schedule_.ranks, " ranks"),
            "", "Give one backend per rank of the schedule"});
    }
    for (std::size_t r = 0; r < backends_.size(); ++r) {
      if (backends_[r] == nullptr || backends_[r]->rank() != static_cast<int>(r)) {
        detail::fail({"World", detail::concat("backend ", r, " is ", backends_[r] == nullptr ? "null" : "another rank"), "",
              "Pass the backends in rank order"});
      }
    }
    if (stages_.empty()) {
      detail::fail({"World", detail::concat("no StageFunctions for schedule '", schedule_.name, "'"), "",
            "Give one StageFunctions per stage of the schedule"});
    }
    validate_ = options.validate;
    if (options.validate && !proven_) (void)validate_or_throw(schedule_);
    options.validate = false;
    record_timeline_ = options.record_timeline;
    for (const auto& prog : schedule_.programs) {
      for (const Action& a : prog) has_backward_ = has_backward_ || is_backward(a.op);
    }
    // Each executor keeps only its rank's program (executor.hpp), so the World holds the
    // schedule once.
    for (B* b : backends_) {
      executors_.push_back(
          std::make_unique<Executor<B>>(*b, schedule_, std::span<const StageFunctions>(stages_), options));
    }
    size_result();
    threads_.start(0, backends_.size(), [this](std::size_t r) { run_rank(r); });
  }

  void size_result() {
    result_.losses.assign(static_cast<std::size_t>(schedule_.microbatches), 0.0f);
    result_.timeline.ranks = schedule_.ranks;
    result_.timeline.unit = "ms";  // a measured timeline's unit: the clock's time, in ms as the profiler's
    std::size_t actions = 0;
    for (const auto& prog : schedule_.programs) actions += prog.size();
    result_.timeline.spans.reserve(actions);
  }

  // set_schedule: checked against the World first (ranks, stages, validation), so that no
  // executor takes a schedule another would refuse; each executor's own checks (its stages'
  // callables, say, for a schedule that splits the backward) come before it changes anything,
  // and a refusal there puts the ranks that took the new schedule back on the old one.
  PoolGrowth replan(Schedule lowered, bool proven) {
    const std::lock_guard<std::mutex> between_steps(step_mutex_);
    if (lowered.ranks != schedule_.ranks || lowered.stages() != schedule_.stages()) {
      detail::fail({"World::set_schedule",
                    detail::concat("schedule '", lowered.name, "' has ", lowered.ranks, " ranks and ", lowered.stages(),
                                   " stages; the World runs ", schedule_.ranks, " ranks and ", schedule_.stages(),
                                   " stages (schedule '", schedule_.name, "')"),
                    "", "Plan for the World's ranks and StageFunctions, or build another World"});
    }
    if (validate_ && !proven) (void)validate_or_throw(lowered);
    PoolGrowth growth;
    std::size_t done = 0;
    try {
      for (; done < executors_.size(); ++done) growth += executors_[done]->set_schedule(lowered);
    } catch (...) {
      for (std::size_t r = 0; r < done; ++r) (void)executors_[r]->set_schedule(schedule_);
      throw;
    }
    schedule_ = std::move(lowered);
    proven_ = proven;
    has_backward_ = false;
    for (const auto& prog : schedule_.programs) {
      for (const Action& a : prog) has_backward_ = has_backward_ || is_backward(a.op);
    }
    size_result();
    if (growth.grew()) ++growths_;
    return growth;
  }

  void check_batch(const Batch& batch) const {
    const auto m = static_cast<std::size_t>(schedule_.microbatches);
    // Side inputs first, here, so that a missing one fails before any rank starts.
    for (std::size_t s = 0; s < stages_.size(); ++s) {
      check_side_inputs(stages_[s], static_cast<std::int32_t>(s), batch, m);
    }
    // Variable-length micro-batches: every stage's size of each, before any rank starts.
    detail::check_sizes(stages_, batch, m);
    const std::size_t inputs = m * input_floats(stages_.front());
    const std::size_t targets = m * stages_.back().target_size;
    if (batch.inputs.size() != inputs) {
      detail::fail({"batch",
            detail::concat("has ", batch.inputs.size(), " input floats; ", m, " micro-batches of ",
                           input_floats(stages_.front()), " need ", inputs),
            "Batch::inputs", "Give exactly microbatches x stage 0's input_size floats"});
    }
    if ((has_backward_ || !batch.targets.empty()) && batch.targets.size() != targets) {
      detail::fail({"batch",
            detail::concat("has ", batch.targets.size(), " target floats; ", m, " micro-batches of ",
                           stages_.back().target_size, " need ", targets),
            "Batch::targets",
            has_backward_ ? "Give exactly microbatches x the last stage's target_size floats"
                          : "Give exactly microbatches x the last stage's target_size floats, or none (no losses)"});
    }
  }

  void run_rank(std::size_t r) {
    try {
      (void)executors_[r]->run_step(batch_, &faults_);
    } catch (...) {
      faults_.report(std::current_exception());  // kept only if it is the step's first
    }
    if constexpr (requires(B & b) { b.host_end(); }) backends_[r]->host_end();
  }

  // One timeline on the earliest rank's clock: each rank's times are from its own origin,
  // recorded when its host started the step.
  void gather() {
    auto earliest = std::chrono::steady_clock::time_point::max();
    for (const auto& e : executors_) earliest = std::min(earliest, e->last_step().origin);
    result_.timeline.spans.clear();
    for (const auto& e : executors_) {
      if (!record_timeline_) break;
      const RankStep& step = e->last_step();
      const double offset = std::chrono::duration<double, std::milli>(step.origin - earliest).count();
      for (Span s : step.spans) {
        s.start += offset;
        s.end += offset;
        result_.timeline.spans.push_back(s);
      }
    }
    const auto last_rank = static_cast<std::size_t>(schedule_.rank_of(schedule_.stages() - 1));
    const auto& losses = executors_[last_rank]->last_step().losses;
    std::copy(losses.begin(), losses.end(), result_.losses.begin());
    const auto& outputs = executors_[last_rank]->last_step().outputs;
    result_.outputs.resize(outputs.size());  // sized by the first step, then reused
    std::copy(outputs.begin(), outputs.end(), result_.outputs.begin());
  }
};

}  // namespace ppsched
