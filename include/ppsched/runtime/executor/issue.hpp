// Part of <ppsched/runtime/executor.hpp> (include that): issuing the program: compute actions on
// the compute stream, communication groups on the comm stream, copies on the copy stream, the flush
// and the optimizer.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/runtime/executor/core.hpp"

namespace ppsched::inline PPSCHED_MODE {

template <class B>
auto Executor<B>::issue_all() -> void {
  lane_done_[0] = lane_done_[1] = lane_done_[2] = 0;
  b_.record(origin_, compute_);
  result_.origin = std::chrono::steady_clock::now();
  for (StageGradients& g : grads_) {
    if (!g.parts.empty()) b_.zero(compute_, g.total);
  }
  for (std::size_t i = 0; i < plan_.steps.size(); ++i) issue(i);
  if (has_backward_) flush();
  issue_loss_copy();
  b_.record(compute_done_, compute_);
  b_.record(comm_done_, comm_);
  if (plan_.has_copies) b_.record(copy_done_, copy_);
}

template <class B>
auto Executor<B>::issue(std::size_t i) -> void {
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
      // The micro-batch's size (Batch::sizes), at most the buffer's: never the padding.
      const std::size_t n = transfer_size(t);
      if (t.send) {
        b_.send(buf, n, t.peer, stream, tag);
      } else {
        b_.recv(buf, n, t.peer, stream, tag);
      }
    }
    b_.group_end();
  }
  b_.record(end_events_[i], stream);
  if (reducer_ && st.lane == Lane::compute) reduce_after(static_cast<std::int32_t>(i));
}

// A micro-batch's floats at a stage's input or output: Batch::sizes, or the declared size
// (checked against each other before the step: check_sizes).
template <class B>
auto Executor<B>::size_of(std::int32_t stage, std::int32_t mb, bool output) const noexcept -> std::size_t {
  const StageFunctions& f = stages_[static_cast<std::size_t>(stage)];
  if (batch_.sizes.empty()) return output ? output_floats(f) : input_floats(f);
  const MicrobatchSize& size = batch_.sizes[static_cast<std::size_t>(stage) * static_cast<std::size_t>(schedule_.microbatches) +
                                            static_cast<std::size_t>(mb)];
  return output ? size.output : size.input;
}

// What a transfer moves: the activation a stage sends forward and the gradient it receives
// for it are its output's size; the gradient it sends back and the activation it receives,
// its input's. PlannedTransfer::count is the capacity (the declared size).
template <class B>
auto Executor<B>::transfer_size(const PlannedTransfer& t) const noexcept -> std::size_t {
  if (batch_.sizes.empty()) return t.count;
  const Action& a = action(t.action);
  return size_of(a.stage, a.microbatch, a.op == Op::SEND_F || a.op == Op::RECV_B);
}

// A buffer's span cut to the micro-batch's size.
template <class B>
template <class T>
auto Executor<B>::sized(std::span<T> s, std::int32_t stage, std::int32_t mb, bool output) const noexcept
    -> std::span<T> {
  if (batch_.sizes.empty() || s.empty()) return s;
  return s.first(std::min(s.size(), size_of(stage, mb, output)));
}

