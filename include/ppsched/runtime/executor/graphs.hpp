// Part of <ppsched/runtime/executor.hpp> (include that): graph capture of the steady-state step
// (ExecutorOptions::graphs, runtime/graph_capture.hpp) and the device-side losses it needs.
//
// A step is captured once, after `warmup_steps` eager steps: the compute stream begins the
// capture, the comm (and copy) stream joins it through a fork event, the whole program is
// issued as in an eager step, the other streams join back into the compute stream, and the
// capture ends. From then on a step is one `replay` of that program and one event the host
// waits for. What cannot be replayed safely is refused when the executor is built, naming the
// stage and the reason; a batch whose memory or sizes differ from the capture's is refused
// before its step.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/runtime/executor/core.hpp"
#include "ppsched/runtime/graph_capture.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Set-up checks of graph mode: everything a replayed program cannot do, refused before the
// first step with the stage (or option) and the reason.
template <class B>
auto Executor<B>::check_graphs() -> void {
  if (!options_.graphs.enabled) return;
  const std::string subject = detail::concat("executor for rank ", rank_, " of schedule '", schedule_.name, "'");
  const std::string no_graphs = "or set ExecutorOptions::graphs.enabled = false";
  if (const std::string reason = detail::capture_unsupported(b_); !reason.empty()) {
    detail::fail({subject, detail::concat("cannot capture a step: ", reason), "ExecutorOptions::graphs",
                  detail::concat("Run on a backend that captures (CUDA with NCCL, one GPU per rank; the CPU backend), ",
                                 no_graphs)});
  }
  if (options_.graphs.warmup_steps < 0) {
    detail::fail({subject, detail::concat("graphs.warmup_steps is ", options_.graphs.warmup_steps),
                  "ExecutorOptions::graphs.warmup_steps", "Give 0 or more eager steps before the capture (default 1)"});
  }
  if (options_.record_timeline) {
    detail::fail({subject,
                  "record_timeline is on with graphs: a replayed step's per-action events are inside the graph, where "
                  "the host cannot read them",
                  "ExecutorOptions::record_timeline",
                  detail::concat("Set record_timeline = false with graphs (run without graphs to see a timeline), ",
                                 no_graphs)});
  }
  if (options_.keep_outputs) {
    detail::fail({subject,
                  "keep_outputs copies the last stage's outputs into the step's result, host memory that changes with "
                  "every step (on CUDA a copy to pageable memory, which waits on the host): a replayed program cannot "
                  "repeat it",
                  "ExecutorOptions::keep_outputs", detail::concat("Set keep_outputs = false with graphs, ", no_graphs)});
  }
  for (std::int32_t s = 0; s < schedule_.stages(); ++s) {
    if (!holds(s)) continue;
    const StageFunctions& f = stages_[static_cast<std::size_t>(s)];
    const std::string where = detail::concat("stage ", s, " (rank ", rank_, ")");
    if (!f.capturable) {
      detail::fail({subject,
                    detail::concat("stage ", s,
                                   " is not declared capturable: a replay repeats the work its callables enqueued at "
                                   "the capture without calling them, so a callable that reads device results on the "
                                   "host, synchronises, allocates, or depends on the step would go wrong silently"),
                    detail::concat(where, ", StageFunctions::capturable"),
                    detail::concat("Set StageFunctions::capturable = true once its callables only enqueue work on "
                                   "StageContext::stream and depend only on their spans and micro-batch, ",
                                   no_graphs)});
    }
    if (s == last_stage() && f.loss && !f.device_loss) {
      detail::fail({subject,
                    detail::concat("stage ", s,
                                   "'s loss returns its value to the host (StageFunctions::loss): the host reads a "
                                   "device result inside the step, which a captured program cannot do"),
                    detail::concat(where, ", StageFunctions::loss"),
                    detail::concat("Give StageFunctions::device_loss, which writes each micro-batch's loss into "
                                   "device memory (the executor copies them back after the step), ",
                                   no_graphs)});
    }
  }
}

// The gradient reducer of data parallelism is a host callable invoked while the step is
// issued; a replayed step would not call it.
template <class B>
auto Executor<B>::check_reducer_graphs() const -> void {
  if (!options_.graphs.enabled) return;
  detail::fail({detail::concat("executor for rank ", rank_, " of schedule '", schedule_.name, "'"),
                "a gradient reducer is a host callable run while each step is issued; a replayed step would not "
                "call it",
                "Executor::set_gradient_reducer",
                "Reduce the gradients after run_step returns, or set ExecutorOptions::graphs.enabled = false"});
}

