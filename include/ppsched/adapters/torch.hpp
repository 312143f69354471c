// The opt-in libtorch adapter: a torch::nn::Sequential (any module, wrapped in one) becomes
// the StageFunctions of one pipeline stage, with autograd doing the backward. Never included
// by <ppsched/ppsched.hpp>: include it on purpose and link libtorch (Debian: libtorch-dev).
//
// Per micro-batch in flight the stage keeps what autograd needs: the forward's input (a view
// of the executor's buffer, which stays valid until the micro-batch's last backward), the
// output of every child that owns parameters, and the autograd graph. A full backward runs
// autograd once and frees the graph. The split backward of zero-bubble schedules asks
// autograd, in backward_input, for the input gradient and for the gradient at the output of
// each child that owns parameters, keeping the graph; backward_weight then runs each such
// child's own part of the graph from that gradient to its parameters and frees it. The
// weight gradients are the same numbers the full backward computes (the same autograd nodes
// on the same values), so every schedule trains bit-identically.
//
// A boundary has one of two forms. The float form (input_shape / output_shape) is a fixed
// shape of float32, the stage's spans holding exactly its elements. The typed form
// (input_tensors / output_tensors, TorchTensorSpec) is one tensor of a declared dtype and
// maximum shape, one dimension of which may vary per micro-batch: the span is then a
// ppsched payload (runtime/payload.hpp), whose header carries the actual element count, so a
// sequence length travels with its data. Either way the spans meet torch tensors in
// detail::torch_adapter only. Views need no copy; copies happen where torch owns the memory
// it computed into: the forward's output, the input and weight gradients, the loss gradient,
// and param.grad before the optimizer runs (see docs/torch.md).
#pragma once

#include "ppsched/config.hpp"

#include <torch/autograd.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/tensor.hpp"
#include "ppsched/runtime/payload.hpp"
#include "ppsched/runtime/stage.hpp"

