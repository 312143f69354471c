// The executor: runs one rank's lowered program on any Backend. The host thread issues the
// program in order — compute actions on the compute stream, each communication group on the
// comm stream as one group_start/group_end — and expresses every order between the two
// streams with one event wait, so communication overlaps compute exactly as far as the
// schedule allows (docs/execution-model.md). It never blocks while issuing: every buffer
// comes from pools sized by the plan (runtime/plan.hpp), allocated once, so a step
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
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"
#include "ppsched/runtime/plan.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/trace/timeline.hpp"

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

namespace detail {

// The rank's error when another rank asked it to stop.
struct StoppedByPeer {};

[[nodiscard]] inline std::string matching_action(const Schedule& s, const Action& a) {
  switch (a.op) {
    case Op::SEND_F:
      return detail::concat("RECV_F", a.microbatch, "@s", a.stage + 1, " on rank ", s.rank_of(a.stage + 1));
    case Op::RECV_F:
      return detail::concat("SEND_F", a.microbatch, "@s", a.stage - 1, " on rank ", s.rank_of(a.stage - 1));
    case Op::SEND_B:
      return detail::concat("RECV_B", a.microbatch, "@s", a.stage - 1, " on rank ", s.rank_of(a.stage - 1));
    case Op::RECV_B:
      return detail::concat("SEND_B", a.microbatch, "@s", a.stage + 1, " on rank ", s.rank_of(a.stage + 1));
    default:
      return {};
  }
}

// The host pool's buffer type: a backend's `host_buffer` (CUDA: pinned memory) when it has
// `allocate_host`, else its own buffer (host-memory backends).
template <class B>
struct host_buffer_of {
  using type = typename B::buffer;
};
template <class B>
  requires requires(B& b, std::size_t n) {
    typename B::host_buffer;
    { b.allocate_host(n) } -> std::same_as<typename B::host_buffer>;
  }
struct host_buffer_of<B> {
  using type = typename B::host_buffer;
};

}  // namespace detail

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
    try {
      issue_all();
      wait_all(faults);
    } catch (...) {
      fail_step(std::current_exception(), faults);
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
    if (reducer && reduced_.empty()) {
      reduce_stream_ = b_.create_stream();
      for (std::size_t k = 0; k < grads_.size(); ++k) reduced_.push_back(b_.create_event());
      last_weight_step_.assign(grads_.size(), -1);
      for (std::size_t i = 0; i < plan_.steps.size(); ++i) {
        const PlannedStep& st = plan_.steps[i];
        if (st.lane != Lane::compute) continue;
        for (std::int32_t k = 0; k < st.action_count; ++k) {
          const Action& a = action(st.first_action + k);
          if (a.op != Op::B && a.op != Op::BW) continue;
          const std::int32_t gi = grads_of_stage_[static_cast<std::size_t>(a.stage)];
          last_weight_step_[static_cast<std::size_t>(gi)] = static_cast<std::int32_t>(i);
        }
      }
    }
    reducer_ = std::move(reducer);
  }

  [[nodiscard]] const Schedule& schedule() const noexcept { return schedule_; }
  [[nodiscard]] const std::vector<Action>& program() const noexcept {
    return schedule_.programs[static_cast<std::size_t>(rank_)];
  }
  [[nodiscard]] const RankPlan& plan() const noexcept { return plan_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] const RankStep& last_step() const noexcept { return result_; }
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
    Buffer sum{};                             // at the root
    std::vector<SliceCopy> gather;            // local totals' slices into `slices`
    std::vector<SliceCopy> scatter;           // the sum (root) or the received sum back into the totals
    std::vector<std::string> labels;          // per stage, for transfers
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
  std::vector<std::string> labels_;          // per action
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

  // Keeps what this rank needs of the lowered schedule (a copy of every rank's program per
  // executor made a World's memory grow as p^2 m), checks it, and plans and allocates.
  void init(const Schedule& lowered, bool proven) {
    schedule_.name = lowered.name;
    schedule_.ranks = lowered.ranks;
    schedule_.microbatches = lowered.microbatches;
    schedule_.placement = lowered.placement;
    schedule_.split_backward = lowered.split_backward;
    schedule_.programs.resize(lowered.programs.size());
    if (rank_ >= 0 && static_cast<std::size_t>(rank_) < lowered.programs.size()) {
      schedule_.programs[static_cast<std::size_t>(rank_)] = lowered.programs[static_cast<std::size_t>(rank_)];
    }
    check_setup();
    if (options_.validate && !proven) (void)validate_or_throw(lowered);  // lower()'s output is proven
    std::vector<StageShape> shapes;
    for (const StageFunctions& f : stages_) shapes.push_back({input_floats(f), output_floats(f), f.offload_size});
    plan_ = plan_rank(schedule_, rank_, shapes);
    allocate();
  }

  void check_watchdog(std::chrono::milliseconds watchdog) const {
    if (watchdog.count() <= 0) {
      fail({detail::concat("executor for rank ", rank_, " of schedule '", schedule_.name, "'"),
            detail::concat("the watchdog is ", watchdog.count(), " ms"), "ExecutorOptions::watchdog",
            "Give a positive timeout (default 10 s), or ppsched::no_timeout (milliseconds::max()) for none"});
    }
  }

  void check_setup() {
    const std::string subject = detail::concat("executor for rank ", rank_, " of schedule '", schedule_.name, "'");
    if (rank_ < 0 || rank_ >= schedule_.ranks || b_.ranks() != schedule_.ranks) {
      fail({subject,
            detail::concat("the backend is rank ", rank_, " of ", b_.ranks(), " but the schedule has ", schedule_.ranks,
                           " ranks"),
            "", "Run the schedule on a communicator with as many ranks as the schedule"});
    }
    check_watchdog(options_.watchdog);
    if (stages_.size() != static_cast<std::size_t>(schedule_.stages())) {
      fail({subject,
            detail::concat("the schedule has ", schedule_.stages(), " stages but ", stages_.size(),
                           " StageFunctions were given"),
            "", "Give one StageFunctions per stage"});
    }
    // A batch holds m micro-batches of stage 0's input (and of the last stage's target); a
    // size whose m-fold does not fit a size_t would make the batch check wrap and accept a
    // batch too small for its slices.
    const auto m = static_cast<std::size_t>(std::max(schedule_.microbatches, 1));
    auto check_fold = [&](std::size_t stage, std::size_t floats, const char* what) {
      if (floats <= std::numeric_limits<std::size_t>::max() / m) return;
      fail({subject,
            detail::concat("stage ", stage, " declares ", floats, " ", what, " floats per micro-batch; ", m,
                           " micro-batches of them do not fit in memory"),
            detail::concat("stage ", stage), "Check StageFunctions::input_size and target_size (floats per micro-batch)"});
    };
    if (!stages_.empty()) {
      check_fold(0, input_floats(stages_.front()), "input");
      check_fold(stages_.size() - 1, stages_.back().target_size, "target");
    }
    check_boundaries(subject);
    check_tied(subject);
    // Every rank of a training schedule runs backwards of its stages (validate() checks it),
    // so this rank's program tells.
    for (const Action& a : schedule_.programs[static_cast<std::size_t>(rank_)]) {
      has_backward_ = has_backward_ || is_backward(a.op);
    }
    for (const Action& a : schedule_.programs[static_cast<std::size_t>(rank_)]) {
      if (!is_copy(a.op)) continue;
      const StageFunctions& f = stages_[static_cast<std::size_t>(a.stage)];
      if (f.offload && f.reload) continue;
      fail({subject,
            detail::concat("the schedule offloads stage ", a.stage, "'s activations (", to_string(a),
                           "), but the stage gives no ", f.offload ? "reload" : "offload", " callable"),
            detail::concat("stage ", a.stage, " (rank ", rank_, ")"),
            "Set StageFunctions::offload, reload and offload_size (what forward keeps for backward), or recompute "
            "the stage instead"});
    }
    for (std::int32_t s = 0; s < schedule_.stages(); ++s) {
      if (!holds(s)) continue;
      const StageFunctions& f = stages_[static_cast<std::size_t>(s)];
      const std::string where = detail::concat("stage ", s, " (rank ", rank_, ")");
      if (!f.forward) fail({subject, "a stage has no forward", where, "Set StageFunctions::forward"});
      if (!has_backward_) continue;
      const bool split = static_cast<bool>(f.backward_input) && static_cast<bool>(f.backward_weight);
      if (schedule_.split_backward && !split) {
        fail({subject,
              detail::concat("schedule '", schedule_.name, "' splits backward into BI and BW, but the stage gives ",
                             f.backward ? "only a full backward" : "no backward"),
              where, "Set StageFunctions::backward_input and backward_weight"});
      }
      if (!f.backward && !split) {
        fail({subject, "a stage has no backward", where,
              "Set StageFunctions::backward, or backward_input and backward_weight"});
      }
      if (s == last_stage() && !f.loss) {
        fail({subject, "the last stage has no loss", where, "Set StageFunctions::loss on the last stage"});
      }
    }
  }

  void check_tied(const std::string& subject) const {
    for (std::size_t g = 0; g < options_.tied_weights.size(); ++g) {
      const TiedWeights& t = options_.tied_weights[g];
      const std::string where = detail::concat("ExecutorOptions::tied_weights[", g, "]");
      if (t.stages.size() < 2 || t.offsets.size() != t.stages.size() || t.count == 0) {
        fail({subject,
              detail::concat("a tied group has ", t.stages.size(), " stages, ", t.offsets.size(), " offsets and count ",
                             t.count),
              where, "Give at least two stages, one offset per stage and a nonzero count"});
      }
      for (std::size_t i = 0; i < t.stages.size(); ++i) {
        const std::int32_t s = t.stages[i];
        if (s < 0 || s >= schedule_.stages()) {
          fail({subject, detail::concat("a tied group names stage ", s, ", which does not exist"), where,
                detail::concat("Name stages in 0..", schedule_.stages() - 1)});
        }
        if (std::count(t.stages.begin(), t.stages.end(), s) > 1) {
          fail({subject, detail::concat("a tied group names stage ", s, " twice"), where, "Name each stage once"});
        }
        const std::size_t size = stages_[static_cast<std::size_t>(s)].weight_grad_size;
        if (t.offsets[i] > size || t.count > size - t.offsets[i]) {
          fail({subject,
                detail::concat("the tied gradient of stage ", s, " (", t.count, " floats at ", t.offsets[i],
                               ") does not fit its weight_grad_size ", size),
                where, "Give each stage's offset of the shared parameter's gradient in its flattened weight gradient"});
        }
      }
    }
  }

  // Typed boundaries: each list valid, and each stage's outputs the next stage's inputs.
  void check_boundaries(const std::string& subject) const {
    for (std::size_t s = 0; s < stages_.size(); ++s) {
      const StageFunctions& f = stages_[s];
      for (const auto* list : {&f.input_tensors, &f.output_tensors}) {
        const bool in = list == &f.input_tensors;
        check_tensor_specs(*list, detail::concat(subject, ", stage ", s, in ? " input_tensors" : " output_tensors"));
        const std::size_t declared = in ? f.input_size : f.output_size;
        if (!list->empty() && declared != 0 && declared != payload_floats(*list)) {
          fail({subject,
                detail::concat("stage ", s, " declares ", in ? "input_size " : "output_size ", declared,
                               " beside typed tensors whose payload is ", payload_floats(*list), " floats"),
                detail::concat("stage ", s), "Leave input_size / output_size 0 with typed tensors"});
        }
      }
      if (s + 1 == stages_.size()) break;
      const auto& out = f.output_tensors;
      const auto& next = stages_[s + 1].input_tensors;
      if (out.empty() && next.empty()) continue;
      const std::string where = detail::concat("stages ", s, " and ", s + 1);
      if (out.empty() != next.empty()) {
        fail({subject,
              detail::concat("stage ", s, out.empty() ? " gives floats" : " gives typed tensors", " but stage ", s + 1,
                             next.empty() ? " takes floats" : " takes typed tensors"),
              where, "Declare the boundary the same way on both sides (output_tensors and the next input_tensors)"});
      }
      if (out.size() != next.size()) {
        fail({subject,
              detail::concat("stage ", s, " gives ", out.size(), " tensors but stage ", s + 1, " takes ", next.size()),
              where, "Give both sides of a boundary the same tensor list"});
      }
      for (std::size_t i = 0; i < out.size(); ++i) {
        if (out[i] == next[i]) continue;
        fail({subject,
              detail::concat("tensor ", i, ": stage ", s, " gives ", to_string(out[i].dtype), " x ", out[i].max_count,
                             " but stage ", s + 1, " takes ", to_string(next[i].dtype), " x ", next[i].max_count),
              where, "Give both sides of a boundary the same dtype and max_count for each tensor"});
      }
    }
  }

  void check_batch(const Batch& batch) const {
    const auto m = static_cast<std::size_t>(schedule_.microbatches);
    for (std::int32_t s : plan_.stages) check_side_inputs(stages_[static_cast<std::size_t>(s)], s, batch, m);
    if (holds(0)) {
      const std::size_t want = m * input_floats(stages_[0]);
      if (batch.inputs.size() != want) {
        fail({"batch",
              detail::concat("has ", batch.inputs.size(), " input floats; ", m, " micro-batches of ",
                             input_floats(stages_[0]), " need ", want),
              "Batch::inputs", "Give exactly microbatches x stage 0's input_size floats"});
      }
    }
    // A forward-only step takes targets when it is to compute losses, and none otherwise.
    if ((has_backward_ || !batch.targets.empty()) && holds(last_stage())) {
      const std::size_t want = m * stages_[static_cast<std::size_t>(last_stage())].target_size;
      if (batch.targets.size() != want) {
        fail({"batch",
              detail::concat("has ", batch.targets.size(), " target floats; ", m, " micro-batches of ",
                             stages_[static_cast<std::size_t>(last_stage())].target_size, " need ", want),
              "Batch::targets", "Give exactly microbatches x the last stage's target_size floats"});
      }
    }
  }

  void allocate() {
    compute_ = b_.create_stream();
    comm_ = b_.create_stream();
    if constexpr (requires(B & b, const typename B::stream& st) {
                    { b.native_handle(st) } -> std::convertible_to<const void*>;
                  }) {
      stream_identity_ = b_.native_handle(compute_);
    } else {
      stream_identity_ = &compute_;
    }
    for (std::size_t floats : plan_.buffer_floats) buffers_.push_back(b_.allocate(floats));
    for (const Buffer& buf : buffers_) spans_.push_back(b_.span(buf));
    if (plan_.has_copies) {
      copy_ = b_.create_stream();
      if constexpr (requires(B & b, const typename B::stream& st) {
                      { b.native_handle(st) } -> std::convertible_to<const void*>;
                    }) {
        copy_identity_ = b_.native_handle(copy_);
      } else {
        copy_identity_ = &copy_;
      }
      for (std::size_t floats : plan_.host_floats) {
        if constexpr (std::same_as<HostBuffer, Buffer>) {
          if constexpr (requires(B & b, std::size_t f) { b.allocate_host(f); }) {
            host_buffers_.push_back(b_.allocate_host(floats));
          } else {
            host_buffers_.push_back(b_.allocate(floats));
          }
        } else {
          host_buffers_.push_back(b_.allocate_host(floats));
        }
      }
      for (const HostBuffer& h : host_buffers_) host_spans_.push_back(b_.span(h));
    }
    if constexpr (requires(B & b) {
                    { b.options().checking } -> std::convertible_to<bool>;
                  }) {
      for (const PlannedStep& st : plan_.steps) check_recompute_ = check_recompute_ || st.drops_activation;
      check_recompute_ = check_recompute_ && b_.options().checking;
      if (check_recompute_) {
        forward_hash_.assign(static_cast<std::size_t>(schedule_.stages()) * static_cast<std::size_t>(schedule_.microbatches), 0);
      }
    }
    origin_ = b_.create_event();
    for (auto& e : tied_events_) e = b_.create_event();
    compute_done_ = b_.create_event();
    comm_done_ = b_.create_event();
    copy_done_ = b_.create_event();
    const std::size_t n = plan_.steps.size();
    for (std::size_t i = 0; i < n; ++i) {
      end_events_.push_back(b_.create_event());
      if (options_.record_timeline) start_events_.push_back(b_.create_event());
    }
    const auto m = static_cast<std::size_t>(schedule_.microbatches);
    grads_of_stage_.assign(static_cast<std::size_t>(schedule_.stages()), -1);
    weight_steps_.resize(n);
    for (std::int32_t s : plan_.stages) {
      const std::size_t size = stages_[static_cast<std::size_t>(s)].weight_grad_size;
      grads_of_stage_[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(grads_.size());
      StageGradients g;
      g.stage = s;
      if (size > 0 && has_backward_) {
        g.total = b_.allocate(size);
        g.total_span = b_.span(g.total);
        const std::int32_t slots = assign_weight_slots(s);
        for (std::int32_t k = 0; k < slots; ++k) g.parts.push_back(b_.allocate(size));
        for (const Buffer& p : g.parts) g.part_spans.push_back(b_.span(p));
        gradient_floats_ += size * (static_cast<std::size_t>(slots) + 1);
      }
      grads_.push_back(std::move(g));
    }
    if (has_backward_) allocate_tied();
    if (!has_backward_ && holds(last_stage()) && stages_[static_cast<std::size_t>(last_stage())].loss) {
      forward_loss_ = true;
      loss_scratch_ = b_.allocate(output_floats(stages_[static_cast<std::size_t>(last_stage())]));
      loss_scratch_span_ = b_.span(loss_scratch_);
    }
    if (options_.keep_outputs && holds(last_stage())) {
      result_.outputs.assign(m * output_floats(stages_[static_cast<std::size_t>(last_stage())]), 0.0f);
    }
    for (std::size_t k = 0; k < grads_.size(); ++k) optimizer_calls_.push_back({this, k});
    calls_.resize(n);
    uses_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const PlannedStep& st = plan_.steps[i];
      lane_steps_[detail::stream_index(st)].push_back(static_cast<std::int32_t>(i));
      calls_[i] = {this, static_cast<std::int32_t>(i)};
      if (st.copy) {
        // The host slot, for the race checker: an OFFLOAD writes it, a RELOAD reads it.
        if constexpr (std::same_as<HostBuffer, Buffer>) {
          const bool offload = action(st.first_action).op == Op::OFFLOAD;
          uses_[i].push_back({&host_buffers_[static_cast<std::size_t>(st.host)], offload ? Access::write : Access::read});
        }
        continue;
      }
      if (st.lane != Lane::compute) continue;
      auto& uses = uses_[i];
      if (st.input >= 0) uses.push_back({&buffers_[static_cast<std::size_t>(st.input)], Access::read});
      if (st.output >= 0) uses.push_back({&buffers_[static_cast<std::size_t>(st.output)], Access::write});
      if (st.loss_input >= 0) uses.push_back({&buffers_[static_cast<std::size_t>(st.loss_input)], Access::read});
      if (st.grad_output >= 0) {
        uses.push_back(
            {&buffers_[static_cast<std::size_t>(st.grad_output)], st.computes_loss ? Access::write : Access::read});
      }
      if (const Buffer* part = weight_part(i)) uses.push_back({part, Access::write});
      if (forward_loss_ && st.output >= 0 && action(st.first_action).stage == last_stage()) {
        uses.push_back({&loss_scratch_, Access::write});
      }
    }
    const auto& prog = schedule_.programs[static_cast<std::size_t>(rank_)];
    for (const Action& a : prog) labels_.push_back(to_string(a));
    result_.losses.assign(m, std::numeric_limits<float>::quiet_NaN());
    result_.spans.resize(prog.size());
    for (const PlannedStep& st : plan_.steps) {
      for (std::int32_t k = 0; k < st.action_count; ++k) {
        Span& span = result_.spans[static_cast<std::size_t>(st.first_action + k)];
        span.rank = rank_;
        span.action = action(st.first_action + k);
        span.lane = st.lane;
      }
    }
  }

  // Gives each B or BW of stage `s` the slot its weight gradient goes into, and after it the
  // slots to add to the total: in micro-batch order, a gradient as soon as every earlier
  // micro-batch's is in (microbatch_order: the same additions, in the same order, as summing
  // m buffers at the flush, with a slot held only while an earlier micro-batch is missing),
  // or at once (schedule_order: one slot). Returns the number of slots.
  std::int32_t assign_weight_slots(std::int32_t s) {
    const bool in_order = options_.accumulation == GradAccumulation::microbatch_order;
    const auto m = static_cast<std::size_t>(schedule_.microbatches);
    std::vector<std::int32_t> held(m, -1);  // micro-batch -> slot, while waiting for an earlier one
    std::vector<std::int32_t> free_slots;
    std::int32_t slots = 0;
    std::size_t next = 0;
    for (std::size_t i = 0; i < plan_.steps.size(); ++i) {
      const PlannedStep& st = plan_.steps[i];
      if (st.lane != Lane::compute) continue;
      const Action& a = action(st.first_action);
      if (a.stage != s || (a.op != Op::B && a.op != Op::BW)) continue;
      WeightStep& w = weight_steps_[i];
      if (!free_slots.empty()) {
        w.slot = free_slots.back();
        free_slots.pop_back();
      } else {
        w.slot = slots++;
      }
      if (!in_order) {
        w.adds.push_back(w.slot);
        free_slots.push_back(w.slot);
        continue;
      }
      held[static_cast<std::size_t>(a.microbatch)] = w.slot;
      while (next < m && held[next] >= 0) {
        w.adds.push_back(held[next]);
        free_slots.push_back(held[next]);  // reused by a later step of the same stream
        held[next] = -1;
        ++next;
      }
    }
    return slots;
  }

  // The buffer the B or BW of step `i` writes its weight gradient into, if its stage has one.
  [[nodiscard]] const Buffer* weight_part(std::size_t i) const {
    const WeightStep& w = weight_steps_[i];
    if (w.slot < 0) return nullptr;
    const Action& a = action(plan_.steps[i].first_action);
    const StageGradients& g = grads_[static_cast<std::size_t>(grads_of_stage_[static_cast<std::size_t>(a.stage)])];
    if (g.parts.empty()) return nullptr;
    return &g.parts[static_cast<std::size_t>(w.slot)];
  }
  [[nodiscard]] std::span<float> weight_span(std::size_t i) {
    const WeightStep& w = weight_steps_[i];
    if (w.slot < 0) return {};
    const Action& a = action(plan_.steps[i].first_action);
    StageGradients& g = grads_[static_cast<std::size_t>(grads_of_stage_[static_cast<std::size_t>(a.stage)])];
    if (g.parts.empty()) return {};
    return g.part_spans[static_cast<std::size_t>(w.slot)];
  }

  void issue_all() {
    lane_done_[0] = lane_done_[1] = lane_done_[2] = 0;
    b_.record(origin_, compute_);
    result_.origin = std::chrono::steady_clock::now();
    for (StageGradients& g : grads_) {
      if (!g.parts.empty()) b_.zero(compute_, g.total);
    }
    for (std::size_t i = 0; i < plan_.steps.size(); ++i) issue(i);
    if (has_backward_) flush();
    b_.record(compute_done_, compute_);
    b_.record(comm_done_, comm_);
    if (plan_.has_copies) b_.record(copy_done_, copy_);
  }

  void issue(std::size_t i) {
    const PlannedStep& st = plan_.steps[i];
    auto& stream = st.copy ? copy_ : st.lane == Lane::compute ? compute_ : comm_;
    if (st.wait_on >= 0) b_.wait(stream, end_events_[static_cast<std::size_t>(st.wait_on)]);
    if (st.copy_wait >= 0) b_.wait(stream, end_events_[static_cast<std::size_t>(st.copy_wait)]);
    if (st.copy) {
      if (options_.record_timeline) b_.record(start_events_[i], stream);
      b_.launch(stream, HostTask{&Executor::run_copy, &calls_[i], labels_[static_cast<std::size_t>(st.first_action)]},
                std::span<const BufferUse<Buffer>>(uses_[i]));
    } else if (st.lane == Lane::compute) {
      const Action& a = action(st.first_action);
      const std::int32_t gi = grads_of_stage_[static_cast<std::size_t>(a.stage)];
      Buffer* part = const_cast<Buffer*>(weight_part(i));
      if (part != nullptr) b_.zero(stream, *part);
      if (options_.record_timeline) b_.record(start_events_[i], stream);
      b_.launch(stream,
                HostTask{&Executor::run_compute, &calls_[i], labels_[static_cast<std::size_t>(st.first_action)]},
                std::span<const BufferUse<Buffer>>(uses_[i]));
      if (part != nullptr) {
        StageGradients& g = grads_[static_cast<std::size_t>(gi)];
        for (std::int32_t slot : weight_steps_[i].adds) b_.accumulate(stream, g.total, g.parts[static_cast<std::size_t>(slot)]);
      }
      if (options_.keep_outputs && a.op == Op::F && a.stage == last_stage()) copy_output(i);
    } else {
      if (options_.record_timeline) b_.record(start_events_[i], stream);
      b_.group_start();
      for (const PlannedTransfer& t : st.transfers) {
        const PeerTag tag{t.match, labels_[static_cast<std::size_t>(t.action)]};
        Buffer& buf = buffers_[static_cast<std::size_t>(t.buffer)];
        if (t.send) {
          b_.send(buf, t.count, t.peer, stream, tag);
        } else {
          b_.recv(buf, t.count, t.peer, stream, tag);
        }
      }
      b_.group_end();
    }
    b_.record(end_events_[i], stream);
    if (reducer_ && st.lane == Lane::compute) reduce_after(static_cast<std::int32_t>(i));
  }

  // Data parallelism: once step i is a stage's last weight-gradient action, sum the stage's
  // gradient on the reduce stream and hand it to the reducer, while compute goes on.
  void reduce_after(std::int32_t i) {
    for (std::size_t k = 0; k < grads_.size(); ++k) {
      if (last_weight_step_[k] != i) continue;
      StageGradients& g = grads_[k];
      b_.wait(reduce_stream_, end_events_[static_cast<std::size_t>(i)]);
      // The total is complete here: each micro-batch's gradient was added on the compute
      // stream before step i's end event (issue).
      if (!g.parts.empty()) reducer_(b_, reduce_stream_, g.stage, g.total, step_stop_);
      b_.record(reduced_[k], reduce_stream_);
    }
  }

  void allocate_tied() {
    for (std::size_t index = 0; index < options_.tied_weights.size(); ++index) {
      const TiedWeights& t = options_.tied_weights[index];
      TiedGroup g;
      g.index = index;
      std::vector<std::size_t> order(t.stages.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return t.stages[a] < t.stages[b]; });
      for (std::size_t i : order) {
        g.stages.push_back(t.stages[i]);
        g.offsets.push_back(t.offsets[i]);
      }
      g.root = schedule_.rank_of(g.stages.front());
      g.count = t.count;
      g.local = true;
      bool takes_part = false;
      for (std::int32_t s : g.stages) {
        g.local = g.local && holds(s);
        takes_part = takes_part || holds(s);
      }
      if (!takes_part) continue;
      const bool root = g.root == rank_;
      for (std::int32_t s : g.stages) {
        g.slices.push_back(root || holds(s) ? b_.allocate(t.count) : Buffer{});
        g.labels.push_back(detail::concat("tied gradient of stage ", s));
      }
      if (root) g.sum = b_.allocate(t.count);
      tied_.push_back(std::move(g));
    }
    // The copies point into tied_, whose elements no longer move.
    for (TiedGroup& g : tied_) {
      const std::size_t count = g.count;
      const bool root = g.root == rank_;
      for (std::size_t i = 0; i < g.stages.size(); ++i) {
        const std::int32_t s = g.stages[i];
        if (!holds(s)) continue;
        Buffer& total = grads_[static_cast<std::size_t>(grads_of_stage_[static_cast<std::size_t>(s)])].total;
        g.gather.push_back({this, &g.slices[i], 0, &total, g.offsets[i], count});
        g.scatter.push_back({this, &total, g.offsets[i], root ? &g.sum : &g.slices[i], 0, count});
      }
    }
  }

  void copy_slice(SliceCopy& c) {
    if constexpr (requires(B & b, typename B::stream& s, Buffer& to, const Buffer& from, std::size_t n) {
                    b.copy(s, to, n, from, n, n);
                  }) {
      b_.copy(compute_, *c.to, c.to_offset, *c.from, c.from_offset, c.count);
    } else {
      const BufferUse<Buffer> uses[] = {{c.to, Access::write}, {c.from, Access::read}};
      b_.launch(compute_, HostTask{&Executor::run_slice_copy, &c, "tied weights"}, uses);
    }
  }
  static void run_slice_copy(void* context) {
    auto* c = static_cast<SliceCopy*>(context);
    const std::span<const float> from = c->self->b_.span(*c->from).subspan(c->from_offset, c->count);
    std::copy(from.begin(), from.end(), c->self->b_.span(*c->to).begin() + static_cast<std::ptrdiff_t>(c->to_offset));
  }

  // The match of a tied transfer: above every schedule transfer's (transfer_match).
  [[nodiscard]] std::uint64_t tied_match(std::size_t group, std::size_t stage_index, bool to_root) const noexcept {
    return (std::uint64_t{1} << 63) | (static_cast<std::uint64_t>(group) << 32) |
           (static_cast<std::uint64_t>(stage_index) << 1) | static_cast<std::uint64_t>(to_root);
  }

  // After the totals are complete, before any optimizer_step: each group's slices to its
  // root, summed there in stage order, the sum back to every copy. Every rank walks the
  // groups, and each group's stages, in the same order, so the transfers pair up.
  void reduce_tied() {
    if (tied_.empty()) return;
    for (TiedGroup& g : tied_) {
      for (SliceCopy& c : g.gather) copy_slice(c);
    }
    bool remote = false;
    for (const TiedGroup& g : tied_) remote = remote || !g.local;
    auto to_comm = [&](typename B::event& e) {
      b_.record(e, compute_);
      b_.wait(comm_, e);
    };
    auto to_compute = [&](typename B::event& e) {
      b_.record(e, comm_);
      b_.wait(compute_, e);
    };
    auto transfers = [&](bool to_root) {
      for (TiedGroup& g : tied_) {
        if (g.local) continue;
        const std::size_t count = g.count;
        for (std::size_t i = 0; i < g.stages.size(); ++i) {
          const std::int32_t owner = schedule_.rank_of(g.stages[i]);
          if (owner == g.root) continue;
          const PeerTag tag{tied_match(g.index, i, to_root), g.labels[i]};
          if (g.root == rank_ && to_root) b_.recv(g.slices[i], count, owner, comm_, tag);
          if (g.root == rank_ && !to_root) b_.send(g.sum, count, owner, comm_, tag);
          if (owner == rank_ && to_root) b_.send(g.slices[i], count, g.root, comm_, tag);
          if (owner == rank_ && !to_root) b_.recv(g.slices[i], count, g.root, comm_, tag);
        }
      }
    };
    if (remote) {
      to_comm(tied_events_[0]);
      transfers(true);
      to_compute(tied_events_[1]);
    }
    for (TiedGroup& g : tied_) {
      if (g.root != rank_) continue;
      b_.zero(compute_, g.sum);
      for (Buffer& slice : g.slices) b_.accumulate(compute_, g.sum, slice);
    }
    if (remote) {
      to_comm(tied_events_[2]);
      transfers(false);
      to_compute(tied_events_[3]);
    }
    for (TiedGroup& g : tied_) {
      for (SliceCopy& c : g.scatter) copy_slice(c);
    }
  }

  // The last stage's forward output of step `i` into the result, once the forward is done.
  // A backend whose buffers are not host memory copies with its `copy_to_host` (CUDA:
  // cudaMemcpyAsync); otherwise a task on the stream copies the span.
  void copy_output(std::size_t i) {
    const PlannedStep& st = plan_.steps[i];
    const std::size_t n = output_floats(stages_[static_cast<std::size_t>(last_stage())]);
    const std::span<float> to =
        std::span<float>(result_.outputs).subspan(static_cast<std::size_t>(action(st.first_action).microbatch) * n, n);
    const Buffer& from = buffers_[static_cast<std::size_t>(st.output)];
    if constexpr (requires(B & b, typename B::stream& s) { b.copy_to_host(s, from, to); }) {
      b_.copy_to_host(compute_, from, to);
    } else {
      const BufferUse<Buffer> use{&from, Access::read};
      b_.launch(compute_, HostTask{&Executor::run_copy_output, &calls_[i], "keep_outputs"},
                std::span<const BufferUse<Buffer>>(&use, 1));
    }
  }
  static void run_copy_output(void* context) {
    auto* call = static_cast<ComputeCall*>(context);
    Executor& self = *call->self;
    const PlannedStep& st = self.plan_.steps[static_cast<std::size_t>(call->step)];
    const std::span<float> from = self.buffer(st.output);
    std::copy(from.begin(), from.end(),
              self.result_.outputs.begin() +
                  static_cast<std::ptrdiff_t>(static_cast<std::size_t>(self.action(st.first_action).microbatch) *
                                              from.size()));
  }

  // After every backward (the totals are complete: each gradient was added in micro-batch
  // order as soon as the earlier ones were in), let each stage apply them.
  void flush() {
    reduce_tied();
    for (std::size_t k = 0; k < grads_.size(); ++k) {
      StageGradients& g = grads_[k];
      // With a reducer, the total was handed over at the stage's last weight-gradient step;
      // the optimizer waits for it to come back summed over the replicas.
      if (reducer_ && last_weight_step_[k] >= 0) b_.wait(compute_, reduced_[k]);
      const StageFunctions& f = stages_[static_cast<std::size_t>(g.stage)];
      if (!f.optimizer_step) continue;
      const BufferUse<Buffer> use{g.parts.empty() ? nullptr : &g.total, Access::read};
      b_.launch(compute_, HostTask{&Executor::run_optimizer, &optimizer_calls_[k], "optimizer_step"},
                g.parts.empty() ? std::span<const BufferUse<Buffer>>() : std::span<const BufferUse<Buffer>>(&use, 1));
    }
  }

  static void run_compute(void* context) {
    auto* call = static_cast<ComputeCall*>(context);
    call->self->compute(call->step);
  }
  static void run_optimizer(void* context) {
    auto* call = static_cast<OptimizerCall*>(context);
    Executor& self = *call->self;
    // A failed step applies nothing more (ranks that finished before the fault already did).
    if (self.step_stop_.stop_requested()) return;
    const detail::RunningStepScope scope(&self.step_stop_);
    const StageGradients& g = self.grads_[call->index];
    try {
      const StageFunctions& f = self.stages_[static_cast<std::size_t>(g.stage)];
      const StageContext c = self.context(g.stage, -1, StageCall::optimizer_step);
      auto body = [&] { f.optimizer_step(c, g.total_span); };
      self.around(f, c, body);
    } catch (const std::exception& e) {
      throw error(detail::concat("rank ", self.rank_, ", stage ", g.stage, ", optimizer_step: ", e.what()));
    } catch (...) {
      throw error(detail::concat("rank ", self.rank_, ", stage ", g.stage,
                                 ", optimizer_step: threw an exception that is not a std::exception"));
    }
  }

  [[nodiscard]] std::span<float> buffer(std::int32_t index) {
    return index < 0 ? std::span<float>() : spans_[static_cast<std::size_t>(index)];
  }

  [[nodiscard]] StageContext context(std::int32_t stage, std::int32_t mb, StageCall call) const {
    StageContext c;
    c.step = step_index_;
    c.microbatch = mb;
    c.stage = stage;
    c.rank = rank_;
    c.call = call;
    c.stream = stream_identity_;
    c.stop = step_stop_;
    c.seed = stage_seed(options_.seed, step_index_, stage, mb);
    c.side_inputs = batch_.side_inputs;
    return c;
  }

  // Runs `body` (one stage call) inside the stage's around_call, if it has one.
  template <class Body>
  static void around(const StageFunctions& f, const StageContext& c, Body& body) {
    if (!f.around_call) {
      body();
      return;
    }
    bool ran = false;
    f.around_call(c, StageCallRef(body, ran));
    if (!ran) {
      fail({"around_call", detail::concat("returned without running ", to_string(c.call)),
            "StageFunctions::around_call", "Call the StageCallRef it is given exactly once"});
    }
  }

  void compute(std::int32_t index) {
    // Work of a failed step that a backend runs anyway (CUDA keeps kernels queued after an
    // abort) calls no more user code: its results are discarded.
    if (step_stop_.stop_requested()) return;
    const detail::RunningStepScope scope(&step_stop_);
    const PlannedStep& st = plan_.steps[static_cast<std::size_t>(index)];
    const Action& a = action(st.first_action);
    const StageFunctions& f = stages_[static_cast<std::size_t>(a.stage)];
    const std::int32_t mb = a.microbatch;
    // The loss runs inside the last stage's B (or F, forward-only): an error from it is
    // labelled with that action, so the label names the loss too (issue 24).
    bool in_loss = false;
    const auto label = [&] {
      return detail::concat("rank ", rank_, ", stage ", a.stage, ", micro-batch ", mb, ", action ", to_string(a),
                            in_loss ? " (in the loss, StageFunctions::loss)" : "");
    };
    try {
      const std::span<const float> in =
          st.input_from_batch ? batch_.inputs.subspan(static_cast<std::size_t>(mb) * input_floats(f), input_floats(f))
                              : std::span<const float>(buffer(st.input));
      StageContext c = context(a.stage, mb, StageCall::loss);
      auto call = [&](StageCall kind, auto&& body) {
        c.call = kind;
        in_loss = kind == StageCall::loss;
        around(f, c, body);
        in_loss = false;
      };
      if (st.computes_loss) {
        const std::span<const float> target =
            batch_.targets.subspan(static_cast<std::size_t>(mb) * f.target_size, f.target_size);
        call(StageCall::loss, [&] {
          result_.losses[static_cast<std::size_t>(mb)] = f.loss(c, buffer(st.loss_input), target, buffer(st.grad_output));
        });
      }
      switch (a.op) {
        case Op::F:
          c.keep_activation = !st.drops_activation;
          call(StageCall::forward, [&] { f.forward(c, in, buffer(st.output)); });
          c.keep_activation = true;
          if (check_recompute_ && st.drops_activation) forward_hash_[hash_slot(a)] = hash_of(buffer(st.output));
          // A forward-only step's losses: the loss of the forward's output, its gradient
          // written to a scratch nobody reads.
          // Targets of the wrong size are refused before the step, so a size that does not
          // match here is "no targets": plain inference.
          if (forward_loss_ && a.stage == last_stage() &&
              batch_.targets.size() == static_cast<std::size_t>(schedule_.microbatches) * f.target_size) {
            const std::span<const float> target =
                batch_.targets.subspan(static_cast<std::size_t>(mb) * f.target_size, f.target_size);
            call(StageCall::loss, [&] {
              result_.losses[static_cast<std::size_t>(mb)] = f.loss(c, buffer(st.output), target, loss_scratch_span_);
            });
          }
          break;
        case Op::B:
          if (f.backward) {
            call(StageCall::backward,
                 [&] { f.backward(c, in, buffer(st.grad_output), buffer(st.output), weight_span(static_cast<std::size_t>(index))); });
          } else {
            call(StageCall::backward_input,
                 [&] { f.backward_input(c, in, buffer(st.grad_output), buffer(st.output)); });
            call(StageCall::backward_weight,
                 [&] { f.backward_weight(c, in, buffer(st.grad_output), weight_span(static_cast<std::size_t>(index))); });
          }
          break;
        case Op::BI:
          call(StageCall::backward_input, [&] { f.backward_input(c, in, buffer(st.grad_output), buffer(st.output)); });
          break;
        case Op::BW:
          call(StageCall::backward_weight, [&] { f.backward_weight(c, in, buffer(st.grad_output), weight_span(static_cast<std::size_t>(index))); });
          break;
        case Op::R:
          // Without a recompute of its own, the stage's forward runs again, keeping this
          // time, into a scratch output: the same input and seed give the same state.
          if (f.recompute) {
            call(StageCall::recompute, [&] { f.recompute(c, in); });
          } else {
            call(StageCall::recompute, [&] { f.forward(c, in, buffer(st.output)); });
            if (check_recompute_ && forward_hash_[hash_slot(a)] != hash_of(buffer(st.output))) {
              fail({detail::concat("stage ", a.stage),
                    detail::concat("recomputing micro-batch ", mb,
                                   " gave another output than its forward (checking mode): the forward reads state it "
                                   "did not keep, or draws randomness not seeded from StageContext::seed"),
                    "StageFunctions::forward",
                    "Make the forward a function of its input and StageContext::seed, or keep what it reads"});
            }
          }
          break;
        default:
          break;
      }
    } catch (const std::exception& e) {
      throw error(detail::concat(label(), ": ", e.what()));
    } catch (...) {
      throw error(detail::concat(label(), ": threw an exception that is not a std::exception"));
    }
  }

  [[nodiscard]] std::size_t hash_slot(const Action& a) const noexcept {
    return static_cast<std::size_t>(a.stage) * static_cast<std::size_t>(schedule_.microbatches) +
           static_cast<std::size_t>(a.microbatch);
  }
  // FNV-1a over the floats' bits: equal outputs, equal hashes; NaNs compare by their bits.
  [[nodiscard]] static std::uint64_t hash_of(std::span<const float> values) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (const float v : values) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      h = (h ^ bits) * 0x100000001b3ULL;
    }
    return h;
  }

  static void run_copy(void* context) {
    auto* call = static_cast<ComputeCall*>(context);
    call->self->copy_action(call->step);
  }

  // OFFLOAD / RELOAD on the copy stream: the stage moves its saved state of the micro-batch
  // into or out of its host slot.
  void copy_action(std::int32_t index) {
    if (step_stop_.stop_requested()) return;
    const detail::RunningStepScope scope(&step_stop_);
    const PlannedStep& st = plan_.steps[static_cast<std::size_t>(index)];
    const Action& a = action(st.first_action);
    const StageFunctions& f = stages_[static_cast<std::size_t>(a.stage)];
    try {
      const bool offload = a.op == Op::OFFLOAD;
      StageContext c = context(a.stage, a.microbatch, offload ? StageCall::offload : StageCall::reload);
      c.stream = copy_identity_;
      const std::span<float> host = host_spans_[static_cast<std::size_t>(st.host)];
      auto body = [&] {
        if (offload) {
          f.offload(c, host);
        } else {
          f.reload(c, std::span<const float>(host));
        }
      };
      around(f, c, body);
    } catch (const std::exception& e) {
      throw error(detail::concat("rank ", rank_, ", stage ", a.stage, ", micro-batch ", a.microbatch, ", action ",
                                 to_string(a), ": ", e.what()));
    } catch (...) {
      throw error(detail::concat("rank ", rank_, ", stage ", a.stage, ", micro-batch ", a.microbatch, ", action ",
                                 to_string(a), ": threw an exception that is not a std::exception"));
    }
  }

  // Steps of each lane whose end event has completed, counted in order (a stream completes
  // its work in order, so the count only grows within a step).
  [[nodiscard]] std::size_t completed_on(int lane) {
    std::size_t& n = lane_done_[lane];
    const std::vector<std::int32_t>& steps = lane_steps_[lane];
    while (n < steps.size() && b_.query(end_events_[static_cast<std::size_t>(steps[n])])) ++n;
    return n;
  }

  // Waits for both streams. The watchdog measures from the last completion it has seen, and
  // looks every `slice`: waiting a whole period and re-arming a whole one when something
  // completed in it would let a stall go unreported for up to two periods.
  void wait_all(StepFaults* faults) {
    using Clock = std::chrono::steady_clock;
    const std::stop_token stop = faults->token();
    // In milliseconds before any conversion: the watchdog may be milliseconds::max() (none),
    // which does not fit the clock's nanoseconds.
    const auto slice = std::chrono::milliseconds(std::clamp<std::chrono::milliseconds::rep>(
        options_.watchdog.count() / 10, 1, 100));
    // Counted only when a wait times out: a step that ends within a slice queries nothing.
    std::size_t progress = 0;
    Clock::time_point last_progress = Clock::now();
    for (auto* done : {&compute_done_, &comm_done_, &copy_done_}) {
      if (done == &copy_done_ && !plan_.has_copies) break;
      for (;;) {
        const Clock::time_point deadline =
            std::min(saturating_deadline(last_progress, options_.watchdog), Clock::now() + slice);
        const WaitResult r = b_.synchronize(*done, HostWait{deadline, stop});
        if (r == WaitResult::done) break;
        if (r == WaitResult::stopped) throw detail::StoppedByPeer{};
        const Clock::time_point now = Clock::now();
        const std::size_t count = completed_on(0) + completed_on(1) + completed_on(2);
        if (count > progress) {
          progress = count;
          last_progress = now;
          continue;
        }
        // A wait that gave up before its deadline with nothing new done: the backend knows
        // that nothing can move (the CPU backend's deterministic engine found a deadlock).
        if (reached(now - last_progress, options_.watchdog) || now < deadline) throw watchdog_error();
      }
    }
  }

  [[nodiscard]] std::string describe_step(std::int32_t index) {
    const PlannedStep& st = plan_.steps[static_cast<std::size_t>(index)];
    std::string what;
    for (std::int32_t k = 0; k < st.action_count; ++k) {
      what += detail::concat(k == 0 ? "" : " ", labels_[static_cast<std::size_t>(st.first_action + k)]);
    }
    for (const std::int32_t w : {st.wait_on, st.copy_wait}) {
      if (w < 0 || b_.query(end_events_[static_cast<std::size_t>(w)])) continue;
      const PlannedStep& dep = plan_.steps[static_cast<std::size_t>(w)];
      return detail::concat(what, " waits for ", labels_[static_cast<std::size_t>(dep.first_action)], " on the ",
                            dep.copy ? "copy" : dep.lane == Lane::compute ? "compute" : "comm", " stream");
    }
    if (st.copy) return detail::concat(what, " is running (a slow or stuck offload / reload callable)");
    if (st.lane == Lane::comm) {
      std::string waits;
      for (const PlannedTransfer& t : st.transfers) {
        waits += detail::concat(waits.empty() ? "" : "; ", labels_[static_cast<std::size_t>(t.action)], " waits for ",
                                detail::matching_action(schedule_, action(t.action)), " to be posted");
      }
      return waits;
    }
    return detail::concat(what, " is running (a slow or stuck stage callable)");
  }

  [[nodiscard]] error watchdog_error() {
    std::string heads;
    std::string first_action;
    for (int lane : {1, 0, 2}) {
      const std::size_t done = completed_on(lane);
      if (done >= lane_steps_[lane].size()) continue;
      const std::int32_t head = lane_steps_[lane][done];
      if (first_action.empty())
        first_action = labels_[static_cast<std::size_t>(plan_.steps[static_cast<std::size_t>(head)].first_action)];
      heads += detail::concat(heads.empty() ? "" : "; ",
                              lane == 0   ? "compute stream: "
                              : lane == 1 ? "comm stream: "
                                          : "copy stream: ",
                              describe_step(head));
    }
    // Every action done: the step waits in its final work. With data parallelism that is a
    // stage's gradient sum over the replicas first (a replica that has not reached it), and
    // only then the optimizer step; say which (issue 24).
    for (std::size_t k = 0; heads.empty() && reducer_ && k < reduced_.size(); ++k) {
      if (last_weight_step_[k] < 0 || b_.query(reduced_[k])) continue;
      heads = detail::concat("every action completed, but stage ", grads_[k].stage,
                             "'s gradient sum over the replicas did not (a replica that has not reached it, or a slow "
                             "all-reduce)");
    }
    if (heads.empty()) heads = "every action completed, but the step's final work did not (the optimizer step?)";
    return make_error(
        {detail::concat("rank ", rank_),
         detail::concat("watchdog: no action completed for ", options_.watchdog.count(), " ms. ", heads),
         first_action.empty() ? "" : detail::concat("action ", first_action),
         "Validate the schedule (validate()) or raise ExecutorOptions::watchdog if actions are this slow"});
  }

  [[noreturn]] void fail_step(std::exception_ptr e, StepFaults* faults) {
    bool stopped = false;
    try {
      std::rethrow_exception(e);
    } catch (const detail::StoppedByPeer&) {
      stopped = true;
    } catch (...) {
    }
    if (stopped) {
      e = std::make_exception_ptr(make_error(
          {detail::concat("rank ", rank_), "stopped because another rank failed", "", "See the step's first error"}));
    } else if (faults != nullptr) {
      faults->report(e);  // before the abort, so that the cause is the first error
    }
    b_.abort(stopped ? "another rank failed" : "this rank failed");
    // No deadline: a callable still running (the one the watchdog named, say) writes into
    // this executor's buffers until it returns, and the next step or the destructor must
    // not meet it. Queued work that has not started is dropped by the abort (or, where a
    // backend runs it anyway, calls no user code: see compute()).
    for (auto* s : {&compute_, &comm_, &reduce_stream_, &copy_}) {
      if (s == &reduce_stream_ && reduced_.empty()) continue;  // no data parallelism: no such stream
      if (s == &copy_ && !plan_.has_copies) continue;          // no OFFLOAD / RELOAD: no copy stream
      for (;;) {
        try {
          if (b_.synchronize(*s, HostWait{}) != WaitResult::timed_out) break;
        } catch (...) {  // the rank's sticky error, thrown once the stream is drained
          break;
        }
      }
    }
    std::rethrow_exception(e);
  }

  void collect() {
    if (!options_.record_timeline) return;
    // The origin as the device clock saw it, when the backend can tell; otherwise the host
    // time at which it was issued (the stream was idle, so it ran at once).
    if constexpr (requires(B & b, const typename B::event& e) {
                    { b.event_time(e) } -> std::same_as<std::chrono::steady_clock::time_point>;
                  }) {
      result_.origin = b_.event_time(origin_);
    }
    for (std::size_t i = 0; i < plan_.steps.size(); ++i) {
      const PlannedStep& st = plan_.steps[i];
      const double start = b_.elapsed_ms(origin_, start_events_[i]);
      const double end = b_.elapsed_ms(origin_, end_events_[i]);
      for (std::int32_t k = 0; k < st.action_count; ++k) {
        Span& span = result_.spans[static_cast<std::size_t>(st.first_action + k)];
        span.start = start;
        span.end = end;
      }
    }
  }
};

}  // namespace ppsched