// From the constructor, and again for each new plan (set_schedule): the device losses sized for
// its micro-batches, and any graph of an earlier plan dropped (its buffers were that plan's):
// the next steps warm up and capture again.
template <class B>
auto Executor<B>::allocate_graphs() -> void {
  graph_ = {};
  graph_ready_ = false;
  graph_step_ = -1;
  eager_left_ = options_.graphs.warmup_steps;
  device_loss_ = holds(last_stage()) && static_cast<bool>(stages_[static_cast<std::size_t>(last_stage())].device_loss);
  const auto m = static_cast<std::size_t>(schedule_.microbatches);
  if (device_loss_ && losses_span_.size() != m) {
    losses_ = b_.allocate(m);
    losses_span_ = b_.span(losses_);
    if constexpr (detail::has_copy_to_host<B>) {
      if constexpr (requires(B & b, std::size_t n) { b.allocate_host(n); }) {
        losses_host_ = b_.allocate_host(m);
      } else {
        losses_host_ = b_.allocate(m);
      }
    }
  }
  if (!options_.graphs.enabled || graph_events_) return;
  graph_fork_ = b_.create_event();
  graph_done_ = b_.create_event();
  graph_events_ = true;
}

// The loss of micro-batch `mb`: into device memory with device_loss, else returned.
template <class B>
auto Executor<B>::run_loss(const StageFunctions& f, const StageContext& c, std::span<const float> output,
                           std::span<const float> target, std::span<float> grad_output) -> void {
  const auto mb = static_cast<std::size_t>(c.microbatch);
  if (f.device_loss) {
    f.device_loss(c, output, target, grad_output, losses_span_.subspan(mb, 1));
  } else {
    result_.losses[mb] = f.loss(c, output, target, grad_output);
  }
}

// Issued last in the step (captured with it): the device losses into host-visible memory.
template <class B>
auto Executor<B>::issue_loss_copy() -> void {
  if constexpr (detail::has_copy_to_host<B>) {
    if (device_loss_) b_.copy_to_host(compute_, losses_, b_.span(losses_host_));
  }
}

// After the step's work is done: the device losses into the result.
template <class B>
auto Executor<B>::read_losses() -> void {
  if (!device_loss_) return;
  // A forward-only step without targets computed no loss: its losses stay NaN.
  if (forward_loss_ && batch_.targets.empty()) return;
  std::span<const float> from = losses_span_;
  if constexpr (detail::has_copy_to_host<B>) from = b_.span(losses_host_);
  std::copy(from.begin(), from.end(), result_.losses.begin());
}

// A replayed program reads the memory it was captured with: the batch must be the same
// memory, of the same sizes, every step (fill it in place).
template <class B>
auto Executor<B>::check_graph_batch(const Batch& batch) const -> void {
  if (!graph_ready_) return;
  const auto moved = [&](std::string what, const void* was, std::size_t was_bytes, const void* now,
                         std::size_t now_bytes) {
    if (was == now && was_bytes == now_bytes) return;
    detail::fail({"batch",
                  detail::concat(what, " is not the memory the step was captured with (", was_bytes, " bytes at ", was,
                                 " at step ", graph_step_, ", now ", now_bytes, " bytes at ", now,
                                 "): a replayed step reads the addresses and sizes it was captured with"),
                  what,
                  "Copy each step's data into the same buffers (static inputs) and keep the sizes, or set "
                  "ExecutorOptions::graphs.enabled = false for changing shapes"});
  };
  moved("Batch::inputs", graph_batch_.inputs.data(), graph_batch_.inputs.size_bytes(), batch.inputs.data(),
        batch.inputs.size_bytes());
  moved("Batch::targets", graph_batch_.targets.data(), graph_batch_.targets.size_bytes(), batch.targets.data(),
        batch.targets.size_bytes());
  moved("Batch::side_inputs", graph_batch_.side_inputs.data(), graph_batch_.side_inputs.size_bytes(),
        batch.side_inputs.data(), batch.side_inputs.size_bytes());
  // Sizes of a variable-length batch (Batch::sizes) are baked into the captured transfers and
  // spans: a replay moves the capture's.
  const bool same_sizes = batch.sizes.size() == graph_sizes_.size() &&
                          std::equal(batch.sizes.begin(), batch.sizes.end(), graph_sizes_.begin());
  if (!same_sizes) {
    const auto m = static_cast<std::size_t>(schedule_.microbatches);
    std::size_t k = 0;
    while (k < batch.sizes.size() && k < graph_sizes_.size() && batch.sizes[k] == graph_sizes_[k]) ++k;
    const auto size_at = [&](std::span<const MicrobatchSize> sizes) {
      return k < sizes.size() ? detail::concat(sizes[k].input, " in, ", sizes[k].output, " out")
                              : std::string("none (the declared sizes)");
    };
    detail::fail({"batch",
                  detail::concat("Batch::sizes differ from the step the graph was captured at (step ", graph_step_,
                                 "): stage ", k / std::max<std::size_t>(m, 1), ", micro-batch ",
                                 k % std::max<std::size_t>(m, 1), " is ", size_at(batch.sizes), " floats, captured ",
                                 size_at(graph_sizes_),
                                 "; a replayed step moves the sizes it was captured with"),
                  "Batch::sizes",
                  "Keep the sizes fixed with graphs (pad to a fixed size), or set ExecutorOptions::graphs.enabled = "
                  "false for changing shapes"});
  }
  for (std::size_t k = 0; k < batch.side_inputs.size(); ++k) {
    const SideInput& was = graph_batch_.side_inputs[k];
    const SideInput& now = batch.side_inputs[k];
    moved(detail::concat("Batch::side_inputs[", k, "]"), was.data.data(), was.data.size(), now.data.data(),
          now.data.size());
  }
}

