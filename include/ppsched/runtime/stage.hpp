// How user code becomes a pipeline stage: a plain struct of callables, no base class. A
// stage says how many floats per micro-batch it takes and gives, and supplies forward and
// either a full backward or a split backward_input / backward_weight (zero-bubble schedules
// need the split; with only the split, a full backward runs one after the other). The last
// stage adds a loss. ppsched hands the callables spans of floats — device memory on a GPU
// backend — and moves those bytes between stages; everything else (parameters, saved
// activations per micro-batch) stays the user's.
//
// Every callable may take a `StageContext` (step, micro-batch, stage, rank, stream, stop
// token, a seed) as its first parameter instead of the micro-batch index: a StageCallable
// slot accepts either form, so code written against the index keeps compiling. An optional
// `around_call` wraps every call of a stage, on the thread that runs it, so framework state
// that lives in thread-locals (grad mode, autocast) can be set where the call runs.
//
// Gradient accumulation: a stage that declares `weight_grad_size` gets, in each backward
// (or backward_weight), a zeroed span for that micro-batch's weight gradient; the executor
// sums them and hands the total to `optimizer_step` after the flush (docs/runtime.md has
// the modes and their memory).
//
// Cancellation is cooperative: a running callable cannot be interrupted, and a failed step
// waits for it to return (docs/runtime.md). A callable that may run long can poll
// `step_stop_token()` (or its context's `stop`), requested once its step has failed, and
// return early.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/tensor.hpp"
#include "ppsched/runtime/payload.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Which callable of a stage runs (StageContext::call).
// The last three serve the memory actions of a schedule (R, OFFLOAD, RELOAD).
enum class StageCall : std::uint8_t {
  forward,
  backward,
  backward_input,
  backward_weight,
  loss,
  optimizer_step,
  recompute,
  offload,
  reload,
};

[[nodiscard]] constexpr std::string_view to_string(StageCall c) noexcept {
  switch (c) {
    case StageCall::forward:
      return "forward";
    case StageCall::backward:
      return "backward";
    case StageCall::backward_input:
      return "backward_input";
    case StageCall::backward_weight:
      return "backward_weight";
    case StageCall::loss:
      return "loss";
    case StageCall::optimizer_step:
      return "optimizer_step";
    case StageCall::recompute:
      return "recompute";
    case StageCall::offload:
      return "offload";
    case StageCall::reload:
      return "reload";
  }
  return "?";
}

// The seed of one (step, stage, micro-batch): a SplitMix64 hash of the four numbers. It
// does not depend on the rank, the schedule or the call, so a forward and its backward (or
// a recomputation) see the same seed, and unpipelined code reproduces a pipelined step's
// dropout by calling this with the same numbers.
[[nodiscard]] constexpr std::uint64_t stage_seed(std::uint64_t seed, std::int64_t step, std::int32_t stage,
                                                 std::int32_t microbatch) noexcept {
  auto mix = [](std::uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::uint64_t h = mix(seed);
  h = mix(h ^ static_cast<std::uint64_t>(step));
  h = mix(h ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(stage)));
  return mix(h ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(microbatch)));
}

// What a callable knows about the call it serves. Built by the executor for each call; valid
// during the call (copy what you keep).
struct StageContext {
  std::int64_t step = 0;         // the executor's step: 0 for its first run_step, +1 each call
  std::int32_t microbatch = -1;  // -1 for optimizer_step
  std::int32_t stage = -1;
  std::int32_t rank = -1;
  StageCall call = StageCall::forward;
  // The stream the call's work belongs to: the cudaStream_t on the CUDA backend (the one
  // launch_stream() returns), the CpuStream's address on the CPU backend.
  const void* stream = nullptr;
  std::stop_token stop{};  // requested once the step has failed (as step_stop_token())
  std::uint64_t seed = 0;  // stage_seed(ExecutorOptions::seed, step, stage, microbatch)
  std::span<const SideInput> side_inputs{};  // the batch's (Batch::side_inputs)
  // Whether this call must keep what the micro-batch's backward needs. False only in a
  // forward whose micro-batch the schedule recomputes (an R action follows it): the point
  // of recomputation is that nothing is held between the forward and the recompute, so a
  // stage that honours the flag saves the memory; one that ignores it keeps its state
  // twice over and stays correct (the recompute overwrites it with the same values).
  bool keep_activation = true;

