// How user code becomes a pipeline stage: a plain struct of callables, no base class. A
// stage says how many floats per micro-batch it takes and gives, and supplies forward and
// either a full backward or a split backward_input / backward_weight (zero-bubble schedules
// need the split; with only the split, a full backward runs one after the other). The last
// stage adds a loss. ppsched hands the callables spans of floats — device memory on a GPU
// backend — and moves those bytes between stages; everything else (parameters, saved
// activations per micro-batch) stays the user's.
//
// Gradient accumulation: a stage that declares `weight_grad_size` gets, in each backward
// (or backward_weight), a zeroed span for that micro-batch's weight gradient; the executor
// sums them and hands the total to `optimizer_step` after the flush. Summing in micro-batch
// order (the default) gives bit-identical results for every schedule; summing in schedule
// order keeps one scratch buffer instead of one per micro-batch.
//
// Cancellation is cooperative: a running callable cannot be interrupted, and a failed step
// waits for it to return (docs/runtime.md). A callable that may run long can poll
// `step_stop_token()`, requested once its step has failed, and return early.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stop_token>
#include <string_view>

namespace ppsched {

struct StageFunctions {
  std::size_t input_size = 0;        // floats per micro-batch entering (stage 0: the batch's inputs)
  std::size_t output_size = 0;       // floats per micro-batch leaving (last stage: into the loss)
  std::size_t target_size = 0;       // last stage: floats per micro-batch of the batch's targets
  std::size_t weight_grad_size = 0;  // floats of the flattened weight gradient; 0: the stage keeps its own

  // output = f(input) for micro-batch `mb`. Save what backward needs, per micro-batch.
  std::function<void(std::int32_t mb, std::span<const float> input, std::span<float> output)> forward;
  // Full backward: grad_input (empty on stage 0) and this micro-batch's weight gradient.
  // `input` is the forward's input again, kept for it.
  std::function<void(std::int32_t mb, std::span<const float> input, std::span<const float> grad_output,
                     std::span<float> grad_input, std::span<float> weight_grad)>
      backward;
  // Split backward (ZB-H1, ZB-H2, ZB-V): the input gradient first, the weight gradient later.
  std::function<void(std::int32_t mb, std::span<const float> input, std::span<const float> grad_output,
                     std::span<float> grad_input)>
      backward_input;
  std::function<void(std::int32_t mb, std::span<const float> input, std::span<const float> grad_output,
                     std::span<float> weight_grad)>
      backward_weight;
  // Last stage: the micro-batch's loss, and its gradient with respect to `output`.
  std::function<float(std::int32_t mb, std::span<const float> output, std::span<const float> target,
                      std::span<float> grad_output)>
      loss;
  // After the flush (every backward of the step done): apply the accumulated gradient.
  std::function<void(std::span<const float> weight_grad)> optimizer_step;
};

enum class GradAccumulation : std::uint8_t {
  // One gradient buffer per micro-batch, summed in micro-batch order at the flush: every
  // schedule gives bit-identical gradients to unpipelined training. Memory: m gradients.
  microbatch_order,
  // One scratch buffer, added to the total as each backward finishes: bit-identical only
  // for schedules that run the weight gradients in micro-batch order. Memory: 2 gradients.
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
}  // namespace detail

// Inside a stage callable run by ppsched: the stop token of the callable's step, requested
// once the step has failed (a callable threw on any rank, the watchdog fired, a transfer
// failed). Whatever the callable computes after that is discarded, so a long callable that
// polls the token may return at once; one that does not is waited for. Outside a callable,
// a token that is never requested.
[[nodiscard]] inline std::stop_token step_stop_token() noexcept {
  return detail::running_step_stop != nullptr ? *detail::running_step_stop : std::stop_token{};
}

// A training batch: `inputs` holds m micro-batches of stage 0's input_size floats, one after
// the other; `targets` m micro-batches of the last stage's target_size floats. The caller
// keeps both alive during the step.
struct Batch {
  std::span<const float> inputs;
  std::span<const float> targets;
};

}  // namespace ppsched
