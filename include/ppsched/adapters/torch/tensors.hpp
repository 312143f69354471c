// The libtorch adapter's boundary forms: a stage's input and output as fixed float32 shapes or
// as typed tensors (TorchTensorSpec) whose payload carries a varying dimension, the stage's
// options, and the views between the executor's spans and torch tensors. Part of
// <ppsched/adapters/torch.hpp>, which says what the adapter does.
#pragma once

#include "ppsched/config.hpp"

#include <torch/autograd.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/tensor.hpp"
#include "ppsched/runtime/payload.hpp"
#include "ppsched/runtime/stage.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace libtorch {

// The typed form of one tensor at a stage boundary (or of the last stage's target): its
// dtype, its largest shape for one micro-batch, and which dimension, if any, varies from one
// micro-batch to the next (a sequence length). The payload carries the actual element count;
// the varying dimension's size is that count over the product of the other dimensions.
struct TorchTensorSpec {
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<std::int64_t> max_shape;  // e.g. {max_tokens, hidden}
  std::int64_t variable_dim = -1;       // -1: every micro-batch has max_shape
};

// The ppsched DType that carries a torch dtype across a boundary.
[[nodiscard]] inline DType dtype_of_scalar_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return DType::f32;
    case torch::kFloat64:
      return DType::f64;
    case torch::kBFloat16:
      return DType::bf16;
    case torch::kHalf:
      return DType::f16;
    case torch::kInt32:
      return DType::i32;
    case torch::kInt64:
      return DType::i64;
    case torch::kUInt8:
      return DType::bytes;
    default:
      break;
  }
  detail::fail({"torch stage", detail::concat("the dtype ", c10::toString(t), " has no ppsched DType"), "",
        "Use float32, float64, bfloat16, float16, int32, int64 or uint8 at a stage boundary"});
}

struct TorchStageOptions {
  // The float form of the boundaries: the shape of one micro-batch's float32 tensor entering
  // the stage (stage 0: of the batch's inputs) and leaving it, e.g. {rows, features}. The
  // stage's input_size / output_size are their products.
  std::vector<std::int64_t> input_shape;
  std::vector<std::int64_t> output_shape;
  // The typed form, instead of the shape of the same side: one tensor (a Sequential's
  // forward takes one and returns one) of any dtype, with a variable dimension if wanted. The
  // stage then declares StageFunctions::input_tensors / output_tensors, and its neighbours
  // must declare the same boundary. Stage 0's typed inputs come from the batch as payloads
  // (torch_payloads). A non-float input (token ids) gets no gradient: its gradient count is 0.
  std::vector<TorchTensorSpec> input_tensors;
  std::vector<TorchTensorSpec> output_tensors;
  // Last stage: the loss of an output against its target (a scalar float tensor; the
  // pipeline sums nothing, so scale it as the unpipelined training would, e.g. by
  // 1 / micro-batches), and the target: float32 of target_shape from Batch::targets, or,
  // with target_side_input set, Batch::side_inputs[*target_side_input] read as
  // target_tensor (int64 labels, say: the batch's targets are floats only). That side input
  // holds target_tensor's maximum count per micro-batch; a target whose variable_dim is set
  // takes, there, the output's actual size in the output's variable dimension (one label per
  // token of this micro-batch's sequence), the rest of its slice unread.
  std::vector<std::int64_t> target_shape;
  std::optional<std::size_t> target_side_input;
  TorchTensorSpec target_tensor;
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  // Called after the flush with param.grad holding the step's summed gradient (tied groups
  // summed across stages too); nullptr: the gradient is only written to param.grad, for the
  // caller to apply after run_step.
  torch::optim::Optimizer* optimizer = nullptr;
};

}  // namespace libtorch
namespace detail::torch_adapter {

[[nodiscard]] inline std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

[[nodiscard]] inline std::string shape_text(c10::IntArrayRef shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += detail::concat(i == 0 ? "" : ", ", shape[i]);
  return out + "]";
}

// A tensor over a span of the executor's floats, without a copy. from_blob takes a mutable
// pointer; the adapter never writes through a view of a const span (autograd does not write
// into a leaf's data).
[[nodiscard]] inline torch::Tensor tensor_view(std::span<const float> floats, c10::IntArrayRef shape) {
  return torch::from_blob(const_cast<float*>(floats.data()), shape, torch::TensorOptions().dtype(torch::kFloat32));
}

// Copies a tensor torch computed into one of the executor's spans, after checking that it is
// the size the stage declared.
inline void copy_into(std::span<float> out, const torch::Tensor& value, const char* what, const char* fix) {
  if (!value.defined() || value.scalar_type() != torch::kFloat32 ||
      static_cast<std::size_t>(value.numel()) != out.size()) {
    detail::fail({"torch stage",
          value.defined()
              ? detail::concat(what, " has ", value.numel(), " elements of ", c10::toString(value.scalar_type()),
                               " (shape ", shape_text(value.sizes()), "); the stage declares ", out.size(), " float32")
              : detail::concat(what, " is undefined"),
          "", fix});
  }
  const torch::NoGradGuard no_grad;
  tensor_view(out, value.sizes()).copy_(value.detach());
}

// One side of a stage (its input or its output) in either form, as the calls need it.
struct Side {
  libtorch::TorchTensorSpec spec;                // the float form: float32 of its shape, nothing varies
  std::vector<TensorSpec> payload;     // the typed form's one tensor; empty for the float form
  std::string name;                    // the option that declares it, for messages