  // This micro-batch's slice of side input k, as T (T must be its dtype).
  template <class T>
  [[nodiscard]] std::span<const T> side_input(std::size_t k) const {
    if (k >= side_inputs.size()) {
      detail::fail({"side input", detail::concat("stage ", stage, " reads side input ", k, " but the batch has ",
                                         side_inputs.size()),
            detail::concat("stage ", stage, ", micro-batch ", microbatch),
            "Give it in Batch::side_inputs, and list its index in StageFunctions::side_inputs so the batch is checked "
            "before the step"});
    }
    const SideInput& in = side_inputs[k];
    if (in.dtype != dtype_of<T>) {
      detail::fail({"side input", detail::concat("side input ", k, " is ", to_string(in.dtype), ", read as ",
                                         to_string(dtype_of<T>)),
            detail::concat("stage ", stage), "Read it as the C++ type of its dtype"});
    }
    if (microbatch < 0) {
      detail::fail({"side input", detail::concat("read outside a micro-batch (", to_string(call), ")"),
            detail::concat("stage ", stage), "Read side inputs in the per-micro-batch callables"});
    }
    // The slice must lie inside the data: a side input no stage lists in
    // StageFunctions::side_inputs was never checked against the batch, and one that is too
    // short was read past its end (issue 24). Written so that nothing here can wrap.
    const std::size_t elements = in.data.size() / sizeof(T);
    const auto mb = static_cast<std::size_t>(microbatch);
    if (in.count != 0 && (in.count > elements || mb >= elements / in.count)) {
      detail::fail({"side input",
            detail::concat("side input ", k, " holds ", in.data.size(), " bytes, too few for micro-batch ", microbatch,
                           "'s slice (", mb + 1, " micro-batches of ", in.count, " ", to_string(in.dtype), ")"),
            detail::concat("stage ", stage, ", micro-batch ", microbatch),
            detail::concat("Give side input ", k, " microbatches x ", in.count,
                           " elements, and list it in stage ", stage,
                           "'s StageFunctions::side_inputs so the batch is checked before the step")});
    }
    return {reinterpret_cast<const T*>(in.data.data()) + mb * in.count, in.count};
  }
};

namespace detail {
template <class T>
struct is_std_function : std::false_type {};
template <class S>
struct is_std_function<std::function<S>> : std::true_type {};
}  // namespace detail

template <class Signature, bool takes_microbatch = true>
class StageCallable;

// One callable slot of StageFunctions. It holds a callable of either form:
//   R(const StageContext&, Args...)                 the context form
//   R(std::int32_t microbatch, Args...)             the index form (takes_microbatch), or
//   R(Args...)                                      optimizer_step's form without context
// and is called either way: with a context, or (as the slot was before the context existed)
// with the index, which the context form then sees as a context holding only the
// micro-batch. A callable that accepts both (a generic lambda) is taken in the index form,
// as it was before.
template <class R, class... Args, bool takes_microbatch>
class StageCallable<R(Args...), takes_microbatch> {
  template <class F>
  static constexpr bool index_form = takes_microbatch ? std::is_invocable_r_v<R, F&, std::int32_t, Args...>
                                                      : std::is_invocable_r_v<R, F&, Args...>;
  template <class F>
  static constexpr bool context_form = std::is_invocable_r_v<R, F&, const StageContext&, Args...>;

 public:
  StageCallable() noexcept = default;
  StageCallable(std::nullptr_t) noexcept {}  // NOLINT: assignable from nullptr, as std::function
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, StageCallable> &&
             (index_form<std::decay_t<F>> || context_form<std::decay_t<F>>))
  StageCallable(F&& f) {  // NOLINT: implicit, so that a lambda assigns as to std::function
    using D = std::decay_t<F>;
    if constexpr (std::is_pointer_v<D> || std::is_member_pointer_v<D> || detail::is_std_function<D>::value) {
      if (!f) return;  // an empty function stays empty (operator bool)
    }
    if constexpr (index_form<D>) {
      f_ = [g = D(std::forward<F>(f))](const StageContext& c, Args... args) mutable -> R {
        if constexpr (takes_microbatch) {
          return g(c.microbatch, std::forward<Args>(args)...);
        } else {
          (void)c;
          return g(std::forward<Args>(args)...);
        }
      };
    } else {
      f_ = std::forward<F>(f);
    }
  }

  R operator()(const StageContext& context, Args... args) const { return f_(context, std::forward<Args>(args)...); }
  R operator()(std::int32_t microbatch, Args... args) const
    requires takes_microbatch
  {
    StageContext c;
    c.microbatch = microbatch;
    return f_(c, std::forward<Args>(args)...);
  }
  R operator()(Args... args) const
    requires(!takes_microbatch)
  {
    return f_(StageContext{}, std::forward<Args>(args)...);
  }

  explicit operator bool() const noexcept { return static_cast<bool>(f_); }
  friend bool operator==(const StageCallable& f, std::nullptr_t) noexcept { return !f; }

 private:
  std::function<R(const StageContext&, Args...)> f_;
};

