// Data x pipeline parallelism at run time: d replicas of one p-stage pipeline, each on its own
// p ranks, each fed its share of the global batch; each stage's weight gradient is summed over
// its d replicas before optimizer_step, so every replica applies the same update. The sum of a
// stage starts as soon as that stage's last weight-gradient action is done (the executor's
// hook, Executor::set_gradient_reducer, runs it on the rank's own data-parallel stream), so it
// overlaps the drain of the pipeline's other stages.
//
// An engine that sums gradients implements `GradientAllReduce` (NCCL's ncclAllReduce on the
// stream, MPI_Allreduce in a host task); `InProcessAllReduce` is the one for replicas that are
// threads of this process on host memory (the CPU backend in its threaded mode: a replica's
// stream worker waits for the others). `DataParallelWorld` runs d Worlds as one.
//
// Determinism: each replica sums its micro-batches' gradients in micro-batch order (the
// executor's GradAccumulation::microbatch_order), and the replicas' totals are summed in
// replica order, from zero: total = ((0 + g_replica0) + g_replica1) + ... The result is
// bit-identical to unpipelined training that sums the same way; against one flat sum over the
// whole global batch's micro-batches it differs by float rounding only (docs/data-parallel.md).
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"
#include "ppsched/runtime/executor.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/runtime/threads.hpp"
#include "ppsched/runtime/world.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

// An engine that sums one stage's gradient over its replicas: `all_reduce` enqueues on
// `stream` the in-place sum of `gradient` over every replica of `stage`, in replica order,
// and may stop early (with an error) once `stop` is requested.
template <class R, class B>
concept GradientAllReduce = requires(R& r, B& backend, typename B::stream& stream, std::int32_t stage,
                                     typename B::buffer& gradient, std::stop_token stop) {
  r.all_reduce(backend, stream, stage, gradient, stop);
};

// The executor's hook calling `engine` (which must outlive the executor's steps).
template <class B, class R>
  requires GradientAllReduce<R, B>
[[nodiscard]] typename Executor<B>::GradientReducer gradient_reducer(R& engine) {
  return [&engine](B& backend, typename B::stream& stream, std::int32_t stage, typename B::buffer& gradient,
                   std::stop_token stop) { engine.all_reduce(backend, stream, stage, gradient, stop); };
}

// The all-reduce of replicas that are threads of this process, on host memory. One object
// serves every replica; `replica(r)` is replica r's GradientAllReduce. A stage's sum runs when
// its last replica arrives, on that replica's stream worker, and every replica gets a copy.
class InProcessAllReduce {
 public:
  InProcessAllReduce(std::int32_t replicas, std::int32_t stages) : replicas_(replicas) {
    if (replicas < 1 || stages < 1) {
      detail::fail({"InProcessAllReduce", detail::concat(replicas, " replicas of ", stages, " stages"), "",
            "give at least one replica and one stage"});
    }
    for (std::int32_t s = 0; s < stages; ++s) groups_.push_back(std::make_unique<Group>(replicas));
    calls_.resize(static_cast<std::size_t>(replicas) * static_cast<std::size_t>(stages));
  }

  class Replica {
   public:
    // Launches a host task on `stream`: the gradient's host memory is summed with the other
    // replicas' when they have all arrived. The backend's span() must be host memory.
    template <class B>
    void all_reduce(B& backend, typename B::stream& stream, std::int32_t stage, typename B::buffer& gradient,
                    std::stop_token stop) {
      Call& call = owner_->call(replica_, stage);
      call = Call{owner_, replica_, stage, backend.span(gradient), std::move(stop)};
      const BufferUse<typename B::buffer> use{&gradient, Access::read_write};
      backend.launch(stream, HostTask{&InProcessAllReduce::run, &call, "all-reduce"},
                     std::span<const BufferUse<typename B::buffer>>(&use, 1));
    }

   private:
    friend class InProcessAllReduce;
    Replica(InProcessAllReduce* owner, std::int32_t replica) : owner_(owner), replica_(replica) {}
    InProcessAllReduce* owner_;
    std::int32_t replica_;
  };

