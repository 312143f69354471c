// Weights tied across stages (the embedding and the output projection): tie_parameters turns
// each stage's copy into the executor's TiedWeights. Part of <ppsched/adapters/torch.hpp>.
#pragma once

#include "ppsched/config.hpp"

#include <torch/autograd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ppsched/adapters/torch/stage.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace libtorch {

// One stage's copy of a weight tied across stages: the stage's index in the schedule, its
// TorchStage, and the copy (a parameter of that stage's module).
struct TorchParameterCopy {
  std::int32_t stage = -1;
  const TorchStage* torch_stage = nullptr;
  torch::Tensor parameter;
};

// The ExecutorOptions::tied_weights group of one weight that several stages keep a copy of
// (the token embedding of stage 0 and the output projection of the last): after the flush
// ppsched sums the copies' gradients, and each stage's optimizer sees the sum in param.grad.
[[nodiscard]] inline TiedWeights tie_parameters(const std::vector<TorchParameterCopy>& copies) {
  TiedWeights t;
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const TorchParameterCopy& c = copies[i];
    const std::string where = detail::concat("tie_parameters, copy ", i);
    if (c.torch_stage == nullptr) {
      detail::fail({"torch stage", "a copy without its TorchStage", where, "Give each copy the TorchStage that owns it"});
    }
    if (i > 0 && (!c.parameter.defined() || !copies[0].parameter.defined() ||
                  c.parameter.sizes() != copies[0].parameter.sizes())) {
      detail::fail({"torch stage",
            detail::concat("copy ", i, " has shape ",
                           c.parameter.defined() ? detail::torch_adapter::shape_text(c.parameter.sizes()) : "(none)",
                           ", copy 0 ",
                           copies[0].parameter.defined()
                               ? detail::torch_adapter::shape_text(copies[0].parameter.sizes())
                               : "(none)"),
            where, "Tie copies of one weight: the same shape on every stage"});
    }
    t.stages.push_back(c.stage);
    t.offsets.push_back(c.torch_stage->parameter_offset(c.parameter));
  }
  if (!copies.empty()) t.count = static_cast<std::size_t>(copies[0].parameter.numel());
  return t;
}

}  // namespace libtorch

}  // namespace ppsched