// The call an `around_call` wraps: run it exactly once, on the thread around_call was
// called on. Holds no allocation; valid during around_call only.
class StageCallRef {
 public:
  template <class F>
  StageCallRef(F& f, bool& ran) noexcept : run_([](void* p) { (*static_cast<F*>(p))(); }), target_(&f), ran_(&ran) {}

  void operator()() const {
    if (*ran_) {
      detail::fail({"around_call", "ran the stage call twice", "StageFunctions::around_call",
            "Call the StageCallRef exactly once"});
    }
    *ran_ = true;
    run_(target_);
  }

 private:
  void (*run_)(void*);
  void* target_;
  bool* ran_;
};

struct StageFunctions {
  std::size_t input_size = 0;        // floats per micro-batch entering (stage 0: the batch's inputs)
  std::size_t output_size = 0;       // floats per micro-batch leaving (last stage: into the loss)
  std::size_t target_size = 0;       // last stage: floats per micro-batch of the batch's targets
  std::size_t weight_grad_size = 0;  // floats of the flattened weight gradient; 0: the stage keeps its own
  // Typed boundaries (graph/tensor.hpp): when set, the stage's input / output is this list
  // of tensors, each up to its max_count, and input_size / output_size are the payload's
  // floats (payload_floats; leave them 0). The callables get the raw payload and read it
  // through ConstPayload / Payload (runtime/payload.hpp). Neighbours must declare the same
  // list. Stage 0's typed input comes from the batch, m payloads one after the other.
  std::vector<TensorSpec> input_tensors;
  std::vector<TensorSpec> output_tensors;
  // Indices of Batch::side_inputs this stage reads (StageContext::side_input): checked
  // before each step, so a missing one fails the step before it starts.
  std::vector<std::size_t> side_inputs;
  // How the stage reads each of them, in the order of side_inputs (empty: any dtype and
  // count, the sizes checked only against each other). Checked with the batch, so labels of
  // the wrong dtype fail before the step instead of at the loss of micro-batch 0, after every
  // forward (issue 24).
  std::vector<SideInputSpec> side_input_specs;

  // Each callable takes the micro-batch index `mb` or a `const StageContext&` first (see
  // StageCallable); docs/runtime.md says how long each span stays valid.
  // output = f(input) for micro-batch `mb`. Save what backward needs, per micro-batch.
  StageCallable<void(std::span<const float> input, std::span<float> output)> forward;
  // Full backward: grad_input (empty on stage 0) and this micro-batch's weight gradient.
  // `input` is the forward's input again, kept for it.
  StageCallable<void(std::span<const float> input, std::span<const float> grad_output, std::span<float> grad_input,
                     std::span<float> weight_grad)>
      backward;
  // Split backward (ZB-H1, ZB-H2, ZB-V): the input gradient first, the weight gradient later.
  StageCallable<void(std::span<const float> input, std::span<const float> grad_output, std::span<float> grad_input)>
      backward_input;
  StageCallable<void(std::span<const float> input, std::span<const float> grad_output, std::span<float> weight_grad)>
      backward_weight;
  // Last stage: the micro-batch's loss, and its gradient with respect to `output`.
  StageCallable<float(std::span<const float> output, std::span<const float> target, std::span<float> grad_output)>
      loss;
  // Last stage, instead of `loss`: the loss written into `loss`, one float of device memory
  // (host memory on the CPU backend), so that the host never waits for the device inside the
  // step; the executor copies the m losses back after it. Graph capture needs it
  // (ExecutorOptions::graphs); any step may use it.
  StageCallable<void(std::span<const float> output, std::span<const float> target, std::span<float> grad_output,
                     std::span<float> loss)>
      device_loss;
  // After the flush (every backward of the step done): apply the accumulated gradient.
  StageCallable<void(std::span<const float> weight_grad), false> optimizer_step;
  // Graph capture (ExecutorOptions::graphs): the stage declares that its callables only
  // enqueue work on StageContext::stream (launch_stream() on CUDA) and depend only on their
  // spans and the micro-batch — no host read of device results, no synchronisation, no
  // allocation, nothing that changes with the step — so that replaying what they enqueued at
  // the capture repeats them. A replayed step does not call them (on the CPU backend, whose
  // callables are the work itself, they run with the capture's StageContext: its step and
  // seed).
  bool capturable = false;

