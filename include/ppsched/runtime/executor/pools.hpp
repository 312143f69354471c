// Part of <ppsched/runtime/executor.hpp> (include that): the buffer pools, sized by the rank's plan
// (runtime/step_plan.hpp) and kept across plans (set_schedule), and the weight-gradient slots.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "ppsched/runtime/executor/core.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Once, from the constructor: the streams and the events every plan shares, then the first
// plan's buffers.
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
  origin_ = b_.create_event();
  for (auto& e : tied_events_) e = b_.create_event();
  compute_done_ = b_.create_event();
  comm_done_ = b_.create_event();
  copy_done_ = b_.create_event();
  build();
}

namespace detail {
// A spare of exactly `floats` out of `spare` (the last one kept, so the pools stay a stack),
// or nothing.
template <class T>
[[nodiscard]] std::optional<T> take_spare(std::vector<std::pair<std::size_t, T>>& spare, std::size_t floats) {
  for (std::size_t i = spare.size(); i-- > 0;) {
    if (spare[i].first != floats) continue;
    T b = std::move(spare[i].second);
    if (i + 1 != spare.size()) spare[i] = std::move(spare.back());
    spare.pop_back();
    return b;
  }
  return std::nullopt;
}

// A new buffer of `floats` in the pools' count, and in the plan's growth after the first plan.
inline void count_new_buffer(ExecutorPools& pools, PoolGrowth& growth, bool counting_growth, std::size_t floats) {
  ++pools.buffers;
  pools.floats += floats;
  if (counting_growth) {
    ++growth.buffers;
    growth.floats += floats;
  }
}
}  // namespace detail

// A buffer of exactly `floats` from the pools, or a new one (counted as growth after the
// constructor's plan).
template <class B>
auto Executor<B>::take(std::size_t floats) -> Buffer {
  if (std::optional<Buffer> b = detail::take_spare(spare_, floats)) return std::move(*b);
  Buffer b = b_.allocate(floats);
  detail::count_new_buffer(pools_, growth_, counting_growth_, floats);
  return b;
}

// The same for the host pool of OFFLOAD / RELOAD (pinned memory on CUDA).
template <class B>
auto Executor<B>::take_host(std::size_t floats) -> HostBuffer {
  if (std::optional<HostBuffer> b = detail::take_spare(spare_host_, floats)) return std::move(*b);
  HostBuffer b = [&] {
    if constexpr (std::same_as<HostBuffer, Buffer>) {
      if constexpr (requires(B & bk, std::size_t f) { bk.allocate_host(f); }) {
        return b_.allocate_host(floats);
      } else {
        return b_.allocate(floats);
      }
    } else {
      return b_.allocate_host(floats);
    }
  }();
  detail::count_new_buffer(pools_, growth_, counting_growth_, floats);
  return b;
}

template <class B>
auto Executor<B>::label(std::string text) -> std::string_view {
  return *label_store_.insert(std::move(text)).first;
}

// Every buffer of the current plan back to the pools, and the plan's tables emptied
// (set_schedule, before the next plan is built).
template <class B>
auto Executor<B>::release() -> void {
  for (std::size_t i = 0; i < buffers_.size(); ++i) spare_.emplace_back(plan_.buffer_floats[i], std::move(buffers_[i]));
  for (std::size_t i = 0; i < host_buffers_.size(); ++i) {
    spare_host_.emplace_back(plan_.host_floats[i], std::move(host_buffers_[i]));
  }
  for (StageGradients& g : grads_) {
    if (!g.owned) continue;
    const std::size_t size = stages_[static_cast<std::size_t>(g.stage)].weight_grad_size;
    spare_.emplace_back(size, std::move(g.total));
    for (Buffer& part : g.parts) spare_.emplace_back(size, std::move(part));
  }
  for (TiedGroup& g : tied_) {
    for (std::size_t i = 0; i < g.slices.size(); ++i) {
      if (g.held[i] != 0) spare_.emplace_back(g.count, std::move(g.slices[i]));
    }
    if (g.root == rank_) spare_.emplace_back(g.count, std::move(g.sum));
  }
  if (forward_loss_) {
    spare_.emplace_back(loss_scratch_span_.size(), std::move(loss_scratch_));
    loss_scratch_span_ = {};
    forward_loss_ = false;
  }
  buffers_.clear();
  spans_.clear();
  host_buffers_.clear();
  host_spans_.clear();
  grads_.clear();
  grads_of_stage_.clear();
  tied_.clear();
  calls_.clear();
  weight_steps_.clear();
  optimizer_calls_.clear();
  uses_.clear();
  labels_.clear();
  for (auto& lane : lane_steps_) lane.clear();
  forward_hash_.clear();
  check_recompute_ = false;
  gradient_floats_ = 0;
  result_.outputs.clear();
}