  [[nodiscard]] Replica replica(std::int32_t r) {
    if (r < 0 || r >= replicas_) {
      detail::fail({"InProcessAllReduce", detail::concat("replica ", r, " of ", replicas_), "", "give a replica in 0 .. d-1"});
    }
    return Replica(this, r);
  }

  // Wakes every waiting replica with an error saying `reason`; later arrivals fail at once,
  // until reset(). For a step that failed on one replica: the others stop instead of waiting.
  void abort(std::string reason) {
    {
      const std::lock_guard<std::mutex> lock(abort_mutex_);
      if (!aborted_.empty()) return;
      aborted_ = std::move(reason);
    }
    for (auto& g : groups_) {
      { const std::lock_guard<std::mutex> lock(g->mutex); }
      g->ready.notify_all();
    }
  }
  // Between steps, after a failed one: forget partial arrivals and the abort.
  void reset() {
    for (auto& g : groups_) {
      const std::lock_guard<std::mutex> lock(g->mutex);
      g->arrived = 0;
    }
    const std::lock_guard<std::mutex> lock(abort_mutex_);
    aborted_.clear();
  }

 private:
  struct Group {
    explicit Group(std::int32_t replicas) : parts(static_cast<std::size_t>(replicas)) {}
    std::mutex mutex;
    std::condition_variable_any ready;
    std::vector<std::span<float>> parts;
    std::vector<float> sum;
    std::int32_t arrived = 0;
    std::uint64_t generation = 0;
  };
  struct Call {
    InProcessAllReduce* owner = nullptr;
    std::int32_t replica = 0;
    std::int32_t stage = 0;
    std::span<float> gradient;
    std::stop_token stop;
  };

  std::int32_t replicas_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::vector<Call> calls_;  // per (replica, stage): what its host task reads
  std::mutex abort_mutex_;
  std::string aborted_;

  [[nodiscard]] Call& call(std::int32_t replica, std::int32_t stage) {
    if (stage < 0 || static_cast<std::size_t>(stage) >= groups_.size()) {
      detail::fail({"InProcessAllReduce", detail::concat("stage ", stage, " of ", groups_.size()), "",
            "make it with the schedule's stage count"});
    }
    return calls_[static_cast<std::size_t>(replica) * groups_.size() + static_cast<std::size_t>(stage)];
  }
  [[nodiscard]] std::string aborted() {
    const std::lock_guard<std::mutex> lock(abort_mutex_);
    return aborted_;
  }
  [[nodiscard]] bool is_aborted() {
    const std::lock_guard<std::mutex> lock(abort_mutex_);
    return !aborted_.empty();
  }

  static void run(void* context) {
    const Call& c = *static_cast<const Call*>(context);
    c.owner->arrive(c);
  }

  void arrive(const Call& c) {
    Group& g = *groups_[static_cast<std::size_t>(c.stage)];
    // Built only for an error: the steady state allocates nothing.
    const auto where = [&] {
      return detail::concat("stage ", c.stage, " all-reduce over ", replicas_, " replicas (replica ", c.replica, ")");
    };
    std::unique_lock<std::mutex> lock(g.mutex);
    if (c.stop.stop_requested()) throw error(where() + ": this replica's step failed before it arrived");
    if (is_aborted()) throw error(where() + ": " + aborted());
    g.parts[static_cast<std::size_t>(c.replica)] = c.gradient;
    const std::uint64_t generation = g.generation;
    if (++g.arrived == replicas_) {
      // Replica order, from zero: the association the unpipelined reference uses.
      g.sum.assign(c.gradient.size(), 0.0f);
      for (const std::span<float> part : g.parts) {
        if (part.size() != g.sum.size()) throw error(where() + ": replicas gave gradients of different sizes");
        for (std::size_t i = 0; i < part.size(); ++i) g.sum[i] += part[i];
      }
      for (const std::span<float> part : g.parts) std::copy(g.sum.begin(), g.sum.end(), part.begin());
      g.arrived = 0;
      ++g.generation;
      lock.unlock();
      g.ready.notify_all();
      return;
    }
    g.ready.wait(lock, c.stop, [&] { return g.generation != generation || is_aborted(); });
    if (g.generation != generation) return;
    // Withdrawn: the others must not sum this replica's gradient of a failed step.
    --g.arrived;
    g.parts[static_cast<std::size_t>(c.replica)] = {};
    if (c.stop.stop_requested()) throw error(where() + ": this replica's step failed while it waited");
    throw error(where() + ": " + aborted());
  }
};

