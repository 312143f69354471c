// Part of <ppsched/runtime/executor.hpp> (include that): the Executor class, its public interface
// and its state. Its private work is defined by concern in the files beside this one.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"
#include "ppsched/runtime/step_plan.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/runtime/executor/options.hpp"
#include "ppsched/runtime/graph_capture.hpp"

namespace ppsched::inline PPSCHED_MODE {

template <class B>
class Executor {
  static_assert(check_backend<B>());

 public:
  using Buffer = typename B::buffer;
  using HostBuffer = typename detail::host_buffer_of<B>::type;

  // `stages`: one per stage of the schedule (only those placed on this rank are called);
  // they must outlive the executor. A compute-only schedule is lowered first, with unit
  // times (lower(schedule)); give a CostModel to lower it as simulate() does.
  Executor(B& backend, const Schedule& schedule, std::span<const StageFunctions> stages, ExecutorOptions options = {})
      : b_(backend), stages_(stages), options_(options), rank_(backend.rank()) {
    if (is_lowered(schedule)) {
      init(schedule, false);
    } else {
      const LoweredSchedule lowered = lower(schedule);
      init(lowered.schedule(), lowered.proven());
    }
  }
  // A schedule lower() wrote runs as it is, its proof kept: not lowered or validated again.
  Executor(B& backend, const LoweredSchedule& schedule, std::span<const StageFunctions> stages,
           ExecutorOptions options = {})
      : b_(backend), stages_(stages), options_(options), rank_(backend.rank()) {
    init(schedule.schedule(), schedule.proven());
  }
  // Lowers a compute-only schedule with the cost model's times,
  // lower(schedule, lower_options_for(costs, ...)): the program simulate(schedule, costs)
  // times is the program this executor runs. A lowered schedule is run as it is.
  Executor(B& backend, const Schedule& schedule, const CostModel& costs, std::span<const StageFunctions> stages,
           ExecutorOptions options = {})
      : b_(backend), stages_(stages), options_(options), rank_(backend.rank()) {
    if (is_lowered(schedule)) {
      init(schedule, false);
    } else {
      const LoweredSchedule lowered =
          lower(schedule, lower_options_for(costs, schedule.stages(), schedule.microbatches));
      init(lowered.schedule(), lowered.proven());
    }
  }

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  Executor(Executor&&) = delete;
  Executor& operator=(Executor&&) = delete;
  ~Executor() = default;

  // Runs one step of the schedule on this rank. Throws ppsched::error on a fault (see the
  // header comment); `faults` is shared with the step's other ranks, if any.
  // Calls from several threads run one at a time (the executor's streams, buffers and result
  // belong to one step); the returned reference holds until the next step starts.
  const RankStep& run_step(const Batch& batch, StepFaults* faults = nullptr) {
    const std::lock_guard<std::mutex> one_step_at_a_time(step_mutex_);
    check_batch(batch);
    if (faults == nullptr) {  // a rank run alone still stops its own callables on a fault
      own_faults_.reset();
      faults = &own_faults_;
    }
    step_stop_ = faults->token();
    batch_ = batch;
    ++step_index_;
    if (forward_loss_) std::fill(result_.losses.begin(), result_.losses.end(), std::numeric_limits<float>::quiet_NaN());
    if (options_.graphs.enabled) {
      try {
        check_graph_batch(batch);
      } catch (...) {
        graph_failed();  // a World recovers every rank after a refused batch: the graph goes
        throw;
      }
    }
    try {
      if (options_.graphs.enabled && eager_left_ <= 0) {
        run_graph_step(faults);  // executor/graphs.hpp: capture once, then replay
      } else {
        issue_all();
        wait_all(faults);
        if (eager_left_ > 0) --eager_left_;
      }
      read_losses();
    } catch (...) {
      try {
        fail_step(std::current_exception(), faults);
      } catch (...) {
        graph_failed();  // the streams are drained: the graph may go
        throw;
      }
    }
    collect();
    return result_;
  }

