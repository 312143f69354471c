// Synthetic stages for measuring a schedule's real bubbles against the simulator: each
// action takes the time the cost model gives it, as a timed wait on the thread that runs it
// (the stream's worker on the CPU backend). The wait models device time without burning a
// core, so p = 8 ranks behave on a 2-core machine as they would on 8 devices. The stages
// move `floats` floats per micro-batch and compute nothing; with a zero-cost model they
// measure the executor's own overhead per action.
#pragma once

#include "ppsched/config.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/runtime/detail/synthetic.hpp"

namespace ppsched::inline PPSCHED_MODE {

// One StageFunctions per stage whose F, B, BI and BW wait for the model's time of that
// (stage, micro-batch), `per_unit` being one unit of the model's time (e.g. 1 ms), less the
// model's fixed cost per action (CostModel::fixed_costs.action), which the runtime itself pays.
[[nodiscard]] inline std::vector<StageFunctions> synthetic_stages(const CostModel& cost, std::int32_t stages,
                                                                  std::int32_t microbatches,
                                                                  std::chrono::nanoseconds per_unit,
                                                                  std::size_t floats = 1) {
  check_cost_model(cost, stages, microbatches);
  if (per_unit.count() <= 0) {
    detail::fail({"synthetic_stages", detail::concat("per_unit is ", per_unit.count(), " ns"), "",
          "Give the duration of one unit of the cost model, e.g. 1 ms"});
  }
  auto model = std::make_shared<const CostModel>(cost);
  std::vector<StageFunctions> stages_out;
  for (std::int32_t s = 0; s < stages; ++s) {
    // The stage's own time: the fixed cost per action is what the runtime adds around the
    // call, so a stage that waited for it too would pay it twice.
    auto time = [model, s, microbatches](Op op, std::int32_t mb) {
      return compute_time(*model, Action{op, s, mb, 0}, microbatches) - model->fixed_costs.action;
    };
    StageFunctions f;
    f.input_size = floats;
    f.output_size = floats;
    f.target_size = s + 1 == stages ? floats : 0;
    f.forward = [time, per_unit](std::int32_t mb, std::span<const float> in, std::span<float> out) {
      detail::busy_for(time(Op::F, mb), per_unit);
      for (std::size_t i = 0; i < out.size() && i < in.size(); ++i) out[i] = in[i];
    };
    f.backward = [time, per_unit](std::int32_t mb, std::span<const float>, std::span<const float> grad_output,
                                  std::span<float> grad_input, std::span<float>) {
      detail::busy_for(time(Op::B, mb), per_unit);
      for (std::size_t i = 0; i < grad_input.size() && i < grad_output.size(); ++i) grad_input[i] = grad_output[i];
    };
    f.backward_input = [time, per_unit](std::int32_t mb, std::span<const float>, std::span<const float> grad_output,
                                        std::span<float> grad_input) {
      detail::busy_for(time(Op::BI, mb), per_unit);
      for (std::size_t i = 0; i < grad_input.size() && i < grad_output.size(); ++i) grad_input[i] = grad_output[i];
    };
    f.backward_weight = [time, per_unit](std::int32_t mb, std::span<const float>, std::span<const float>,
                                         std::span<float>) { detail::busy_for(time(Op::BW, mb), per_unit); };
    if (s + 1 == stages) {
      f.loss = [](std::int32_t, std::span<const float> output, std::span<const float> target,
                  std::span<float> grad_output) {
        float loss = 0.0f;
        for (std::size_t i = 0; i < output.size(); ++i) {
          grad_output[i] = output[i] - target[i];
          loss += grad_output[i] * grad_output[i];
        }
        return 0.5f * loss;
      };
    }
    stages_out.push_back(std::move(f));
  }
  return stages_out;
}

}  // namespace ppsched