// Every stage's optimizer step of a step, or none (issue 24, item 8). Without it each rank
// applies its stages' optimizer steps as soon as its own part of the step is done, so a step
// that fails late on one rank (stage 0's last backward, say) leaves the ranks that had
// finished stepped and the others not. defer() gives the stages an optimizer_step that only
// records its call (the context and the summed gradient, which stays in the executor's buffer
// until its next step); step(run) runs the step and then every recorded call if `run`
// returned, none if it threw. `run` is World::run_step, DataParallelWorld::run_step (one
// AllOrNoneOptimizer for every replica's stages) or MpiExecutor::run_step (one per process:
// its run_step returns on every process or throws on every process, so the processes commit
// together too).
//
// What it costs: the optimizer steps run after the whole step, one after another on the
// calling thread, instead of on each rank's stream as soon as that rank is done, so the step
// grows by up to the sum of this process's optimizer steps (they no longer overlap the other
// ranks' drain); and the gradients stay in the executors' buffers until the commit, which
// they do anyway. An optimizer_step that throws during the commit cannot be undone: the
// error names its stage and how many stages had committed before it. The calls run outside
// StageFunctions::around_call and off the rank's stream: for the CPU backends (a CUDA
// optimizer that enqueues on StageContext::stream still orders after the step's work).
class AllOrNoneOptimizer {
 public:
  AllOrNoneOptimizer() = default;
  AllOrNoneOptimizer(const AllOrNoneOptimizer&) = delete;  // the deferred stages point to it
  AllOrNoneOptimizer& operator=(const AllOrNoneOptimizer&) = delete;
  AllOrNoneOptimizer(AllOrNoneOptimizer&&) = delete;
  AllOrNoneOptimizer& operator=(AllOrNoneOptimizer&&) = delete;

  using Step = decltype(StageFunctions::optimizer_step);

  // `stages` with every optimizer_step deferred to the commit. This object must outlive
  // every executor built from them.
  [[nodiscard]] std::vector<StageFunctions> defer(std::vector<StageFunctions> stages) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (StageFunctions& f : stages) {
      if (!f.optimizer_step) continue;
      real_.push_back(std::move(f.optimizer_step));
      const Step* real = &real_.back();
      f.optimizer_step = [this, real](const StageContext& c, std::span<const float> gradient) {
        const std::lock_guard<std::mutex> held(mutex_);
        calls_.push_back({real, c, gradient});
      };
    }
    return stages;
  }

  // Runs the step, then every deferred optimizer step if it returned; none if it threw.
  template <class Run>
  decltype(auto) step(Run&& run) {
    discard();  // nothing of an earlier step that was not run through here
    struct Forget {
      AllOrNoneOptimizer& self;
      bool armed = true;
      ~Forget() {
        if (armed) self.discard();
      }
    } forget{*this};
    if constexpr (std::is_void_v<decltype(std::forward<Run>(run)())>) {
      std::forward<Run>(run)();
      forget.armed = false;
      commit();
    } else {
      decltype(auto) result = std::forward<Run>(run)();
      forget.armed = false;
      commit();
      return result;
    }
  }

  // The recorded calls, in stage order (for a caller that runs the step itself): commit()
  // applies them, discard() forgets them.
  void commit() {
    std::vector<Call> calls;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      calls.swap(calls_);
    }
    std::stable_sort(calls.begin(), calls.end(), [](const Call& a, const Call& b) { return a.context.stage < b.context.stage; });
    for (std::size_t k = 0; k < calls.size(); ++k) {
      const Call& call = calls[k];
      try {
        (*call.real)(call.context, call.gradient);
      } catch (const std::exception& e) {
        detail::fail({"AllOrNoneOptimizer",
              detail::concat("stage ", call.context.stage, "'s optimizer_step threw during the commit: ", e.what()),
              detail::concat("rank ", call.context.rank, ", step ", call.context.step),
              detail::concat("The ", k, " optimizer steps before it in stage order were applied and cannot be undone; "
                             "the other ", calls.size() - k - 1, " were not")});
      }
    }
    calls.clear();
    const std::lock_guard<std::mutex> lock(mutex_);
    if (calls_.empty()) calls_.swap(calls);  // keeps the capacity: the next step allocates nothing
  }
  void discard() {
    const std::lock_guard<std::mutex> lock(mutex_);
    calls_.clear();
  }
  // How many optimizer steps are recorded and not yet committed or discarded.
  [[nodiscard]] std::size_t pending() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return calls_.size();
  }

 private:
  struct Call {
    const Step* real = nullptr;
    StageContext context;
    std::span<const float> gradient;
  };
  std::mutex mutex_;
  std::deque<Step> real_;  // slots never move: the deferred callables point into it
  std::vector<Call> calls_;
};