  // The schedule as this rank keeps it: name, counts, placement, and this rank's program
  // only (the other ranks' programs are empty). A rank needs nothing more of its peers than
  // where their stages are, so its memory does not grow with the number of ranks.
  // Changes the watchdog from the next step (a first step that warms caches may need a
  // longer one than the steady state). Same rules as ExecutorOptions::watchdog.
  void set_watchdog(std::chrono::milliseconds watchdog) {
    const std::lock_guard<std::mutex> between_steps(step_mutex_);
    check_watchdog(watchdog);
    options_.watchdog = watchdog;
  }
  [[nodiscard]] std::chrono::milliseconds watchdog() const noexcept { return options_.watchdog; }

  // Data parallelism (runtime/data_parallel.hpp). Once per step and stage, as soon as the
  // stage's last weight-gradient action is issued, its summed gradient is handed to
  // `reducer(backend, stream, stage, gradient, stop)`, which enqueues on `stream` (the rank's
  // own data-parallel stream, ordered after that action) the sum of `gradient` over the
  // stage's replicas; the optimizer waits for it. `stop` is the step's stop token. Set
  // between steps; an empty function turns it off.
  using GradientReducer = std::function<void(B& backend, typename B::stream& stream, std::int32_t stage,
                                             Buffer& gradient, std::stop_token stop)>;
  void set_gradient_reducer(GradientReducer reducer) {
    const std::lock_guard<std::mutex> between_steps(step_mutex_);
    if (reducer) check_reducer_graphs();
    if (reducer && !reduce_stream_created_) {
      reduce_stream_ = b_.create_stream();
      reduce_stream_created_ = true;
    }
    reducer_ = std::move(reducer);
    if (reduce_stream_created_) plan_reducer();
  }

  // A new schedule from the next step, on the same backend, stages and options: another
  // family, placement or micro-batch count (a plan every step, plan/varlen.hpp), with as
  // many stages as the executor has StageFunctions. Lowered, validated and planned as the
  // constructors do; the rank's plan then takes its buffers and events from those the
  // executor holds (a buffer per plan buffer of the same size), so a schedule whose pools
  // fit what earlier plans needed allocates nothing on the backend. One that needs more than
  // any before (more micro-batches in flight, a longer program) grows the pools here, before
  // its first step: the growth is returned and counted in pools(); nothing is ever freed
  // until the executor is destroyed. Host-side tables (the program, its plan, labels) are
  // rebuilt and may allocate; run_step never does. Waits for a running step to end. A
  // schedule refused here leaves the executor with its previous one.
  PoolGrowth set_schedule(const Schedule& schedule) {
    if (is_lowered(schedule)) return replan(schedule, false);
    const LoweredSchedule lowered = lower(schedule);
    return replan(lowered.schedule(), lowered.proven());
  }
  PoolGrowth set_schedule(const LoweredSchedule& schedule) { return replan(schedule.schedule(), schedule.proven()); }
  PoolGrowth set_schedule(const Schedule& schedule, const CostModel& costs) {
    if (is_lowered(schedule)) return replan(schedule, false);
    const LoweredSchedule lowered =
        lower(schedule, lower_options_for(costs, schedule.stages(), schedule.microbatches));
    return replan(lowered.schedule(), lowered.proven());
  }
  // What the executor holds of the backend for every plan it has run, and how often a new
  // schedule made it grow.
  [[nodiscard]] const ExecutorPools& pools() const noexcept { return pools_; }