  // Memory actions (docs/runtime.md, "Recomputation and offload"). All optional.
  //
  // R (recompute): restore, from the kept forward input, what the micro-batch's backward
  // needs, after a forward that ran with `keep_activation` false. Unset, the executor calls
  // `forward` again (keep_activation true, StageContext::call == recompute) into a scratch
  // output it discards, so existing stage code is recomputed as it is.
  StageCallable<void(std::span<const float> input)> recompute;
  // OFFLOAD / RELOAD: the stage's saved state of a micro-batch (what forward kept for
  // backward: ppsched cannot see it, it lives in the callables) moves to a host buffer of
  // `offload_size` floats that the executor owns — pinned memory on CUDA, from a pool sized
  // by the schedule's peak of micro-batches offloaded at once — and back before backward.
  // They run on the rank's copy stream (StageContext::stream; on CUDA enqueue
  // cudaMemcpyAsync there), not on the compute stream, so they overlap compute; the
  // executor orders OFFLOAD after the forward and the backward after RELOAD with events.
  // `offload` may release the device memory once its copy is done; `reload` writes it back.
  // A schedule with OFFLOAD for a stage that sets neither is refused when the executor is
  // built.
  std::size_t offload_size = 0;
  StageCallable<void(std::span<float> host)> offload;
  StageCallable<void(std::span<const float> host)> reload;
  // Optional: wraps every call of this stage's callables, on the thread that runs it. It
  // must run `call()` exactly once (the step fails otherwise); what it sets around it
  // (torch::NoGradGuard, an autocast scope, a profiler range) holds for the call.
  std::function<void(const StageContext& context, StageCallRef call)> around_call;
};

enum class GradAccumulation : std::uint8_t {
  // Each micro-batch's gradient is added to the total once every earlier one is: the sums
  // of unpipelined accumulation, bit-identical for every schedule. Memory per stage: the
  // total and 1 + w gradients, w the most gradients done ahead of an earlier micro-batch
  // (0 for schedules that run weight gradients in micro-batch order; up to m - 1).
  microbatch_order,
  // Each gradient is added as its backward finishes: bit-identical only for schedules that
  // run the weight gradients in micro-batch order. Memory per stage: 2 gradients.
  schedule_order,
};

[[nodiscard]] constexpr std::string_view to_string(GradAccumulation g) noexcept {
  return g == GradAccumulation::microbatch_order ? "micro-batch order" : "schedule order";
}

namespace detail {
// The stop token of the step whose callable runs on this thread (set by the executor around
// each call); null outside a callable.
inline thread_local const std::stop_token* running_step_stop = nullptr;

// Sets `running_step_stop` for the duration of one callable.
class RunningStepScope {
 public:
  explicit RunningStepScope(const std::stop_token* stop) noexcept : previous_(running_step_stop) {
    running_step_stop = stop;
  }
  RunningStepScope(const RunningStepScope&) = delete;
  RunningStepScope& operator=(const RunningStepScope&) = delete;
  ~RunningStepScope() { running_step_stop = previous_; }

 private:
  const std::stop_token* previous_;
};

// Runs `body` (one stage call) inside the stage's around_call, if it has one: the executor's
// stage calls, and profile_stages' so that thread-local framework state (grad mode, autocast)
// is what it is in a real step. `caller` names a caller whose errors are not labelled
// otherwise (the executor's are, with the rank and the action).
template <class Body>
void run_inside_around_call(const StageFunctions& f, const StageContext& c, Body& body, std::string_view caller = {}) {
  if (!f.around_call) {
    body();
    return;
  }
  bool ran = false;
  f.around_call(c, StageCallRef(body, ran));
  if (!ran) {
    detail::fail({detail::concat("around_call of stage ", c.stage),
          detail::concat("returned without running ", to_string(c.call), caller.empty() ? "" : detail::concat(" (in ", caller, ")")),
          "StageFunctions::around_call", "Call the StageCallRef it is given exactly once"});
  }
}
}  // namespace detail