// The result of a data-parallel step: every replica's losses, replica after replica.
struct DataParallelStepResult {
  std::vector<float> losses;           // losses[r * m + mb]: replica r's micro-batch mb
  std::vector<Timeline> timelines;     // per replica (World::run_step's)

  [[nodiscard]] double mean_loss() const noexcept {
    double sum = 0.0;
    for (const float l : losses) sum += static_cast<double>(l);
    return losses.empty() ? 0.0 : sum / static_cast<double>(losses.size());
  }
};

// d Worlds of one schedule, each replica on its own p backends with its own copy of the model
// (its StageFunctions), their gradients summed by an InProcessAllReduce. A step runs every
// replica at once, replica 0 on the calling thread and the others on host threads the world
// keeps for every step; a fault on any replica ends every
// replica's step (the others stop waiting in their all-reduces) and the first error is thrown,
// after every replica has stopped. The in-process all-reduce blocks a stream worker until every
// replica arrives: give CpuBackends in threaded mode.
template <class B>
class DataParallelWorld {
 public:
  DataParallelWorld(std::vector<std::vector<B*>> backends, const Schedule& schedule,
                    std::vector<std::vector<StageFunctions>> stages, ExecutorOptions options = {})
      : all_reduce_(static_cast<std::int32_t>(backends.size()), std::max(schedule.stages(), 1)) {
    if (backends.empty() || backends.size() != stages.size()) {
      detail::fail({"DataParallelWorld", detail::concat(backends.size(), " replicas of backends and ", stages.size(), " of stages"), "",
            "give one list of p backends and one list of StageFunctions per replica"});
    }
    if (options.accumulation != GradAccumulation::microbatch_order) {
      detail::fail({"DataParallelWorld", "schedule-order accumulation", "ExecutorOptions::accumulation",
            "use GradAccumulation::microbatch_order: the replica sum's bit-identity rests on it"});
    }
    check_gradients(stages);
    for (std::size_t r = 0; r < backends.size(); ++r) {
      worlds_.push_back(std::make_unique<World<B>>(std::move(backends[r]), schedule, std::move(stages[r]), options));
      replica_engines_.push_back(all_reduce_.replica(static_cast<std::int32_t>(r)));
    }
    for (std::size_t r = 0; r < worlds_.size(); ++r) {
      for (int rank = 0; rank < worlds_[r]->ranks(); ++rank) {
        worlds_[r]->set_gradient_reducer(rank, gradient_reducer<B>(replica_engines_[r]));
      }
    }
    result_.timelines.resize(worlds_.size());
    drivers_.start(1, worlds_.size(), [this](std::size_t r) { run_replica(r); });
  }