// One step in graph mode: capture on the first, then replay, and wait for it under the
// watchdog (which sees the step as a whole: a replay shows no progress per action).
template <class B>
auto Executor<B>::run_graph_step(StepFaults* faults) -> void {
  if constexpr (backend_ops::has_capture<B>) {
    if (!graph_ready_) capture();
    result_.origin = std::chrono::steady_clock::now();
    b_.replay(graph_, compute_);
    b_.record(graph_done_, compute_);
    const std::stop_token stop = faults->token();
    const auto deadline = detail::saturating_deadline(std::chrono::steady_clock::now(), options_.watchdog);
    for (;;) {
      const WaitResult r = b_.synchronize(graph_done_, HostWait{deadline, stop});
      if (r == WaitResult::done) break;
      if (r == WaitResult::stopped) throw detail::StoppedByPeer{};
      // A backend may give up before the deadline (the CPU backend's own cap): wait again.
      if (std::chrono::steady_clock::now() < deadline) continue;
      throw detail::make_error(
          {detail::concat("rank ", rank_),
           detail::concat("watchdog: the replayed step (a captured program of ", plan_.steps.size(),
                          " steps) did not complete within ", options_.watchdog.count(),
                          " ms; a replay shows no progress per action"),
           "ExecutorOptions::graphs",
           "Run with ExecutorOptions::graphs.enabled = false to see which action waits for what, or raise "
           "ExecutorOptions::watchdog"});
    }
  } else {
    (void)faults;
  }
}

template <class B>
auto Executor<B>::capture() -> void {
  if constexpr (backend_ops::has_capture<B>) {
    graph_step_ = step_index_;
    graph_batch_ = batch_;
    graph_sizes_.assign(batch_.sizes.begin(), batch_.sizes.end());
    b_.begin_capture(compute_);
    try {
      b_.record(graph_fork_, compute_);
      b_.wait(comm_, graph_fork_);
      if (plan_.has_copies) b_.wait(copy_, graph_fork_);
      issue_all();
      b_.wait(compute_, comm_done_);
      if (plan_.has_copies) b_.wait(compute_, copy_done_);
    } catch (...) {
      try {
        (void)b_.end_capture(compute_);
      } catch (...) {  // the capture is invalid already: the first error is the cause
      }
      throw;
    }
    graph_ = b_.end_capture(compute_);
    graph_ready_ = true;
  }
}

// After a failed step (its streams drained): the graph goes; the next steps warm up and
// capture again (the communicator is new after recover()).
template <class B>
auto Executor<B>::graph_failed() noexcept -> void {
  if (!options_.graphs.enabled) return;
  graph_ = {};
  graph_ready_ = false;
  graph_step_ = -1;
  eager_left_ = options_.graphs.warmup_steps;
}

}  // namespace ppsched
