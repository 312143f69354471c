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
// The float spans of StageFunctions meet torch tensors in detail::torch_adapter's
// tensor_view and copy_into only, so the typed-tensor stage interface can replace them in
// one place. Views need no copy; copies happen where torch owns the memory it computed
// into: the forward's output, the input and weight gradients, the loss gradient, and
// param.grad before the optimizer runs (see docs/torch.md).
#pragma once

#include <torch/autograd.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/runtime/stage.hpp"

namespace ppsched {

struct TorchStageOptions {
  // Shape of one micro-batch's tensor entering the stage (stage 0: of the batch's inputs) and
  // leaving it, e.g. {rows, features}. The stage's input_size / output_size are their products.
  std::vector<std::int64_t> input_shape;
  std::vector<std::int64_t> output_shape;
  // Last stage only: one micro-batch's target shape, and the loss of an output against its
  // target (a scalar float tensor; the pipeline sums nothing, so scale it as the unpipelined
  // training would, e.g. by 1 / micro-batches).
  std::vector<std::int64_t> target_shape;
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  // Called after the flush with param.grad holding the step's summed gradient; nullptr: the
  // gradient is only written to param.grad, for the caller to apply after run_step.
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

}  // namespace detail::torch_adapter

class TorchStage {
 public:
  // `module`'s parameters (float32, on the CPU) are the stage's weights, in the order of
  // module->parameters(): the layout of its flattened weight gradient.
  TorchStage(torch::nn::Sequential module, TorchStageOptions options)
      : module_(std::move(module)), options_(std::move(options)) {
    if (module_->size() == 0) {
      fail({"torch stage", "the Sequential has no modules", "", "Give the stage at least one module"});
    }
    check_shape(options_.input_shape, "input_shape");
    check_shape(options_.output_shape, "output_shape");
    if (options_.loss) check_shape(options_.target_shape, "target_shape");
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
    f.input_size = static_cast<std::size_t>(detail::torch_adapter::element_count(options_.input_shape));
    f.output_size = static_cast<std::size_t>(detail::torch_adapter::element_count(options_.output_shape));
    f.target_size =
        options_.loss ? static_cast<std::size_t>(detail::torch_adapter::element_count(options_.target_shape)) : 0;
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
      f.loss = [this](std::int32_t, std::span<const float> out, std::span<const float> target,
                      std::span<float> grad_out) { return loss(out, target, grad_out); };
    }
    f.optimizer_step = [this](std::span<const float> weight_grad) { optimizer_step(weight_grad); };
    return f;
  }

  // The stage's trainable parameters, in the order of its flattened weight gradient.
  [[nodiscard]] const std::vector<torch::Tensor>& parameters() const noexcept { return parameters_; }

 private:
  // What one micro-batch's backward needs, from its forward until its last backward.
  struct Saved {
    torch::Tensor input;                   // a view of the executor's input buffer, requires grad
    torch::Tensor output;                  // the module's output (the graph's root)
    std::vector<torch::Tensor> hidden;     // [child]: its output, kept for children with parameters
    std::vector<torch::Tensor> gradients;  // [child]: the gradient at that output (split backward)
  };

  torch::nn::Sequential module_;
  TorchStageOptions options_;
  std::vector<torch::Tensor> parameters_;
  std::vector<std::size_t> offsets_;                        // of each parameter in the weight gradient
  std::vector<std::vector<std::size_t>> child_parameters_;  // [child]: indices into parameters_
  std::size_t weight_floats_ = 0;
  std::vector<Saved> saved_;  // [micro-batch]

  static void check_shape(const std::vector<std::int64_t>& shape, const char* name) {
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

  [[nodiscard]] std::size_t index_of(const torch::Tensor& p) const {
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
    s.input = detail::torch_adapter::tensor_view(in, options_.input_shape).requires_grad_(true);
    s.hidden.resize(module_->size());
    torch::Tensor x = s.input;
    std::size_t c = 0;
    for (auto& child : *module_) {
      x = child.forward(x);
      if (!child_parameters_[c].empty()) s.hidden[c] = x;
      ++c;
    }
    s.output = x;
    detail::torch_adapter::copy_into(out, x, "the module's output",
                                     "Set TorchStageOptions::output_shape to the module's output for one micro-batch");
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

  void backward(std::int32_t mb, std::span<const float> grad_out, std::span<float> grad_in,
                std::span<float> weight_grad) {
    const torch::AutoGradMode grad_mode(true);
    Saved& s = saved_for_backward(mb);
    std::vector<torch::Tensor> wanted;
    if (!grad_in.empty()) wanted.push_back(s.input);
    for (const torch::Tensor& p : parameters_) wanted.push_back(p);
    if (!wanted.empty()) {
      const auto grads =
          torch::autograd::grad({s.output}, wanted, {detail::torch_adapter::tensor_view(grad_out, s.output.sizes())},
                                /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
      const std::size_t first = grad_in.empty() ? 0 : 1;
      if (!grad_in.empty()) copy_input_gradient(grad_in, grads[0]);
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
    std::vector<torch::Tensor> wanted;
    std::vector<std::size_t> children;  // whose output gradient comes back, after the input's
    if (!grad_in.empty()) wanted.push_back(s.input);
    for (std::size_t c = 0; c < last; ++c) {
      if (child_parameters_[c].empty()) continue;
      wanted.push_back(s.hidden[c]);
      children.push_back(c);
    }
    s.gradients.assign(module_->size(), torch::Tensor());
    if (wanted.empty()) return;
    const torch::Tensor g = detail::torch_adapter::tensor_view(grad_out, s.output.sizes());
    const auto grads = torch::autograd::grad({s.output}, wanted, {g}, /*retain_graph=*/true, /*create_graph=*/false,
                                             /*allow_unused=*/true);
    const std::size_t first = grad_in.empty() ? 0 : 1;
    if (!grad_in.empty()) copy_input_gradient(grad_in, grads[0]);
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
      const torch::Tensor g =
          c == last ? detail::torch_adapter::tensor_view(grad_out, s.output.sizes()) : s.gradients[c];
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

  static void copy_input_gradient(std::span<float> grad_in, const torch::Tensor& g) {
    if (!g.defined()) {
      std::fill(grad_in.begin(), grad_in.end(), 0.0f);  // the output does not depend on the input
      return;
    }
    detail::torch_adapter::copy_into(grad_in, g, "the input gradient",
                                     "Set TorchStageOptions::input_shape to the module's input");
  }

  [[nodiscard]] float loss(std::span<const float> out, std::span<const float> target, std::span<float> grad_out) {
    const torch::AutoGradMode grad_mode(true);
    const torch::Tensor output = detail::torch_adapter::tensor_view(out, options_.output_shape).requires_grad_(true);
    const torch::Tensor value =
        options_.loss(output, detail::torch_adapter::tensor_view(target, options_.target_shape));
    if (!value.defined() || value.numel() != 1 || !value.requires_grad()) {
      fail({"torch stage",
            value.defined() ? detail::concat("the loss has ", value.numel(), " elements",
                                             value.requires_grad() ? "" : " and does not depend on the output")
                            : "the loss is undefined",
            "TorchStageOptions::loss",
            "Return one scalar computed from the output (e.g. torch::mse_loss(output, target))"});
    }
    const auto grads = torch::autograd::grad({value}, {output});
    detail::torch_adapter::copy_into(grad_out, grads[0], "the loss gradient", "Keep the loss in float32");
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

}  // namespace ppsched
