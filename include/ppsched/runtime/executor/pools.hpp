// Part of <ppsched/runtime/executor.hpp> (include that): the buffer pools, allocated once from the
// rank's plan (runtime/step_plan.hpp), and the weight-gradient slots.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/runtime/executor/core.hpp"

namespace ppsched::inline PPSCHED_MODE {

template <class B>
auto Executor<B>::allocate() -> void {
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
template <class B>
auto Executor<B>::assign_weight_slots(std::int32_t s) -> std::int32_t {
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
template <class B>
auto Executor<B>::weight_part(std::size_t i) const -> const Buffer* {
  const WeightStep& w = weight_steps_[i];
  if (w.slot < 0) return nullptr;
  const Action& a = action(plan_.steps[i].first_action);
  const StageGradients& g = grads_[static_cast<std::size_t>(grads_of_stage_[static_cast<std::size_t>(a.stage)])];
  if (g.parts.empty()) return nullptr;
  return &g.parts[static_cast<std::size_t>(w.slot)];
}

template <class B>
auto Executor<B>::weight_span(std::size_t i) -> std::span<float> {
  const WeightStep& w = weight_steps_[i];
  if (w.slot < 0) return {};
  const Action& a = action(plan_.steps[i].first_action);
  StageGradients& g = grads_[static_cast<std::size_t>(grads_of_stage_[static_cast<std::size_t>(a.stage)])];
  if (g.parts.empty()) return {};
  return g.part_spans[static_cast<std::size_t>(w.slot)];
}

template <class B>
auto Executor<B>::buffer(std::int32_t index) -> std::span<float> {
  return index < 0 ? std::span<float>() : spans_[static_cast<std::size_t>(index)];
}

}  // namespace ppsched