// Inside a stage callable run by ppsched: the stop token of the callable's step, requested
// once the step has failed (a callable threw on any rank, the watchdog fired, a transfer
// failed). Whatever the callable computes after that is discarded, so a long callable that
// polls the token may return at once; one that does not is waited for. Outside a callable,
// a token that is never requested.
[[nodiscard]] inline std::stop_token step_stop_token() noexcept {
  return detail::running_step_stop != nullptr ? *detail::running_step_stop : std::stop_token{};
}

// A parameter shared by several stages (an embedding on the first stage and the output
// projection on the last): each of `stages` keeps its own copy, and the gradient of the
// copy is `count` floats at `offsets[i]` of stage `stages[i]`'s weight gradient. After the
// flush the executor sums those slices — each stage's total, in stage order — across the
// owning ranks and writes the sum into every one of them before any `optimizer_step`, so
// the copies take the same update and stay equal.
struct TiedWeights {
  std::vector<std::int32_t> stages;
  std::vector<std::size_t> offsets;  // one per stage: where the shared gradient starts, in floats
  std::size_t count = 0;             // floats of the shared parameter's gradient
};

// Floats per micro-batch entering and leaving a stage: its payload's with typed boundaries.
[[nodiscard]] inline std::size_t input_floats(const StageFunctions& f) noexcept {
  return f.input_tensors.empty() ? f.input_size : payload_floats(f.input_tensors);
}
[[nodiscard]] inline std::size_t output_floats(const StageFunctions& f) noexcept {
  return f.output_tensors.empty() ? f.output_size : payload_floats(f.output_tensors);
}

// One micro-batch's size at one stage of a variable-length batch (Batch::sizes), in floats:
// what its forward reads and what it writes (and sends on). With typed boundaries, the payload
// of what the micro-batch carries: payload_floats(tensors, counts).
struct MicrobatchSize {
  std::size_t input = 0;
  std::size_t output = 0;

  friend constexpr bool operator==(const MicrobatchSize&, const MicrobatchSize&) = default;
};

// A training batch: `inputs` holds m micro-batches of stage 0's input floats
// (input_floats()), one after the other; `targets` m micro-batches of the last stage's
// target_size floats; `side_inputs` per-micro-batch data any stage may read. The caller
// keeps all of it alive during the step.
//
// `sizes` makes the micro-batches variable-length (docs/runtime.md): stage s's size of
// micro-batch k at [s * m + k], at most the stage's declared input and output floats (the
// capacity its buffers have). Every transfer then moves exactly its micro-batch's size, and
// every span a callable gets (input, output, gradients, the loss's) is that long; stage 0's
// slice of `inputs` is the first `sizes[k].input` floats of its micro-batch's
// input_floats() slot. Empty: every micro-batch has the declared sizes.
struct Batch {
  std::span<const float> inputs;
  std::span<const float> targets;
  std::span<const SideInput> side_inputs{};
  std::span<const MicrobatchSize> sizes{};
};

namespace detail {
// Throws unless `batch.sizes` is empty or gives every stage of `stages` a size per micro-batch
// of the m, each within the stage's declared floats (and, with typed tensors, at least their
// header), the output of stage s the input of stage s + 1. The error names the stage, the
// micro-batch and both sizes. The World and the executor check it before a step starts.
inline void check_sizes(std::span<const StageFunctions> stages, const Batch& batch, std::size_t m) {
  if (batch.sizes.empty()) return;
  const std::size_t want = stages.size() * m;
  if (batch.sizes.size() != want) {
    const std::size_t first = std::min(batch.sizes.size(), want);
    detail::fail({"batch",
                  detail::concat("Batch::sizes has ", batch.sizes.size(), " entries; ", stages.size(), " stages x ", m,
                                 " micro-batches need ", want,
                                 batch.sizes.size() < want
                                     ? detail::concat(" (stage ", first / m, ", micro-batch ", first % m, " has none)")
                                     : std::string(" (one per stage and micro-batch, stage-major)")),
                  "Batch::sizes", "Give each stage's size of every micro-batch, stage s's micro-batch k at [s * m + k]"});
  }
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const StageFunctions& f = stages[s];
    for (std::size_t k = 0; k < m; ++k) {
      const MicrobatchSize& size = batch.sizes[s * m + k];
      const auto where = [&] { return detail::concat("stage ", s, ", micro-batch ", k); };  // only on failure
      for (const bool in : {true, false}) {
        const std::size_t n = in ? size.input : size.output;
        const std::size_t capacity = in ? input_floats(f) : output_floats(f);
        const auto& tensors = in ? f.input_tensors : f.output_tensors;
        const char* side = in ? "input" : "output";
        if (n > capacity) {
          detail::fail({"batch",
                        detail::concat("Batch::sizes gives stage ", s, "'s ", side, " of micro-batch ", k, " ", n,
                                       " floats, above the ", capacity, " the stage declares (",
                                       tensors.empty() ? (in ? "input_size" : "output_size")
                                                       : (in ? "payload_floats(input_tensors)" : "payload_floats(output_tensors)"),
                                       ")"),
                        where(), "Split the micro-batch, or declare a larger maximum (the capacity of every buffer)"});
        }
        const std::size_t header = detail::align_payload(tensors.size() * sizeof(std::uint64_t)) / sizeof(float);
        if (!tensors.empty() && n < header) {
          detail::fail({"batch",
                        detail::concat("Batch::sizes gives stage ", s, "'s ", side, " of micro-batch ", k, " ", n,
                                       " floats, below the ", header, " of its payload's header"),
                        where(), "Give the payload's size, payload_floats(tensors, counts)"});
        }
      }
      if (s == 0) continue;
      const std::size_t sent = batch.sizes[(s - 1) * m + k].output;
      if (sent != size.input) {
        detail::fail({"batch",
                      detail::concat("Batch::sizes: stage ", s - 1, " sends micro-batch ", k, " as ", sent,
                                     " floats but stage ", s, " receives ", size.input),
                      detail::concat("stages ", s - 1, " and ", s, ", micro-batch ", k),
                      "Give stage s's output the size of stage s + 1's input for every micro-batch"});
      }
    }
  }
}
}  // namespace detail

