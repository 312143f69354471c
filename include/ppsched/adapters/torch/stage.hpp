// TorchStage: a torch::nn::Sequential as the StageFunctions of one pipeline stage. Part of
// <ppsched/adapters/torch.hpp>, which says what the adapter does.
#pragma once

#include "ppsched/config.hpp"

#include <torch/autograd.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/adapters/torch/graph_cut.hpp"
#include "ppsched/adapters/torch/tensors.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace libtorch {

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

// The floats of one micro-batch's payload of `spec` whose variable dimension has size
// `length` (a spec without one: its whole maximum shape): its entry in Batch::sizes, so that
// a transfer moves that micro-batch's tokens and not the declared maximum. Throws for a length
// below 0 or above the maximum shape's.
[[nodiscard]] inline std::size_t torch_payload_floats(const TorchTensorSpec& spec, std::int64_t length) {
  const std::vector<TensorSpec> payload{{dtype_of_scalar_type(spec.dtype), detail::torch_adapter::max_count(spec)}};
  if (spec.variable_dim < 0) return payload_floats(payload);
  const auto d = static_cast<std::size_t>(spec.variable_dim);
  if (length < 0 || d >= spec.max_shape.size() || length > spec.max_shape[d]) {
    detail::fail({"torch_payload_floats",
                  detail::concat("a length of ", length, " for dimension ", spec.variable_dim, " of ",
                                 detail::torch_adapter::shape_text(spec.max_shape)),
                  "", "Give a length from 0 to the variable dimension's maximum"});
  }
  std::vector<std::int64_t> shape = spec.max_shape;
  shape[d] = length;
  const std::size_t counts[] = {static_cast<std::size_t>(detail::torch_adapter::element_count(shape))};
  return payload_floats(payload, counts);
}