  [[nodiscard]] const Schedule& schedule() const noexcept { return schedule_; }
  [[nodiscard]] const std::vector<Action>& program() const noexcept {
    return schedule_.programs[static_cast<std::size_t>(rank_)];
  }
  [[nodiscard]] const RankPlan& plan() const noexcept { return plan_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] const RankStep& last_step() const noexcept { return result_; }
  // Graph mode (ExecutorOptions::graphs): whether a step has been captured, so that the
  // next step replays it.
  [[nodiscard]] bool graph_captured() const noexcept { return graph_ready_; }
  // Floats held for weight gradients (totals and per-micro-batch or scratch buffers).
  [[nodiscard]] std::size_t gradient_floats() const noexcept { return gradient_floats_; }
  // Floats of the host pool that OFFLOAD writes and RELOAD reads (plan().host_pools).
  [[nodiscard]] std::size_t host_floats() const noexcept {
    std::size_t n = 0;
    for (std::size_t f : plan_.host_floats) n += f;
    return n;
  }

 private:
  struct ComputeCall {
    Executor* self = nullptr;
    std::int32_t step = 0;
  };
  struct StageGradients {
    std::int32_t stage = 0;
    bool owned = false;  // `total` and `parts` hold buffers of the pools (returned by release)
    Buffer total;
    std::vector<Buffer> parts;  // slots for micro-batch gradients not yet added (assign_weight_slots)
    std::vector<std::span<float>> part_spans;
    std::span<float> total_span;
  };
  // What a weight-gradient step (B or BW) does with its stage's slots.
  struct WeightStep {
    std::int32_t slot = -1;            // the slot its callable writes; -1: no weight gradient
    std::vector<std::int32_t> adds;  // slots added to the total after it, in micro-batch order
  };
  struct OptimizerCall {
    Executor* self = nullptr;
    std::size_t index = 0;  // into grads_
  };