namespace ppsched::inline PPSCHED_MODE {

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
  fail({"torch stage", detail::concat("the dtype ", c10::toString(t), " has no ppsched DType"), "",
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
    fail({"torch stage",
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
  TorchTensorSpec spec;                // the float form: float32 of its shape, nothing varies
  std::vector<TensorSpec> payload;     // the typed form's one tensor; empty for the float form
  std::string name;                    // the option that declares it, for messages

  [[nodiscard]] bool typed() const noexcept { return !payload.empty(); }
};

[[nodiscard]] inline std::size_t max_count(const TorchTensorSpec& spec) {
  return static_cast<std::size_t>(element_count(spec.max_shape));
}

// The shape of a tensor of `count` elements: the maximum shape, its variable dimension
// (if any) sized to fit.
[[nodiscard]] inline std::vector<std::int64_t> shape_of(const TorchTensorSpec& spec, std::size_t count,
                                                        const std::string& name, const char* what) {
  std::vector<std::int64_t> shape = spec.max_shape;
  if (spec.variable_dim < 0) {
    if (count != max_count(spec)) {
      fail({"torch stage",
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
    fail({"torch stage",
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
inline void check_fits(const TorchTensorSpec& spec, const torch::Tensor& t, const std::string& name,
                       const char* what, const char* fix) {
  if (!t.defined()) fail({"torch stage", detail::concat(what, " is undefined"), name, fix});
  if (t.scalar_type() != spec.dtype) {
    fail({"torch stage",
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
    fail({"torch stage",
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

// A view of a gradient in `raw` that belongs to `value` (a gradient has the layout of its
// tensor): shaped as `value`, after checking that the payload carries as many elements.
[[nodiscard]] inline torch::Tensor gradient_view(const Side& side, std::span<const float> raw,
                                                 const torch::Tensor& value, const char* what) {
  if (!side.typed()) return tensor_view(raw, value.sizes());
  const std::size_t count = ConstPayload(raw, side.payload).count(0);
  if (count != static_cast<std::size_t>(value.numel())) {
    fail({"torch stage",
          detail::concat(what, " holds ", count, " elements, but the tensor it belongs to (shape ",
                         shape_text(value.sizes()), ") has ", value.numel()),
          side.name, "Give each gradient the count of its tensor (the neighbouring stage or the loss writes it)"});
  }
  return torch::from_blob(region(raw, side), value.sizes(), torch::TensorOptions().dtype(side.spec.dtype));
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

// Stage 0's typed batch (Batch::inputs): one payload of `spec` per micro-batch tensor, one
// after the other. Each tensor must fit the spec (dtype, fixed dimensions, the variable one
// up to its maximum).
[[nodiscard]] inline std::vector<float> torch_payloads(const TorchTensorSpec& spec,
                                                       const std::vector<torch::Tensor>& microbatches) {
  detail::torch_adapter::Side side{spec, {TensorSpec{dtype_of_scalar_type(spec.dtype),
                                                     detail::torch_adapter::max_count(spec)}},
                                   "torch_payloads"};
  const std::size_t per = payload_floats(side.payload);
  std::vector<float> out(per * microbatches.size(), 0.0f);
  for (std::size_t k = 0; k < microbatches.size(); ++k) {
    const std::string what = detail::concat("micro-batch ", k, "'s tensor");
    detail::torch_adapter::write(side, std::span<float>(out).subspan(k * per, per), microbatches[k], what.c_str(),
                                 "Give tensors of the spec's dtype, within its maximum shape");
  }
  return out;
}

class TorchStage {
 public:
  // `module`'s parameters (float32, on the CPU) are the stage's weights, in the order of
  // module->parameters(): the layout of its flattened weight gradient.
  TorchStage(torch::nn::Sequential module, TorchStageOptions options)
      : module_(std::move(module)), options_(std::move(options)) {
    if (module_->size() == 0) {
      fail({"torch stage", "the Sequential has no modules", "", "Give the stage at least one module"});
    }
    input_ = side(options_.input_shape, options_.input_tensors, "input");
    output_ = side(options_.output_shape, options_.output_tensors, "output");
    if (output_.typed() && !torch::isFloatingType(output_.spec.dtype)) {
      fail({"torch stage",
            detail::concat("the output is ", c10::toString(output_.spec.dtype), ", which carries no gradient"),
            output_.name, "Give the stage a floating-point output (integer ids go into stage 0 only)"});
    }
    if (options_.loss && options_.target_side_input) {
      check_spec(options_.target_tensor, "target_tensor");
      if (options_.target_tensor.variable_dim >= 0 && output_.spec.variable_dim < 0) {
        fail({"torch stage", "target_tensor has a variable dimension but the output has none to take its size from",
              "TorchStageOptions::target_tensor",
              "Declare the output typed with a variable_dim (output_tensors), or give the target a fixed shape"});
      }
    } else if (options_.loss) {
      check_shape(options_.target_shape, "target_shape");
    }
    for (const torch::Tensor& p : module_->parameters()) {
      if (!p.requires_grad() || owns(p)) continue;
      if (p.scalar_type() != torch::kFloat32 || !p.device().is_cpu()) {
        fail({"torch stage",
              detail::concat("a parameter of shape ", detail::torch_adapter::shape_text(p.sizes()), " is ",
                             c10::toString(p.scalar_type()), " on ", p.device().str(),
                             "; the stage's spans carry float32 on the CPU"),
              "", "Call module->to(torch::kFloat32) (and keep it on the CPU) before building the stage"});
      }
      offsets_.push_back(weight_floats_);
      weight_floats_ += static_cast<std::size_t>(p.numel());
      parameters_.push_back(p);
    }
    for (std::size_t c = 0; c < module_->size(); ++c) {
      std::vector<std::size_t> mine;
      for (const torch::Tensor& p : module_->ptr(c)->parameters()) {
        const std::size_t i = index_of(p);
        if (i < parameters_.size() && std::find(mine.begin(), mine.end(), i) == mine.end()) mine.push_back(i);
      }
      child_parameters_.push_back(std::move(mine));
    }
  }

  TorchStage(const TorchStage&) = delete;
  TorchStage& operator=(const TorchStage&) = delete;

  // The stage for ppsched; it calls back into this object, which must outlive the World.
  [[nodiscard]] StageFunctions functions() {
    StageFunctions f;
    if (input_.typed()) {
      f.input_tensors = input_.payload;
    } else {
      f.input_size = static_cast<std::size_t>(detail::torch_adapter::element_count(options_.input_shape));
    }
    if (output_.typed()) {
      f.output_tensors = output_.payload;
    } else {
      f.output_size = static_cast<std::size_t>(detail::torch_adapter::element_count(options_.output_shape));
    }
    if (options_.loss && options_.target_side_input) {
      f.side_inputs = {*options_.target_side_input};
      // The labels' dtype and count, checked with the batch before the step: a mismatch was
      // found only at the loss of micro-batch 0, after every forward (issue 24).
      f.side_input_specs = {{dtype_of_scalar_type(options_.target_tensor.dtype),
                             detail::torch_adapter::max_count(options_.target_tensor)}};
    } else if (options_.loss) {
      f.target_size = static_cast<std::size_t>(detail::torch_adapter::element_count(options_.target_shape));
    }
    f.weight_grad_size = weight_floats_;
    f.forward = [this](std::int32_t mb, std::span<const float> in, std::span<float> out) { forward(mb, in, out); };
    f.backward = [this](std::int32_t mb, std::span<const float>, std::span<const float> grad_out,
                        std::span<float> grad_in,
                        std::span<float> weight_grad) { backward(mb, grad_out, grad_in, weight_grad); };
    f.backward_input = [this](std::int32_t mb, std::span<const float>, std::span<const float> grad_out,
                              std::span<float> grad_in) { backward_input(mb, grad_out, grad_in); };
    f.backward_weight = [this](std::int32_t mb, std::span<const float>, std::span<const float> grad_out,
                               std::span<float> weight_grad) { backward_weight(mb, grad_out, weight_grad); };
    if (options_.loss) {
      f.loss = [this](const StageContext& context, std::span<const float> out, std::span<const float> target,
                      std::span<float> grad_out) { return loss(context, out, target, grad_out); };
    }
    f.optimizer_step = [this](std::span<const float> weight_grad) { optimizer_step(weight_grad); };
    return f;
  }

  // The stage's trainable parameters, in the order of its flattened weight gradient.
  [[nodiscard]] const std::vector<torch::Tensor>& parameters() const noexcept { return parameters_; }

  // Where `parameter`'s gradient starts in the stage's flattened weight gradient, in floats
  // (it takes parameter.numel() floats): what TiedWeights::offsets wants for a weight tied
  // across stages.
  [[nodiscard]] std::size_t parameter_offset(const torch::Tensor& parameter) const {
    const std::size_t i = index_of(parameter);
    if (i == parameters_.size()) {
      fail({"torch stage",
            parameter.defined()
                ? detail::concat("a tensor of shape ", detail::torch_adapter::shape_text(parameter.sizes()),
                                 " is not one of the stage's ", parameters_.size(), " trainable parameters")
                : std::string("the tensor is undefined"),
            "TorchStage::parameter_offset",
            "Pass a parameter of this stage's own module (TorchStage::parameters() lists them): each stage keeps "
            "its own copy of a tied weight"});
    }
    return offsets_[i];
  }

 private:
  // What one micro-batch's backward needs, from its forward until its last backward.
  struct Saved {
    torch::Tensor input;                   // a view of the executor's input buffer (requires grad if float)
    torch::Tensor output;                  // the module's output (the graph's root)
    std::vector<torch::Tensor> hidden;     // [child]: its output, kept for children with parameters
    std::vector<torch::Tensor> gradients;  // [child]: the gradient at that output (split backward)
  };

  torch::nn::Sequential module_;
  TorchStageOptions options_;
  detail::torch_adapter::Side input_;
  detail::torch_adapter::Side output_;
  std::vector<torch::Tensor> parameters_;
  std::vector<std::size_t> offsets_;                        // of each parameter in the weight gradient
  std::vector<std::vector<std::size_t>> child_parameters_;  // [child]: indices into parameters_
  std::size_t weight_floats_ = 0;
  std::vector<Saved> saved_;  // [micro-batch]

  static void check_shape(const std::vector<std::int64_t>& shape, const std::string& name) {
    for (std::int64_t d : shape) {
      if (d > 0) continue;
      fail({"torch stage",
            detail::concat(name, " ", detail::torch_adapter::shape_text(shape), " has a dimension of ", d),
            detail::concat("TorchStageOptions::", name),
            "Give every dimension of one micro-batch's tensor, each >= 1"});
    }
    if (shape.empty()) {
      fail({"torch stage", detail::concat(name, " is empty"), detail::concat("TorchStageOptions::", name),
            "Give the shape of one micro-batch's tensor, e.g. {rows, features}"});
    }
  }

  static void check_spec(const TorchTensorSpec& spec, const std::string& name) {
    (void)dtype_of_scalar_type(spec.dtype);
    check_shape(spec.max_shape, name + ".max_shape");
    if (spec.variable_dim < -1 || spec.variable_dim >= static_cast<std::int64_t>(spec.max_shape.size())) {
      fail({"torch stage",
            detail::concat(name, ".variable_dim is ", spec.variable_dim, " but max_shape ",
                           detail::torch_adapter::shape_text(spec.max_shape), " has ", spec.max_shape.size(),
                           " dimensions"),
            detail::concat("TorchStageOptions::", name), "Give a dimension index of max_shape, or -1 if none varies"});
    }
  }

  // One side from its two possible declarations, exactly one of which must be given.
  static detail::torch_adapter::Side side(const std::vector<std::int64_t>& shape,
                                          const std::vector<TorchTensorSpec>& tensors, const std::string& which) {
    const std::string shape_name = which + "_shape";
    const std::string tensors_name = which + "_tensors";
    if (tensors.empty()) {
      check_shape(shape, shape_name);
      return {TorchTensorSpec{torch::kFloat32, shape, -1}, {}, "TorchStageOptions::" + shape_name};
    }
    if (!shape.empty()) {
      fail({"torch stage", detail::concat("both ", shape_name, " and ", tensors_name, " are given"),
            detail::concat("TorchStageOptions::", tensors_name),
            detail::concat("Give one: ", shape_name, " for float32 of a fixed shape, ", tensors_name,
                           " for any dtype or a variable dimension")});
    }
    if (tensors.size() != 1) {
      fail({"torch stage",
            detail::concat(tensors_name, " lists ", tensors.size(),
                           " tensors; a Sequential's forward takes one tensor and returns one"),
            detail::concat("TorchStageOptions::", tensors_name),
            "Declare one tensor per boundary (several tensors across a boundary are not supported by the adapter; "
            "write the stage's StageFunctions by hand for them)"});
    }
    const std::string name = tensors_name + "[0]";
    check_spec(tensors[0], name);
    return {tensors[0],
            {TensorSpec{dtype_of_scalar_type(tensors[0].dtype), detail::torch_adapter::max_count(tensors[0])}},
            "TorchStageOptions::" + name};
  }

  [[nodiscard]] std::size_t index_of(const torch::Tensor& p) const {
    if (!p.defined()) return parameters_.size();
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      if (parameters_[i].unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) return i;
    return parameters_.size();
  }
  [[nodiscard]] bool owns(const torch::Tensor& p) const { return index_of(p) < parameters_.size(); }

  [[nodiscard]] Saved& saved(std::int32_t mb) {
    const auto i = static_cast<std::size_t>(mb);
    if (i >= saved_.size()) saved_.resize(i + 1);
    return saved_[i];
  }

  [[nodiscard]] Saved& saved_for_backward(std::int32_t mb) {
    Saved& s = saved(mb);
    if (!s.output.defined()) {
      fail({"torch stage", detail::concat("backward of micro-batch ", mb, " without its forward"), "",
            "Run the forward of a micro-batch before its backward (a hand-written schedule may have them swapped)"});
    }
    return s;
  }

  void forward(std::int32_t mb, std::span<const float> in, std::span<float> out) {
    // The rank threads do not inherit the caller's grad mode: the graph is wanted here.
    const torch::AutoGradMode grad_mode(true);
    Saved& s = saved(mb);
    s = Saved{};
    s.input = detail::torch_adapter::view(input_, in, "the stage's input");
    // Token ids and other integers take no gradient (autograd refuses them).
    if (torch::isFloatingType(s.input.scalar_type())) s.input.requires_grad_(true);
    s.hidden.resize(module_->size());
    torch::Tensor x = s.input;
    std::size_t c = 0;
    for (auto& child : *module_) {
      x = child.forward(x);
      if (!child_parameters_[c].empty()) s.hidden[c] = x;
      ++c;
    }
    s.output = x;
    detail::torch_adapter::write(output_, out, x, "the module's output",
                                 output_.typed()
                                     ? "Make TorchStageOptions::output_tensors[0] (dtype, max_shape, variable_dim) "
                                       "describe what the module returns for one micro-batch"
                                     : "Set TorchStageOptions::output_shape to the module's output for one micro-batch");
  }

  // Writes each parameter's gradient (undefined: unused, left zero) into its slice.
  void write_weight_gradient(std::span<float> weight_grad, const std::vector<std::size_t>& which,
                             const std::vector<torch::Tensor>& grads) const {
    for (std::size_t k = 0; k < which.size(); ++k) {
      if (!grads[k].defined()) continue;
      const std::size_t i = which[k];
      detail::torch_adapter::copy_into(
          weight_grad.subspan(offsets_[i], static_cast<std::size_t>(parameters_[i].numel())), grads[k],
          "a parameter's gradient", "Keep the module's parameters float32");
    }
  }

  [[nodiscard]] torch::Tensor output_gradient(const Saved& s, std::span<const float> grad_out) const {
    return detail::torch_adapter::gradient_view(output_, grad_out, s.output, "the output gradient");
  }

  void backward(std::int32_t mb, std::span<const float> grad_out, std::span<float> grad_in,
                std::span<float> weight_grad) {
    const torch::AutoGradMode grad_mode(true);
    Saved& s = saved_for_backward(mb);
    const bool input_wanted = !grad_in.empty() && s.input.requires_grad();
    std::vector<torch::Tensor> wanted;
    if (input_wanted) wanted.push_back(s.input);
    for (const torch::Tensor& p : parameters_) wanted.push_back(p);
    if (!grad_in.empty() && !input_wanted) write_input_gradient(grad_in, s, torch::Tensor());
    if (!wanted.empty()) {
      const auto grads = torch::autograd::grad({s.output}, wanted, {output_gradient(s, grad_out)},
                                               /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
      const std::size_t first = input_wanted ? 1 : 0;
      if (input_wanted) write_input_gradient(grad_in, s, grads[0]);
      std::vector<std::size_t> all(parameters_.size());
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
      write_weight_gradient(weight_grad, all, {grads.begin() + static_cast<std::ptrdiff_t>(first), grads.end()});
    }
    s = Saved{};
  }

  void backward_input(std::int32_t mb, std::span<const float> grad_out, std::span<float> grad_in) {
    const torch::AutoGradMode grad_mode(true);
    Saved& s = saved_for_backward(mb);
    const std::size_t last = module_->size() - 1;
    const bool input_wanted = !grad_in.empty() && s.input.requires_grad();
    std::vector<torch::Tensor> wanted;
    std::vector<std::size_t> children;  // whose output gradient comes back, after the input's
    if (input_wanted) wanted.push_back(s.input);
    for (std::size_t c = 0; c < last; ++c) {
      if (child_parameters_[c].empty()) continue;
      wanted.push_back(s.hidden[c]);
      children.push_back(c);
    }
    if (!grad_in.empty() && !input_wanted) write_input_gradient(grad_in, s, torch::Tensor());
    s.gradients.assign(module_->size(), torch::Tensor());
    if (wanted.empty()) return;
    const torch::Tensor g = output_gradient(s, grad_out);
    const auto grads = torch::autograd::grad({s.output}, wanted, {g}, /*retain_graph=*/true, /*create_graph=*/false,
                                             /*allow_unused=*/true);
    const std::size_t first = input_wanted ? 1 : 0;
    if (input_wanted) write_input_gradient(grad_in, s, grads[0]);
    for (std::size_t k = 0; k < children.size(); ++k) {
      torch::Tensor kept = grads[first + k];
      // Autograd may hand back grad_output's own memory (an identity-like child): keep a copy,
      // so that backward_weight does not depend on the buffer being unchanged meanwhile.
      if (kept.defined() && kept.is_alias_of(g)) kept = kept.clone();
      s.gradients[children[k]] = kept;
    }
  }

  void backward_weight(std::int32_t mb, std::span<const float> grad_out, std::span<float> weight_grad) {
    const torch::AutoGradMode grad_mode(true);
    Saved& s = saved_for_backward(mb);
    const std::size_t last = module_->size() - 1;
    for (std::size_t c = 0; c <= last; ++c) {
      const std::vector<std::size_t>& which = child_parameters_[c];
      if (which.empty()) continue;
      const torch::Tensor root = c == last ? s.output : s.hidden[c];
      const torch::Tensor g = c == last ? output_gradient(s, grad_out) : s.gradients[c];
      if (!g.defined()) continue;  // nothing downstream depends on this child's output
      std::vector<torch::Tensor> wanted;
      for (std::size_t i : which) wanted.push_back(parameters_[i]);
      // Only the child's own part of the graph runs (autograd prunes the rest); the whole
      // graph goes when the micro-batch's Saved does, below.
      const auto grads = torch::autograd::grad({root}, wanted, {g}, /*retain_graph=*/true, /*create_graph=*/false,
                                               /*allow_unused=*/true);
      accumulate_weight_gradient(weight_grad, which, grads);
    }
    s = Saved{};
  }

  // A parameter shared by two children gets a gradient from each; they add up.
  void accumulate_weight_gradient(std::span<float> weight_grad, const std::vector<std::size_t>& which,
                                  const std::vector<torch::Tensor>& grads) const {
    const torch::NoGradGuard no_grad;
    for (std::size_t k = 0; k < which.size(); ++k) {
      if (!grads[k].defined()) continue;
      const std::size_t i = which[k];
      const auto n = static_cast<std::size_t>(parameters_[i].numel());
      torch::Tensor slice =
          detail::torch_adapter::tensor_view(weight_grad.subspan(offsets_[i], n), parameters_[i].sizes());
      slice.add_(grads[k]);
    }
  }

  // The input gradient `g` (undefined: none) into grad_in, which has the input's layout.
  void write_input_gradient(std::span<float> grad_in, const Saved& s, const torch::Tensor& g) const {
    if (input_.typed() && !s.input.requires_grad()) {
      Payload(grad_in, input_.payload).set_count(0, 0);  // integer ids: no gradient (docs/runtime.md)
      return;
    }
    // Undefined: the output does not depend on the input, whose gradient is then zero.
    const torch::Tensor value = g.defined() ? g : torch::zeros_like(s.input);
    detail::torch_adapter::write(input_, grad_in, value, "the input gradient",
                                 input_.typed() ? "Keep the module's input gradient of the input's dtype and shape"
                                                : "Set TorchStageOptions::input_shape to the module's input");
  }

  // This micro-batch's target: a view of the batch's floats, or of its side input.
  [[nodiscard]] torch::Tensor target_of(const StageContext& context, std::span<const float> target,
                                        const torch::Tensor& output) const {
    if (!options_.target_side_input) return detail::torch_adapter::tensor_view(target, options_.target_shape);
    const std::size_t k = *options_.target_side_input;
    const TorchTensorSpec& spec = options_.target_tensor;
    if (k >= context.side_inputs.size() || context.microbatch < 0) {
      fail({"torch stage",
            detail::concat("the loss reads its target from side input ", k, ", but the call has ",
                           context.side_inputs.size(), context.microbatch < 0 ? " and no micro-batch" : ""),
            "TorchStageOptions::target_side_input",
            "Give the targets in Batch::side_inputs (the World checks the batch before the step), and call the loss "
            "with its StageContext"});
    }
    const SideInput& in = context.side_inputs[k];
    const DType dtype = dtype_of_scalar_type(spec.dtype);
    const std::size_t count = detail::torch_adapter::max_count(spec);
    if (in.dtype != dtype || in.count != count) {
      fail({"torch stage",
            detail::concat("side input ", k, " holds ", in.count, " ", to_string(in.dtype),
                           " per micro-batch; target_tensor declares ", count, " ", to_string(dtype), " (max_shape ",
                           detail::torch_adapter::shape_text(spec.max_shape), ")"),
            "TorchStageOptions::target_tensor",
            "Give the side input target_tensor's dtype and maximum count per micro-batch (SideInput::of)"});
    }
    // The micro-batch's slice holds its labels padded to max_shape: view it whole, then keep
    // the first `length` entries of the variable dimension. (Viewing the first prod(shape)
    // elements as the shortened shape was right for variable_dim 0 only, issue 24.)
    const std::size_t at = static_cast<std::size_t>(context.microbatch) * count * dtype_size(dtype);
    const torch::Tensor padded = torch::from_blob(const_cast<std::byte*>(in.data.data() + at), spec.max_shape,
                                                  torch::TensorOptions().dtype(spec.dtype));
    if (spec.variable_dim < 0) return padded;
    const std::int64_t length = output.size(output_.spec.variable_dim);
    const auto d = static_cast<std::size_t>(spec.variable_dim);
    if (length > spec.max_shape[d]) {
      fail({"torch stage",
            detail::concat("the output's variable dimension is ", length, " long, above target_tensor's maximum ",
                           spec.max_shape[d], " in dimension ", d),
            "TorchStageOptions::target_tensor", "Declare the target's maximum as large as the output's"});
    }
    return padded.narrow(spec.variable_dim, 0, length);
  }

  [[nodiscard]] float loss(const StageContext& context, std::span<const float> out, std::span<const float> target,
                           std::span<float> grad_out) {
    const torch::AutoGradMode grad_mode(true);
    const torch::Tensor output = detail::torch_adapter::view(output_, out, "the loss's output").requires_grad_(true);
    const torch::Tensor value = options_.loss(output, target_of(context, target, output));
    if (!value.defined() || value.numel() != 1 || !value.requires_grad()) {
      fail({"torch stage",
            value.defined() ? detail::concat("the loss has ", value.numel(), " elements",
                                             value.requires_grad() ? "" : " and does not depend on the output")
                            : "the loss is undefined",
            "TorchStageOptions::loss",
            "Return one scalar computed from the output (e.g. torch::mse_loss(output, target))"});
    }
    const auto grads = torch::autograd::grad({value}, {output});
    detail::torch_adapter::write(output_, grad_out, grads[0], "the loss gradient",
                                 "Keep the loss in the output's dtype");
    return value.item<float>();
  }

  void optimizer_step(std::span<const float> weight_grad) {
    const torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      torch::Tensor& grad = parameters_[i].mutable_grad();
      // Allocated once: later steps copy into it. A copy, because the optimizer may keep or
      // change param.grad, and the span is the executor's.
      if (!grad.defined()) grad = torch::empty_like(parameters_[i]);
      grad.copy_(detail::torch_adapter::tensor_view(
          weight_grad.subspan(offsets_[i], static_cast<std::size_t>(parameters_[i].numel())), parameters_[i].sizes()));
    }
    if (options_.optimizer != nullptr) options_.optimizer->step();
  }
};

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
      fail({"torch stage", "a copy without its TorchStage", where, "Give each copy the TorchStage that owns it"});
    }
    if (i > 0 && (!c.parameter.defined() || !copies[0].parameter.defined() ||
                  c.parameter.sizes() != copies[0].parameter.sizes())) {
      fail({"torch stage",
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

}  // namespace ppsched