  [[nodiscard]] bool typed() const noexcept { return !payload.empty(); }
};

[[nodiscard]] inline std::size_t max_count(const libtorch::TorchTensorSpec& spec) {
  return static_cast<std::size_t>(element_count(spec.max_shape));
}

// The shape of a tensor of `count` elements: the maximum shape, its variable dimension
// (if any) sized to fit.
[[nodiscard]] inline std::vector<std::int64_t> shape_of(const libtorch::TorchTensorSpec& spec, std::size_t count,
                                                        const std::string& name, const char* what) {
  std::vector<std::int64_t> shape = spec.max_shape;
  if (spec.variable_dim < 0) {
    if (count != max_count(spec)) {
      detail::fail({"torch stage",
            detail::concat(what, " holds ", count, " elements, but ", shape_text(spec.max_shape), " has ",
                           max_count(spec), " and no dimension varies"),
            name, detail::concat("Set ", name, ".variable_dim to the dimension that varies, or give full tensors")});
    }
    return shape;
  }
  const auto d = static_cast<std::size_t>(spec.variable_dim);
  shape[d] = 1;
  const auto others = static_cast<std::size_t>(element_count(shape));
  if (count % others != 0) {
    detail::fail({"torch stage",
          detail::concat(what, " holds ", count, " elements, not a multiple of ", others,
                         " (the maximum shape ", shape_text(spec.max_shape), " without its variable dimension ", d,
                         ")"),
          name, "Give whole rows: the other dimensions are fixed, only the variable one may be shorter"});
  }
  shape[d] = static_cast<std::int64_t>(count / others);
  return shape;
}

// Throws unless `t` fits the typed spec: its dtype, its number of dimensions, the fixed
// dimensions exactly and the variable one up to its maximum.
inline void check_fits(const libtorch::TorchTensorSpec& spec, const torch::Tensor& t, const std::string& name,
                       const char* what, const char* fix) {
  if (!t.defined()) detail::fail({"torch stage", detail::concat(what, " is undefined"), name, fix});
  if (t.scalar_type() != spec.dtype) {
    detail::fail({"torch stage",
          detail::concat(what, " is ", c10::toString(t.scalar_type()), " (shape ", shape_text(t.sizes()),
                         "); the stage declares ", c10::toString(spec.dtype)),
          name, fix});
  }
  bool fits = static_cast<std::size_t>(t.dim()) == spec.max_shape.size();
  for (std::size_t d = 0; fits && d < spec.max_shape.size(); ++d) {
    const bool variable = static_cast<std::int64_t>(d) == spec.variable_dim;
    fits = variable ? t.size(static_cast<std::int64_t>(d)) <= spec.max_shape[d]
                    : t.size(static_cast<std::int64_t>(d)) == spec.max_shape[d];
  }
  if (!fits) {
    detail::fail({"torch stage",
          detail::concat(what, " has shape ", shape_text(t.sizes()), "; the stage declares ",
                         shape_text(spec.max_shape),
                         spec.variable_dim < 0 ? std::string(", every dimension fixed")
                                               : detail::concat(" with dimension ", spec.variable_dim,
                                                                " at most that size, the others exactly")),
          name, fix});
  }
}

[[nodiscard]] inline std::byte* region(std::span<const float> raw, const Side& side) {
  return reinterpret_cast<std::byte*>(const_cast<float*>(raw.data())) + payload_offset(side.payload, 0);
}

// A view of one side's tensor in `raw` (a forward input, a loss's output), shaped by the
// count its payload carries. Written through only where the span is the caller's to write.
[[nodiscard]] inline torch::Tensor view(const Side& side, std::span<const float> raw, const char* what) {
  if (!side.typed()) return tensor_view(raw, side.spec.max_shape);
  const std::size_t count = ConstPayload(raw, side.payload).count(0);
  return torch::from_blob(region(raw, side), shape_of(side.spec, count, side.name, what),
                          torch::TensorOptions().dtype(side.spec.dtype));
}

// A view of a gradient in `raw` that belongs to a tensor of shape `sizes` (a gradient has the
// layout of its tensor; the forward checked that the tensor has the side's dtype): shaped so,
// after checking that the payload carries as many elements.
[[nodiscard]] inline torch::Tensor gradient_view(const Side& side, std::span<const float> raw, c10::IntArrayRef sizes,
                                                 const char* what) {
  if (!side.typed()) return tensor_view(raw, sizes);
  const std::size_t count = ConstPayload(raw, side.payload).count(0);
  const auto numel = static_cast<std::size_t>(c10::multiply_integers(sizes));
  if (count != numel) {
    detail::fail({"torch stage",
          detail::concat(what, " holds ", count, " elements, but the tensor it belongs to (shape ", shape_text(sizes),
                         ") has ", numel),
          side.name, "Give each gradient the count of its tensor (the neighbouring stage or the loss writes it)"});
  }
  return torch::from_blob(region(raw, side), sizes, torch::TensorOptions().dtype(side.spec.dtype));
}

// Writes `value` as one side's tensor into `raw` (a forward output, a gradient), setting its
// count in the typed form.
inline void write(const Side& side, std::span<float> raw, const torch::Tensor& value, const char* what,
                  const char* fix) {
  if (!side.typed()) {
    copy_into(raw, value, what, fix);
    return;
  }
  check_fits(side.spec, value, side.name, what, fix);
  Payload(raw, side.payload).set_count(0, static_cast<std::size_t>(value.numel()));
  const torch::NoGradGuard no_grad;
  torch::from_blob(region(raw, side), value.sizes(), torch::TensorOptions().dtype(side.spec.dtype))
      .copy_(value.detach());
}

}  // namespace detail::torch_adapter

}  // namespace ppsched