// Data parallelism: once step i is a stage's last weight-gradient action, sum the stage's
// gradient on the reduce stream and hand it to the reducer, while compute goes on.
template <class B>
auto Executor<B>::reduce_after(std::int32_t i) -> void {
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

// The last stage's forward output of step `i` into the result, once the forward is done.
// A backend whose buffers are not host memory copies with its `copy_to_host` (CUDA:
// cudaMemcpyAsync); otherwise a task on the stream copies the span.
template <class B>
auto Executor<B>::copy_output(std::size_t i) -> void {
  const PlannedStep& st = plan_.steps[i];
  const std::size_t n = output_floats(stages_[static_cast<std::size_t>(last_stage())]);
  const Action& a = action(st.first_action);
  // The micro-batch's slot of output_size floats: its output, then zeros past its size (as
  // run_copy_output writes it on host-memory backends).
  const std::span<float> slot = std::span<float>(result_.outputs).subspan(static_cast<std::size_t>(a.microbatch) * n, n);
  const std::span<float> to = slot.first(size_of(a.stage, a.microbatch, true));
  const Buffer& from = buffers_[static_cast<std::size_t>(st.output)];
  if constexpr (requires(B & b, typename B::stream& s) { b.copy_to_host(s, from, to); }) {
    b_.copy_to_host(compute_, from, to);
    std::fill(slot.begin() + static_cast<std::ptrdiff_t>(to.size()), slot.end(), 0.0f);
  } else {
    const BufferUse<Buffer> use{&from, Access::read};
    b_.launch(compute_, HostTask{&Executor::run_copy_output, &calls_[i], "keep_outputs"},
              std::span<const BufferUse<Buffer>>(&use, 1));
  }
}

template <class B>
auto Executor<B>::run_copy_output(void* context) -> void {
  auto* call = static_cast<ComputeCall*>(context);
  Executor& self = *call->self;
  const PlannedStep& st = self.plan_.steps[static_cast<std::size_t>(call->step)];
  const Action& a = self.action(st.first_action);
  // The micro-batch's slot of output_size floats: its output, then zeros past its size.
  const std::span<float> slot = std::span<float>(self.result_.outputs)
                                    .subspan(static_cast<std::size_t>(a.microbatch) * self.buffer(st.output).size(),
                                             self.buffer(st.output).size());
  const std::span<const float> from = self.sized(self.buffer(st.output), a.stage, a.microbatch, true);
  std::copy(from.begin(), from.end(), slot.begin());
  std::fill(slot.begin() + static_cast<std::ptrdiff_t>(from.size()), slot.end(), 0.0f);
}

// After every backward (the totals are complete: each gradient was added in micro-batch
// order as soon as the earlier ones were in), let each stage apply them.
template <class B>
auto Executor<B>::flush() -> void {
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

template <class B>
auto Executor<B>::run_compute(void* context) -> void {
  auto* call = static_cast<ComputeCall*>(context);
  call->self->compute(call->step);
}

template <class B>
auto Executor<B>::run_optimizer(void* context) -> void {
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
    detail::run_inside_around_call(f, c, body);
  } catch (const std::exception& e) {
    throw error(detail::concat("rank ", self.rank_, ", stage ", g.stage, ", optimizer_step: ", e.what()));
  } catch (...) {
    throw error(detail::concat("rank ", self.rank_, ", stage ", g.stage,
                               ", optimizer_step: threw an exception that is not a std::exception"));
  }
}

template <class B>
auto Executor<B>::context(std::int32_t stage, std::int32_t mb, StageCall call) const -> StageContext {
  StageContext c;
  c.step = graph_step_ >= 0 ? graph_step_ : step_index_;  // a replay is the captured step
  c.microbatch = mb;
  c.stage = stage;
  c.rank = rank_;
  c.call = call;
  c.stream = stream_identity_;
  c.stop = step_stop_;
  c.seed = stage_seed(options_.seed, c.step, stage, mb);
  c.side_inputs = batch_.side_inputs;
  return c;
}

template <class B>
auto Executor<B>::compute(std::int32_t index) -> void {
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
    // Every span at the micro-batch's size (Batch::sizes): the input and the gradient a
    // backward writes for it at the input's, the output and its gradient at the output's.
    const std::span<const float> in =
        st.input_from_batch
            ? batch_.inputs.subspan(static_cast<std::size_t>(mb) * input_floats(f), size_of(a.stage, mb, false))
            : std::span<const float>(sized(buffer(st.input), a.stage, mb, false));
    const std::span<float> out = sized(buffer(st.output), a.stage, mb, a.op == Op::F || a.op == Op::R);
    const std::span<float> grad_out = sized(buffer(st.grad_output), a.stage, mb, true);
    StageContext c = context(a.stage, mb, StageCall::loss);
    auto call = [&](StageCall kind, auto&& body) {
      c.call = kind;
      in_loss = kind == StageCall::loss;
      detail::run_inside_around_call(f, c, body);
      in_loss = false;
    };
    if (st.computes_loss) {
      const std::span<const float> target =
          batch_.targets.subspan(static_cast<std::size_t>(mb) * f.target_size, f.target_size);
      call(StageCall::loss, [&] { run_loss(f, c, sized(buffer(st.loss_input), a.stage, mb, true), target, grad_out); });
    }
    switch (a.op) {
      case Op::F:
        c.keep_activation = !st.drops_activation;
        call(StageCall::forward, [&] { f.forward(c, in, out); });
        c.keep_activation = true;
        if (check_recompute_ && st.drops_activation) forward_hash_[hash_slot(a)] = hash_of(out);
        // A forward-only step's losses: the loss of the forward's output, its gradient
        // written to a scratch nobody reads.
        // Targets of the wrong size are refused before the step, so a size that does not
        // match here is "no targets": plain inference.
        if (forward_loss_ && a.stage == last_stage() &&
            batch_.targets.size() == static_cast<std::size_t>(schedule_.microbatches) * f.target_size) {
          const std::span<const float> target =
              batch_.targets.subspan(static_cast<std::size_t>(mb) * f.target_size, f.target_size);
          call(StageCall::loss, [&] { run_loss(f, c, out, target, sized(loss_scratch_span_, a.stage, mb, true)); });
        }
        break;
      case Op::B:
        if (f.backward) {
          call(StageCall::backward,
               [&] { f.backward(c, in, grad_out, out, weight_span(static_cast<std::size_t>(index))); });
        } else {
          call(StageCall::backward_input, [&] { f.backward_input(c, in, grad_out, out); });
          call(StageCall::backward_weight,
               [&] { f.backward_weight(c, in, grad_out, weight_span(static_cast<std::size_t>(index))); });
        }
        break;
      case Op::BI:
        call(StageCall::backward_input, [&] { f.backward_input(c, in, grad_out, out); });
        break;
      case Op::BW:
        call(StageCall::backward_weight, [&] { f.backward_weight(c, in, grad_out, weight_span(static_cast<std::size_t>(index))); });
        break;
      case Op::R:
        // Without a recompute of its own, the stage's forward runs again, keeping this
        // time, into a scratch output: the same input and seed give the same state.
        if (f.recompute) {
          call(StageCall::recompute, [&] { f.recompute(c, in); });
        } else {
          call(StageCall::recompute, [&] { f.forward(c, in, out); });
          if (check_recompute_ && forward_hash_[hash_slot(a)] != hash_of(out)) {
            detail::fail({detail::concat("stage ", a.stage),
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

template <class B>
auto Executor<B>::hash_slot(const Action& a) const noexcept -> std::size_t {
  return static_cast<std::size_t>(a.stage) * static_cast<std::size_t>(schedule_.microbatches) +
         static_cast<std::size_t>(a.microbatch);
}

// FNV-1a over the floats' bits: equal outputs, equal hashes; NaNs compare by their bits.
template <class B>
auto Executor<B>::hash_of(std::span<const float> values) noexcept -> std::uint64_t {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const float v : values) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    h = (h ^ bits) * 0x100000001b3ULL;
  }
  return h;
}

template <class B>
auto Executor<B>::run_copy(void* context) -> void {
  auto* call = static_cast<ComputeCall*>(context);
  call->self->copy_action(call->step);
}

// OFFLOAD / RELOAD on the copy stream: the stage moves its saved state of the micro-batch
// into or out of its host slot.
template <class B>
auto Executor<B>::copy_action(std::int32_t index) -> void {
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
    detail::run_inside_around_call(f, c, body);
  } catch (const std::exception& e) {
    throw error(detail::concat("rank ", rank_, ", stage ", a.stage, ", micro-batch ", a.microbatch, ", action ",
                               to_string(a), ": ", e.what()));
  } catch (...) {
    throw error(detail::concat("rank ", rank_, ", stage ", a.stage, ", micro-batch ", a.microbatch, ", action ",
                               to_string(a), ": threw an exception that is not a std::exception"));
  }
}

}  // namespace ppsched
