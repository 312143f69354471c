// Part of <ppsched/runtime/executor.hpp> (include that): the set-up checks: the schedule, the stage
// functions, tied weights and boundaries against each other, and a batch against the stages.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/runtime/executor/core.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Keeps what this rank needs of the lowered schedule (a copy of every rank's program per
// executor made a World's memory grow as p^2 m), checks it, and plans and allocates.
template <class B>
auto Executor<B>::init(const Schedule& lowered, bool proven) -> void {
  keep_view(lowered);
  check_setup();
  check_graphs();
  if (options_.validate && !proven) (void)validate_or_throw(lowered);  // lower()'s output is proven
  plan_ = plan_rank(schedule_, rank_, shapes());
  allocate();
  allocate_graphs();
}

template <class B>
auto Executor<B>::keep_view(const Schedule& lowered) -> void {
  schedule_.name = lowered.name;
  schedule_.ranks = lowered.ranks;
  schedule_.microbatches = lowered.microbatches;
  schedule_.placement = lowered.placement;
  schedule_.split_backward = lowered.split_backward;
  schedule_.programs.assign(lowered.programs.size(), {});
  if (rank_ >= 0 && static_cast<std::size_t>(rank_) < lowered.programs.size()) {
    schedule_.programs[static_cast<std::size_t>(rank_)] = lowered.programs[static_cast<std::size_t>(rank_)];
  }
}

template <class B>
auto Executor<B>::shapes() const -> std::vector<StageShape> {
  std::vector<StageShape> out;
  for (const StageFunctions& f : stages_) out.push_back({input_floats(f), output_floats(f), f.offload_size});
  return out;
}

// set_schedule: the new schedule is checked and planned before anything of the old one is
// given up, so a refused schedule leaves the executor as it was; then every buffer goes back
// to the pools and the new plan takes what it needs from them.
template <class B>
auto Executor<B>::replan(const Schedule& lowered, bool proven) -> PoolGrowth {
  const std::lock_guard<std::mutex> between_steps(step_mutex_);
  Schedule previous = std::move(schedule_);
  const bool had_backward = has_backward_;
  RankPlan plan;
  try {
    keep_view(lowered);
    has_backward_ = false;
    check_setup();
    check_graphs();
    if (options_.validate && !proven) (void)validate_or_throw(lowered);
    plan = plan_rank(schedule_, rank_, shapes());
  } catch (...) {
    schedule_ = std::move(previous);
    has_backward_ = had_backward;
    throw;
  }
  release();
  plan_ = std::move(plan);
  growth_ = {};
  counting_growth_ = true;
  build();
  allocate_graphs();  // the new plan's device losses; a graph of the old plan goes
  if (growth_.grew()) ++pools_.growths;
  return growth_;
}

template <class B>
auto Executor<B>::check_watchdog(std::chrono::milliseconds watchdog) const -> void {
  if (watchdog.count() <= 0) {
    detail::fail({detail::concat("executor for rank ", rank_, " of schedule '", schedule_.name, "'"),
          detail::concat("the watchdog is ", watchdog.count(), " ms"), "ExecutorOptions::watchdog",
          "Give a positive timeout (default 10 s), or ppsched::no_timeout (milliseconds::max()) for none"});
  }
}