// The plan's buffers, events and tables: from the pools where they hold a buffer of the size.
template <class B>
auto Executor<B>::build() -> void {
  buffers_.reserve(plan_.buffer_floats.size());  // uses_ points into it
  for (std::size_t floats : plan_.buffer_floats) buffers_.push_back(take(floats));
  for (const Buffer& buf : buffers_) spans_.push_back(b_.span(buf));
  if (plan_.has_copies) {
    if (!copy_stream_created_) {
      copy_ = b_.create_stream();
      copy_stream_created_ = true;
      if constexpr (requires(B & b, const typename B::stream& st) {
                      { b.native_handle(st) } -> std::convertible_to<const void*>;
                    }) {
        copy_identity_ = b_.native_handle(copy_);
      } else {
        copy_identity_ = &copy_;
      }
    }
    host_buffers_.reserve(plan_.host_floats.size());
    for (std::size_t floats : plan_.host_floats) host_buffers_.push_back(take_host(floats));
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
  // Events per step: as many as the longest plan so far needed.
  const std::size_t n = plan_.steps.size();
  while (end_events_.size() < n) {
    end_events_.push_back(b_.create_event());
    if (options_.record_timeline) start_events_.push_back(b_.create_event());
    const std::size_t made = options_.record_timeline ? 2 : 1;
    pools_.events += made;
    if (counting_growth_) growth_.events += made;
  }
  const auto m = static_cast<std::size_t>(schedule_.microbatches);
  grads_of_stage_.assign(static_cast<std::size_t>(schedule_.stages()), -1);
  weight_steps_.resize(n);
  grads_.reserve(plan_.stages.size());  // the tied copies point into it
  for (std::int32_t s : plan_.stages) {
    const std::size_t size = stages_[static_cast<std::size_t>(s)].weight_grad_size;
    grads_of_stage_[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(grads_.size());
    StageGradients g;
    g.stage = s;
    if (size > 0 && has_backward_) {
      g.owned = true;
      g.total = take(size);
      g.total_span = b_.span(g.total);
      const std::int32_t slots = assign_weight_slots(s);
      for (std::int32_t k = 0; k < slots; ++k) g.parts.push_back(take(size));
      for (const Buffer& p : g.parts) g.part_spans.push_back(b_.span(p));
      gradient_floats_ += size * (static_cast<std::size_t>(slots) + 1);
    }
    grads_.push_back(std::move(g));
  }
  if (has_backward_) allocate_tied();
  if (!has_backward_ && holds(last_stage()) &&
      (stages_[static_cast<std::size_t>(last_stage())].loss || stages_[static_cast<std::size_t>(last_stage())].device_loss)) {
    forward_loss_ = true;
    const std::size_t floats = output_floats(stages_[static_cast<std::size_t>(last_stage())]);
    loss_scratch_ = take(floats);
    loss_scratch_span_ = b_.span(loss_scratch_).first(floats);
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
  for (const Action& a : prog) labels_.push_back(label(to_string(a)));
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
  if (reduce_stream_created_) plan_reducer();
}

// Data parallelism: each stage's step of its last weight-gradient action, where its total is
// handed to the reducer (set_gradient_reducer; again for every new plan).
template <class B>
auto Executor<B>::plan_reducer() -> void {
  while (reduced_.size() < grads_.size()) {
    reduced_.push_back(b_.create_event());
    ++pools_.events;
    if (counting_growth_) ++growth_.events;
  }
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