  B& b_;
  std::mutex step_mutex_;
  Schedule schedule_;  // this rank's view: see schedule()
  std::span<const StageFunctions> stages_;
  ExecutorOptions options_;
  int rank_;
  RankPlan plan_;
  bool has_backward_ = false;
  std::vector<Buffer> buffers_;
  std::vector<std::span<float>> spans_;
  std::vector<HostBuffer> host_buffers_;  // the host pool of OFFLOAD / RELOAD (plan_.host_floats)
  std::vector<std::span<float>> host_spans_;
  // Checking mode of a host-memory backend (its options().checking): the default recompute's
  // output must be the forward's, bit for bit. A forward that reads state it does not keep
  // (or draws randomness not seeded from StageContext::seed) recomputes something else and
  // gives silently wrong gradients; compared here, it fails the step instead. Per
  // (stage, micro-batch): the hash of the forward's output, taken when it ran.
  bool check_recompute_ = false;
  std::vector<std::uint64_t> forward_hash_;
  std::vector<typename B::event> start_events_;
  std::vector<typename B::event> end_events_;
  typename B::event origin_{};
  typename B::event compute_done_{};
  typename B::event comm_done_{};
  typename B::event copy_done_{};
  std::vector<StageGradients> grads_;
  std::vector<std::int32_t> grads_of_stage_;  // stage -> index into grads_, or -1
  std::vector<ComputeCall> calls_;
  std::vector<WeightStep> weight_steps_;  // per step
  // One slice copy (a backend's `copy`, or a host task on host-memory backends).
  struct SliceCopy {
    Executor* self = nullptr;
    Buffer* to = nullptr;
    std::size_t to_offset = 0;
    const Buffer* from = nullptr;
    std::size_t from_offset = 0;
    std::size_t count = 0;
  };
  // A tied group as this rank takes part in it.
  struct TiedGroup {
    std::int32_t root = 0;                    // the rank of the group's first stage: it sums
    std::vector<std::int32_t> stages;         // all of them, ascending
    std::vector<std::size_t> offsets;         // per stage
    std::vector<Buffer> slices;               // per stage: on this rank, its slice; at the root, every
                                              // stage's (received for remote ones); elsewhere empty
    std::vector<char> held;                   // per stage: slices[i] holds a buffer of the pools
    Buffer sum{};                             // at the root
    std::vector<SliceCopy> gather;            // local totals' slices into `slices`
    std::vector<SliceCopy> scatter;           // the sum (root) or the received sum back into the totals
    std::vector<std::string_view> labels;     // per stage, for transfers (interned: label())
    std::size_t count = 0;                    // floats of the shared gradient
    std::size_t index = 0;                    // in ExecutorOptions::tied_weights (the same on every rank)
    bool local = false;                       // every stage on this rank
  };
  std::vector<TiedGroup> tied_;
  typename B::event tied_events_[4] = {};
  Buffer loss_scratch_{};                 // forward-only: the gradient the loss writes and nobody reads
  std::span<float> loss_scratch_span_;
  bool forward_loss_ = false;             // forward-only step on the last stage's rank: F computes the loss
  std::vector<OptimizerCall> optimizer_calls_;
  std::vector<std::vector<BufferUse<Buffer>>> uses_;
  // Per action, interned in label_store_: the CPU backend keeps a task's label as a view (in
  // its race checker's history too), so a label outlives the plan it was made for.
  std::vector<std::string_view> labels_;
  std::set<std::string, std::less<>> label_store_;
  // The pools (set_schedule): buffers no plan uses now, by size, taken again by a later plan.
  std::vector<std::pair<std::size_t, Buffer>> spare_;
  std::vector<std::pair<std::size_t, HostBuffer>> spare_host_;
  ExecutorPools pools_;
  PoolGrowth growth_;         // of the plan being built
  bool counting_growth_ = false;  // false while the constructor builds the first plan
  bool copy_stream_created_ = false;
  bool reduce_stream_created_ = false;
  std::vector<std::int32_t> lane_steps_[3];  // step indices per stream (compute, comm, copy), in order
  std::size_t gradient_floats_ = 0;
  Batch batch_{};
  std::int64_t step_index_ = -1;       // StageContext::step of the running step
  const void* stream_identity_ = nullptr;  // StageContext::stream
  const void* copy_identity_ = nullptr;    // StageContext::stream of offload / reload
  RankStep result_;
  StepFaults own_faults_;          // the step's faults when run_step is given none
  std::stop_token step_stop_;      // the running step's; callables read it on the streams
  std::size_t lane_done_[3] = {};  // steps of each stream known complete in this step
  GradientReducer reducer_;        // data parallelism: see set_gradient_reducer
  // Graph capture (executor/graphs.hpp) and device-side losses.
  typename detail::graph_of<B>::type graph_{};
  bool graph_ready_ = false;        // captured: each step replays graph_
  std::int32_t eager_left_ = 0;     // eager steps before the capture
  std::int64_t graph_step_ = -1;    // the capture's step: StageContext::step of every replayed call
  Batch graph_batch_{};             // the batch the capture read (its memory and sizes)
  std::vector<MicrobatchSize> graph_sizes_;  // its Batch::sizes, as they were at the capture
  typename B::event graph_fork_{};  // the comm and copy streams join the capture on it
  typename B::event graph_done_{};  // recorded after each replay; the host waits for it
  bool graph_events_ = false;       // graph_fork_ and graph_done_ are created
  bool device_loss_ = false;        // the last stage on this rank gives device_loss
  Buffer losses_{};                 // its losses, one float per micro-batch
  std::span<float> losses_span_;
  HostBuffer losses_host_{};        // where they are copied to, on backends with copy_to_host
  std::vector<typename B::event> reduced_;      // per grads_ entry: its sum over replicas is done
  std::vector<std::int32_t> last_weight_step_;  // per grads_ entry: the step of its last B or BW
  // Declared last, so destroyed first: a stream's work uses every member above.
  typename B::stream compute_{};
  typename B::stream comm_{};
  typename B::stream reduce_stream_{};  // the data-parallel sums, created with a reducer
  typename B::stream copy_{};           // OFFLOAD / RELOAD, created when the program has them