template <class B>
auto Executor<B>::check_setup() -> void {
  const std::string subject = detail::concat("executor for rank ", rank_, " of schedule '", schedule_.name, "'");
  if (rank_ < 0 || rank_ >= schedule_.ranks || b_.ranks() != schedule_.ranks) {
    detail::fail({subject,
          detail::concat("the backend is rank ", rank_, " of ", b_.ranks(), " but the schedule has ", schedule_.ranks,
                         " ranks"),
          "", "Run the schedule on a communicator with as many ranks as the schedule"});
  }
  check_watchdog(options_.watchdog);
  if (stages_.size() != static_cast<std::size_t>(schedule_.stages())) {
    detail::fail({subject,
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
    detail::fail({subject,
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
    detail::fail({subject,
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
    if (!f.forward) detail::fail({subject, "a stage has no forward", where, "Set StageFunctions::forward"});
    if (!has_backward_) continue;
    const bool split = static_cast<bool>(f.backward_input) && static_cast<bool>(f.backward_weight);
    if (schedule_.split_backward && !split) {
      detail::fail({subject,
            detail::concat("schedule '", schedule_.name, "' splits backward into BI and BW, but the stage gives ",
                           f.backward ? "only a full backward" : "no backward"),
            where, "Set StageFunctions::backward_input and backward_weight"});
    }
    if (!f.backward && !split) {
      detail::fail({subject, "a stage has no backward", where,
            "Set StageFunctions::backward, or backward_input and backward_weight"});
    }
    if (s == last_stage() && !f.loss && !f.device_loss) {
      detail::fail({subject, "the last stage has no loss", where,
                    "Set StageFunctions::loss (or device_loss) on the last stage"});
    }
  }
}

template <class B>
auto Executor<B>::check_tied(const std::string& subject) const -> void {
  for (std::size_t g = 0; g < options_.tied_weights.size(); ++g) {
    const TiedWeights& t = options_.tied_weights[g];
    const std::string where = detail::concat("ExecutorOptions::tied_weights[", g, "]");
    if (t.stages.size() < 2 || t.offsets.size() != t.stages.size() || t.count == 0) {
      detail::fail({subject,
            detail::concat("a tied group has ", t.stages.size(), " stages, ", t.offsets.size(), " offsets and count ",
                           t.count),
            where, "Give at least two stages, one offset per stage and a nonzero count"});
    }
    for (std::size_t i = 0; i < t.stages.size(); ++i) {
      const std::int32_t s = t.stages[i];
      if (s < 0 || s >= schedule_.stages()) {
        detail::fail({subject, detail::concat("a tied group names stage ", s, ", which does not exist"), where,
              detail::concat("Name stages in 0..", schedule_.stages() - 1)});
      }
      if (std::count(t.stages.begin(), t.stages.end(), s) > 1) {
        detail::fail({subject, detail::concat("a tied group names stage ", s, " twice"), where, "Name each stage once"});
      }
      const std::size_t size = stages_[static_cast<std::size_t>(s)].weight_grad_size;
      if (t.offsets[i] > size || t.count > size - t.offsets[i]) {
        detail::fail({subject,
              detail::concat("the tied gradient of stage ", s, " (", t.count, " floats at ", t.offsets[i],
                             ") does not fit its weight_grad_size ", size),
              where, "Give each stage's offset of the shared parameter's gradient in its flattened weight gradient"});
      }
    }
  }
}

// Typed boundaries: each list valid, and each stage's outputs the next stage's inputs.
template <class B>
auto Executor<B>::check_boundaries(const std::string& subject) const -> void {
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    const StageFunctions& f = stages_[s];
    for (const auto* list : {&f.input_tensors, &f.output_tensors}) {
      const bool in = list == &f.input_tensors;
      detail::check_tensor_specs(*list, detail::concat(subject, ", stage ", s, in ? " input_tensors" : " output_tensors"));
      const std::size_t declared = in ? f.input_size : f.output_size;
      if (!list->empty() && declared != 0 && declared != payload_floats(*list)) {
        detail::fail({subject,
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
      detail::fail({subject,
            detail::concat("stage ", s, out.empty() ? " gives floats" : " gives typed tensors", " but stage ", s + 1,
                           next.empty() ? " takes floats" : " takes typed tensors"),
            where, "Declare the boundary the same way on both sides (output_tensors and the next input_tensors)"});
    }
    if (out.size() != next.size()) {
      detail::fail({subject,
            detail::concat("stage ", s, " gives ", out.size(), " tensors but stage ", s + 1, " takes ", next.size()),
            where, "Give both sides of a boundary the same tensor list"});
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i] == next[i]) continue;
      detail::fail({subject,
            detail::concat("tensor ", i, ": stage ", s, " gives ", to_string(out[i].dtype), " x ", out[i].max_count,
                           " but stage ", s + 1, " takes ", to_string(next[i].dtype), " x ", next[i].max_count),
            where, "Give both sides of a boundary the same dtype and max_count for each tensor"});
    }
  }
}

template <class B>
auto Executor<B>::check_batch(const Batch& batch) const -> void {
  const auto m = static_cast<std::size_t>(schedule_.microbatches);
  for (std::int32_t s : plan_.stages) check_side_inputs(stages_[static_cast<std::size_t>(s)], s, batch, m);
  detail::check_sizes(stages_, batch, m);
  if (holds(0)) {
    const std::size_t want = m * input_floats(stages_[0]);
    if (batch.inputs.size() != want) {
      detail::fail({"batch",
            detail::concat("has ", batch.inputs.size(), " input floats; ", m, " micro-batches of ",
                           input_floats(stages_[0]), " need ", want),
            "Batch::inputs", "Give exactly microbatches x stage 0's input_size floats"});
    }
  }
  // A forward-only step takes targets when it is to compute losses, and none otherwise.
  if ((has_backward_ || !batch.targets.empty()) && holds(last_stage())) {
    const std::size_t want = m * stages_[static_cast<std::size_t>(last_stage())].target_size;
    if (batch.targets.size() != want) {
      detail::fail({"batch",
            detail::concat("has ", batch.targets.size(), " target floats; ", m, " micro-batches of ",
                           stages_[static_cast<std::size_t>(last_stage())].target_size, " need ", want),
            "Batch::targets", "Give exactly microbatches x the last stage's target_size floats"});
    }
  }
}

}  // namespace ppsched