  DataParallelWorld(const DataParallelWorld&) = delete;
  DataParallelWorld& operator=(const DataParallelWorld&) = delete;
  DataParallelWorld(DataParallelWorld&&) = delete;
  DataParallelWorld& operator=(DataParallelWorld&&) = delete;
  ~DataParallelWorld() { drivers_.stop(); }

  // One step: `batches[r]` is replica r's share of the global batch (m micro-batches each).
  // Calls from several threads wait their turn.
  const DataParallelStepResult& run_step(std::span<const Batch> batches) {
    const std::lock_guard<std::mutex> one_step_at_a_time(step_mutex_);
    if (batches.size() != worlds_.size()) {
      detail::fail({"DataParallelWorld", detail::concat(batches.size(), " batches for ", worlds_.size(), " replicas"), "batches",
            "give one batch per replica: its share of the global batch"});
    }
    batches_ = batches;
    first_ = nullptr;
    drivers_.begin();
    run_replica(0);
    drivers_.wait();
    if (first_) {
      all_reduce_.reset();
      std::rethrow_exception(first_);
    }
    result_.losses.clear();
    for (std::size_t r = 0; r < worlds_.size(); ++r) {
      const StepResult& step = worlds_[r]->last_step();
      result_.losses.insert(result_.losses.end(), step.losses.begin(), step.losses.end());
      result_.timelines[r] = step.timeline;
    }
    return result_;
  }

  [[nodiscard]] int replicas() const noexcept { return static_cast<int>(worlds_.size()); }
  [[nodiscard]] World<B>& replica(int r) { return *worlds_.at(static_cast<std::size_t>(r)); }

 private:
  InProcessAllReduce all_reduce_;  // declared before the Worlds: their streams use it
  std::vector<InProcessAllReduce::Replica> replica_engines_;
  std::vector<std::unique_ptr<World<B>>> worlds_;
  DataParallelStepResult result_;
  std::mutex step_mutex_;
  std::mutex mutex_;  // guards first_ while replicas fail
  std::span<const Batch> batches_;
  std::exception_ptr first_;
  // Replicas 1 .. d-1 run on host threads kept for every step (replica 0 on the caller's);
  // last, so that they stop before the rest goes.
  detail::StepThreads drivers_;

  // A stage's weight gradient must be alike on every replica: one whose gradient is empty
  // never calls its all-reduce (it has nothing to sum), so the other replicas waited in theirs
  // until the watchdog, and forever without one; sizes that differ failed only in the sum
  // (issue 24). Checked before any World is built.
  static void check_gradients(const std::vector<std::vector<StageFunctions>>& stages) {
    for (std::size_t r = 1; r < stages.size(); ++r) {
      for (std::size_t s = 0; s < std::min(stages[r].size(), stages[0].size()); ++s) {
        const std::size_t here = stages[r][s].weight_grad_size, there = stages[0][s].weight_grad_size;
        if (here == there) continue;
        detail::fail({"DataParallelWorld",
              detail::concat("stage ", s, "'s weight gradient is ", here, " floats on replica ", r, " but ", there,
                             " on replica 0", here == 0 || there == 0 ? ": a replica without one never reaches the sum" : ""),
              "StageFunctions::weight_grad_size", "Give every replica of a stage the same weight gradient size"});
      }
    }
  }

  void run_replica(std::size_t r) {
    try {
      (void)worlds_[r]->run_step(batches_[r]);
    } catch (...) {
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        // With replicas, the executor's "rank N" is a rank of replica r's pipeline: say which.
        if (!first_) first_ = with_replica(r, std::current_exception());
      }
      // The others stop waiting for this replica in their all-reduces.
      all_reduce_.abort(detail::concat("replica ", r, "'s step failed"));
    }
  }

  [[nodiscard]] static std::exception_ptr with_replica(std::size_t r, std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return std::make_exception_ptr(error(detail::concat("replica ", r, ": ", x.what())));
    } catch (...) {
      return e;
    }
  }
};

}  // namespace ppsched