// Throws unless the batch has every side input stage `stage` lists, each m slices long and,
// where the stage gives side_input_specs, of the dtype and count it reads.
inline void check_side_inputs(const StageFunctions& f, std::int32_t stage, const Batch& batch, std::size_t m) {
  if (!f.side_input_specs.empty() && f.side_input_specs.size() != f.side_inputs.size()) {
    detail::fail({detail::concat("stage ", stage),
          detail::concat("lists ", f.side_inputs.size(), " side inputs but ", f.side_input_specs.size(), " specs for them"),
          "StageFunctions::side_input_specs", "Give one spec per entry of StageFunctions::side_inputs, or none"});
  }
  for (std::size_t i = 0; i < f.side_inputs.size(); ++i) {
    const std::size_t k = f.side_inputs[i];
    if (k >= batch.side_inputs.size()) {
      detail::fail({"batch",
            detail::concat("has ", batch.side_inputs.size(), " side inputs, but stage ", stage, " reads side input ", k),
            "Batch::side_inputs", "Give every side input the stages list in StageFunctions::side_inputs"});
    }
    const SideInput& in = batch.side_inputs[k];
    // m x count x the dtype's size, checked so that it cannot wrap: an 8-byte side input
    // declared as 2^61 + 1 floats per micro-batch passed as 8 bytes for 2 micro-batches.
    const std::size_t size = dtype_size(in.dtype);
    const std::size_t most = std::numeric_limits<std::size_t>::max();
    if (in.count != 0 && (m > most / in.count || m * in.count > most / size)) {
      detail::fail({"batch",
            detail::concat("side input ", k, " declares ", in.count, " ", to_string(in.dtype), " per micro-batch; ", m,
                           " micro-batches of them do not fit in memory"),
            "Batch::side_inputs", "Give SideInput::count as the elements of one micro-batch"});
    }
    if (in.data.size() != m * in.count * size) {
      detail::fail({"batch",
            detail::concat("side input ", k, " holds ", in.data.size(), " bytes; ", m, " micro-batches of ", in.count,
                           " ", to_string(in.dtype), " need ", m * in.count * dtype_size(in.dtype)),
            "Batch::side_inputs", "Give each side input microbatches x count elements of its dtype"});
    }
    if (!f.side_input_specs.empty()) {
      const SideInputSpec& want = f.side_input_specs[i];
      if (in.dtype != want.dtype || in.count != want.count) {
        detail::fail({"batch",
              detail::concat("side input ", k, " is ", to_string(in.dtype), " x ", in.count, " per micro-batch, but stage ",
                             stage, " reads it as ", to_string(want.dtype), " x ", want.count),
              "Batch::side_inputs",
              detail::concat("Give side input ", k, " as ", to_string(want.dtype), " x ", want.count,
                             " per micro-batch (SideInput::of), or fix stage ", stage, "'s StageFunctions::side_input_specs")});
      }
    }
  }
}

}  // namespace ppsched