  [[nodiscard]] const Action& action(std::int32_t index) const {
    return schedule_.programs[static_cast<std::size_t>(rank_)][static_cast<std::size_t>(index)];
  }
  [[nodiscard]] std::int32_t last_stage() const noexcept { return schedule_.stages() - 1; }
  [[nodiscard]] bool holds(std::int32_t stage) const { return schedule_.rank_of(stage) == rank_; }

  // Defined in the files named, each one concern; <ppsched/runtime/executor.hpp> includes them all.
  // set-up checks (executor/setup.hpp)
  void init(const Schedule& lowered, bool proven);
  void keep_view(const Schedule& lowered);
  [[nodiscard]] std::vector<StageShape> shapes() const;
  PoolGrowth replan(const Schedule& lowered, bool proven);
  void check_watchdog(std::chrono::milliseconds watchdog) const;
  void check_setup();
  void check_tied(const std::string& subject) const;
  void check_boundaries(const std::string& subject) const;
  void check_batch(const Batch& batch) const;
  // buffer pools (executor/pools.hpp)
  void allocate();
  void build();
  void release();
  [[nodiscard]] Buffer take(std::size_t floats);
  [[nodiscard]] HostBuffer take_host(std::size_t floats);
  [[nodiscard]] std::string_view label(std::string text);
  void plan_reducer();
  std::int32_t assign_weight_slots(std::int32_t s);
  [[nodiscard]] const Buffer* weight_part(std::size_t i) const;
  [[nodiscard]] std::span<float> weight_span(std::size_t i);
  [[nodiscard]] std::span<float> buffer(std::int32_t index);
  // tied weights (executor/tied.hpp)
  void allocate_tied();
  void copy_slice(SliceCopy& c);
  static void run_slice_copy(void* context);
  [[nodiscard]] std::uint64_t tied_match(std::size_t group, std::size_t stage_index, bool to_root) const noexcept;
  void reduce_tied();
  // issuing the program (executor/issue.hpp)
  void issue_all();
  void issue(std::size_t i);
  void reduce_after(std::int32_t i);
  void copy_output(std::size_t i);
  [[nodiscard]] std::size_t size_of(std::int32_t stage, std::int32_t mb, bool output) const noexcept;
  [[nodiscard]] std::size_t transfer_size(const PlannedTransfer& t) const noexcept;
  template <class T>
  [[nodiscard]] std::span<T> sized(std::span<T> s, std::int32_t stage, std::int32_t mb, bool output) const noexcept;
  static void run_copy_output(void* context);
  void flush();
  static void run_compute(void* context);
  static void run_optimizer(void* context);
  [[nodiscard]] StageContext context(std::int32_t stage, std::int32_t mb, StageCall call) const;
  void compute(std::int32_t index);
  [[nodiscard]] std::size_t hash_slot(const Action& a) const noexcept;
  [[nodiscard]] static std::uint64_t hash_of(std::span<const float> values) noexcept;
  static void run_copy(void* context);
  void copy_action(std::int32_t index);
  // waiting, the watchdog and faults (executor/watchdog.hpp)
  [[nodiscard]] std::size_t completed_on(int lane);
  void wait_all(StepFaults* faults);
  [[nodiscard]] std::string describe_step(std::int32_t index);
  [[nodiscard]] error watchdog_error();
  [[noreturn]] void fail_step(std::exception_ptr e, StepFaults* faults);
  // results (executor/results.hpp)
  void collect();
  // graph capture and device losses (executor/graphs.hpp)
  void check_graphs();
  void check_reducer_graphs() const;
  void allocate_graphs();
  void run_loss(const StageFunctions& f, const StageContext& c, std::span<const float> output,
                std::span<const float> target, std::span<float> grad_output);
  void issue_loss_copy();
  void read_losses();
  void check_graph_batch(const Batch& batch) const;
  void run_graph_step(StepFaults* faults);
  void capture();
  void graph_failed() noexcept;
};

}  // namespace ppsched