class TorchStage {
 public:
  // `module`'s parameters (float32, on the CPU) are the stage's weights, in the order of
  // module->parameters(): the layout of its flattened weight gradient.
  TorchStage(torch::nn::Sequential module, TorchStageOptions options)
      : module_(std::move(module)), options_(std::move(options)) {
    if (module_->size() == 0) {
      detail::fail({"torch stage", "the Sequential has no modules", "", "Give the stage at least one module"});
    }
    input_ = side(options_.input_shape, options_.input_tensors, "input");
    output_ = side(options_.output_shape, options_.output_tensors, "output");
    if (output_.typed() && !torch::isFloatingType(output_.spec.dtype)) {
      detail::fail({"torch stage",
            detail::concat("the output is ", c10::toString(output_.spec.dtype), ", which carries no gradient"),
            output_.name, "Give the stage a floating-point output (integer ids go into stage 0 only)"});
    }
    if (options_.loss && options_.target_side_input) {
      check_spec(options_.target_tensor, "target_tensor");
      if (options_.target_tensor.variable_dim >= 0 && output_.spec.variable_dim < 0) {
        detail::fail({"torch stage", "target_tensor has a variable dimension but the output has none to take its size from",
              "TorchStageOptions::target_tensor",
              "Declare the output typed with a variable_dim (output_tensors), or give the target a fixed shape"});
      }
    } else if (options_.loss) {
      check_shape(options_.target_shape, "target_shape");
    }
    for (const torch::Tensor& p : module_->parameters()) {
      if (!p.requires_grad() || owns(p)) continue;
      if (p.scalar_type() != torch::kFloat32 || !p.device().is_cpu()) {
        detail::fail({"torch stage",
              detail::concat("a parameter of shape ", detail::torch_adapter::shape_text(p.sizes()), " is ",
                             c10::toString(p.scalar_type()), " on ", p.device().str(),
                             "; the stage's spans carry float32 on the CPU"),
              "", "Call module->to(torch::kFloat32) (and keep it on the CPU) before building the stage"});
      }
      offsets_.push_back(weight_floats_);
      weight_floats_ += static_cast<std::size_t>(p.numel());
      parameters_.push_back(p);
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
    // Recomputation (an R action after a forward with keep_activation false): the forward
    // runs under no-grad and keeps no graph; the recompute builds it from the kept input.
    f.forward = [this](const StageContext& c, std::span<const float> in, std::span<float> out) {
      forward(c.microbatch, in, out, c.keep_activation);
    };
    f.recompute = [this](const StageContext& c, std::span<const float> in) { recompute(c.microbatch, in); };
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

  // The stage's entry of Batch::sizes for a micro-batch whose variable dimensions (the
  // typed tensors' variable_dim) have size `length`: its input's and output's payload floats
  // (torch_payload_floats), or the fixed sizes of a side without a variable dimension.
  [[nodiscard]] MicrobatchSize size(std::int64_t length) const {
    return {side_floats(input_, length), side_floats(output_, length)};
  }

  // Where `parameter`'s gradient starts in the stage's flattened weight gradient, in floats
  // (it takes parameter.numel() floats): what TiedWeights::offsets wants for a weight tied
  // across stages.
  [[nodiscard]] std::size_t parameter_offset(const torch::Tensor& parameter) const {
    const std::size_t i = index_of(parameter);
    if (i == parameters_.size()) {
      detail::fail({"torch stage",
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
  // What one micro-batch's backward needs, from its forward until its last backward. Not the
  // output tensor: where the last node did not save it (a Linear's), holding it would keep one
  // more tensor per micro-batch in flight than the graph needs, beside the executor's copy.
  struct Saved {
    torch::Tensor input;  // a view of the executor's input buffer (requires grad if float)
    // The output's gradient edge, where every backward enters the graph: its grad_fn, or the
    // input's gradient accumulator where the module returned its input unchanged. Holding it
    // holds the graph. Invalid where the output needs no gradient.
    torch::autograd::Edge root;
    std::vector<std::int64_t> output_sizes;  // the shape of the output's gradient
    bool graph = false;                      // F with its graph, or R, ran since the last backward
    // The split backward, between backward_input and backward_weight: the cut's roots, or,
    // where BI computed no input gradient or the cut is unusable, none and `whole` (BW runs
    // every weight gradient from the output).
    bool whole = false;
    std::vector<detail::torch_adapter::WeightRoot> roots;
    bool dropped = false;  // the forward ran without keeping its graph (keep_activation false)
  };

  torch::nn::Sequential module_;
  TorchStageOptions options_;
  detail::torch_adapter::Side input_;
  detail::torch_adapter::Side output_;
  std::vector<torch::Tensor> parameters_;
  std::vector<std::size_t> offsets_;                        // of each parameter in the weight gradient
  std::size_t weight_floats_ = 0;
  std::vector<Saved> saved_;  // [micro-batch]

  static void check_shape(const std::vector<std::int64_t>& shape, const std::string& name) {
    for (std::int64_t d : shape) {
      if (d > 0) continue;
      detail::fail({"torch stage",
            detail::concat(name, " ", detail::torch_adapter::shape_text(shape), " has a dimension of ", d),
            detail::concat("TorchStageOptions::", name),
            "Give every dimension of one micro-batch's tensor, each >= 1"});
    }
    if (shape.empty()) {
      detail::fail({"torch stage", detail::concat(name, " is empty"), detail::concat("TorchStageOptions::", name),
            "Give the shape of one micro-batch's tensor, e.g. {rows, features}"});
    }
  }

  static void check_spec(const TorchTensorSpec& spec, const std::string& name) {
    (void)dtype_of_scalar_type(spec.dtype);
    check_shape(spec.max_shape, name + ".max_shape");
    if (spec.variable_dim < -1 || spec.variable_dim >= static_cast<std::int64_t>(spec.max_shape.size())) {
      detail::fail({"torch stage",
            detail::concat(name, ".variable_dim is ", spec.variable_dim, " but max_shape ",
                           detail::torch_adapter::shape_text(spec.max_shape), " has ", spec.max_shape.size(),
                           " dimensions"),
            detail::concat("TorchStageOptions::", name), "Give a dimension index of max_shape, or -1 if none varies"});
    }
  }

  // One side's floats for a micro-batch of `length` (size()).
  [[nodiscard]] static std::size_t side_floats(const detail::torch_adapter::Side& side, std::int64_t length) {
    if (!side.typed()) return static_cast<std::size_t>(detail::torch_adapter::element_count(side.spec.max_shape));
    return torch_payload_floats(side.spec, length);
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
      detail::fail({"torch stage", detail::concat("both ", shape_name, " and ", tensors_name, " are given"),
            detail::concat("TorchStageOptions::", tensors_name),
            detail::concat("Give one: ", shape_name, " for float32 of a fixed shape, ", tensors_name,
                           " for any dtype or a variable dimension")});
    }
    if (tensors.size() != 1) {
      detail::fail({"torch stage",
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
    if (!s.graph && s.dropped) {
      detail::fail({"torch stage",
            detail::concat("backward of micro-batch ", mb,
                           ", whose forward kept no graph (keep_activation false) and which nothing recomputed"),
            "", "Put R(s, m) between F(s, m) and B/BI(s, m) in the schedule"});
    }
    if (!s.graph) {
      detail::fail({"torch stage", detail::concat("backward of micro-batch ", mb, " without its forward"), "",
            "Run the forward of a micro-batch before its backward (a hand-written schedule may have them swapped)"});
    }
    return s;
  }

  void forward(std::int32_t mb, std::span<const float> in, std::span<float> out, bool keep = true) {
    if (!keep) {
      // No graph, so nothing of the micro-batch stays alive until its recompute; the output
      // is the same numbers (autograd does not change what a module computes).
      const torch::NoGradGuard no_grad;
      Saved& s = saved(mb);
      s = Saved{};
      s.dropped = true;
      const torch::Tensor output = module_->forward(detail::torch_adapter::view(input_, in, "the stage's input"));
      detail::torch_adapter::write(output_, out, output, "the module's output",
                                   "Set the stage's output declaration to the module's output for one micro-batch");
      return;
    }
    // The rank threads do not inherit the caller's grad mode: the graph is wanted here.
    const torch::AutoGradMode grad_mode(true);
    const torch::Tensor output = forward_with_graph(saved(mb), in);
    detail::torch_adapter::write(output_, out, output, "the module's output",
                                 output_.typed()
                                     ? "Make TorchStageOptions::output_tensors[0] (dtype, max_shape, variable_dim) "
                                       "describe what the module returns for one micro-batch"
                                     : "Set TorchStageOptions::output_shape to the module's output for one micro-batch");
  }  // `output` goes here: the graph holds it only where a node saved it

  // R: the forward again from the kept input, with the graph, its output discarded (the
  // executor's copy of it is the one the next stage received).
  void recompute(std::int32_t mb, std::span<const float> in) {
    const torch::AutoGradMode grad_mode(true);
    (void)forward_with_graph(saved(mb), in);
  }

  // The module's output for the input in `in`, its graph kept in `s` from the output's
  // gradient edge (grad mode on).
  torch::Tensor forward_with_graph(Saved& s, std::span<const float> in) {
    s = Saved{};
    s.input = detail::torch_adapter::view(input_, in, "the stage's input");
    // Token ids and other integers take no gradient (autograd refuses them).
    if (torch::isFloatingType(s.input.scalar_type())) s.input.requires_grad_(true);
    torch::Tensor output = module_->forward(s.input);
    s.graph = true;
    if (!output.defined()) return output;  // write() says so
    // For a leaf (the input returned unchanged) this makes its gradient accumulator, which the
    // edge then holds: the backward's root and its input target are the one node.
    if (output.requires_grad()) s.root = torch::autograd::impl::gradient_edge(output);
    s.output_sizes.assign(output.sizes().begin(), output.sizes().end());
    return output;
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
    return detail::torch_adapter::gradient_view(output_, grad_out, s.output_sizes, "the output gradient");
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
    // An output that needs no gradient depends on nothing trainable: every gradient is zero,
    // as BI + BW leave them (the executor zeroes the weight gradient).
    if (!s.root.is_valid()) {
      if (input_wanted) write_input_gradient(grad_in, s, torch::Tensor());
    } else if (!wanted.empty()) {
      const auto grads =
          detail::torch_adapter::leaf_gradients(s.root, output_gradient(s, grad_out), wanted, /*keep_graph=*/false);
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
    const bool input_wanted = !grad_in.empty() && s.input.requires_grad();
    if (!grad_in.empty() && !input_wanted) write_input_gradient(grad_in, s, torch::Tensor());
    s.whole = true;
    s.roots.clear();
    if (!input_wanted) return;  // BW does it all
    if (!s.root.is_valid()) {   // nothing reaches the input either
      write_input_gradient(grad_in, s, torch::Tensor());
      return;
    }
    detail::torch_adapter::GraphCut cut = detail::torch_adapter::cut_graph(s.root, s.input, parameters_);
    if (!cut.usable) {  // BI the input gradient alone, BW every weight gradient from the output
      const auto grads = detail::torch_adapter::leaf_gradients(s.root, output_gradient(s, grad_out), {s.input},
                                                               /*keep_graph=*/true);
      write_input_gradient(grad_in, s, grads[0]);
      return;
    }
    const auto input_node = torch::autograd::impl::try_get_grad_accumulator(s.input);
    if (!input_node) {  // the output does not depend on the input
      write_input_gradient(grad_in, s, torch::Tensor());
      return;
    }
    torch::autograd::edge_list targets{torch::autograd::Edge(input_node, 0)};
    for (const detail::torch_adapter::WeightRoot& r : cut.roots) {
      for (std::uint32_t k = 0; k < r.node->num_inputs(); ++k) targets.emplace_back(r.node, k);
    }
    const torch::Tensor g = output_gradient(s, grad_out);
    const std::vector<torch::Tensor> grads = detail::torch_adapter::run_engine({s.root}, {g}, targets);
    write_input_gradient(grad_in, s, grads[0]);
    std::size_t at = 1;
    for (detail::torch_adapter::WeightRoot& r : cut.roots) {
      for (std::uint32_t k = 0; k < r.node->num_inputs(); ++k) {
        torch::Tensor kept = grads[at++];
        // The gradient at the output itself is the executor's buffer: keep a copy, so that
        // backward_weight does not depend on the buffer being unchanged meanwhile.
        if (kept.defined() && kept.is_alias_of(g)) kept = kept.clone();
        r.gradients.push_back(std::move(kept));
      }
    }
    s.whole = false;
    s.roots = std::move(cut.roots);
  }

  void backward_weight(std::int32_t mb, std::span<const float> grad_out, std::span<float> weight_grad) {
    const torch::AutoGradMode grad_mode(true);
    Saved& s = saved_for_backward(mb);
    if (s.whole) {
      if (!parameters_.empty() && s.root.is_valid()) {
        const auto grads = detail::torch_adapter::leaf_gradients(s.root, output_gradient(s, grad_out), parameters_,
                                                                 /*keep_graph=*/false);
        std::vector<std::size_t> all(parameters_.size());
        for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
        accumulate_weight_gradient(weight_grad, all, grads);
      }
    } else {
      for (const detail::torch_adapter::WeightRoot& r : s.roots) {
        torch::autograd::edge_list roots;
        std::vector<torch::Tensor> gradients;
        for (std::uint32_t k = 0; k < r.node->num_inputs(); ++k) {
          if (!r.gradients[k].defined()) continue;  // nothing arrived there in the full backward either
          roots.emplace_back(r.node, k);
          gradients.push_back(r.gradients[k]);
        }
        if (roots.empty()) continue;
        torch::autograd::edge_list targets;
        for (std::size_t i : r.parameters) {
          targets.emplace_back(torch::autograd::impl::try_get_grad_accumulator(parameters_[i]), 0);
        }
        accumulate_weight_gradient(weight_grad, r.parameters,
                                   detail::torch_adapter::run_engine(roots, gradients, targets));
      }
    }
    s = Saved{};
  }

  // A parameter reached from two of the cut's roots gets a gradient from each; they add up.
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
      detail::fail({"torch stage",
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
      detail::fail({"torch stage",
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
      detail::fail({"torch stage",
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
      detail::fail({"torch stage",
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

}  // namespace libtorch

}  // namespace ppsched
