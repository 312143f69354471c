// The opt-in libtorch adapter: a torch::nn::Sequential (any module, wrapped in one) becomes
// the StageFunctions of one pipeline stage, with autograd doing the backward. Never included
// by <ppsched/ppsched.hpp>: include it on purpose and link libtorch (Debian: libtorch-dev).
//
// Per micro-batch in flight the stage keeps what autograd needs: the forward's input (a view
// of the executor's buffer, which stays valid until the micro-batch's last backward) and the
// autograd graph, held by the output's gradient edge rather than by the output tensor: the
// executor has its own copy of the output, so the tensor is freed once F has written it out,
// unless the graph saved it (Tanh and ReLU keep their result). A full backward runs autograd
// once and frees the graph. The split backward of zero-bubble schedules cuts the graph itself
// (detail::torch_adapter::cut_graph): backward_input runs only the nodes between the output
// and the input, computing only the gradients that lead to the input, and keeps the gradient
// arriving at each node that also leads to a parameter; backward_weight runs each of those nodes once more from
// that gradient, for its parameters only, and frees the graph. Nothing runs twice, so BI + BW
// costs about what B does, and the weight gradients are the numbers the full backward
// computes (the same autograd nodes on the same values): every schedule trains
// bit-identically.
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

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/tensor.hpp"
#include "ppsched/runtime/payload.hpp"
#include "ppsched/runtime/time_spread.hpp"
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

// ------------------------------------------------------------ the split backward's cut
//
// Zero-bubble schedules run the input gradient (BI) early and the weight gradient (BW) later,
// and pay off only when the two cost what the full backward does. The cut is made in the
// micro-batch's autograd graph, not between the Sequential's children: BI runs exactly the
// nodes on a path from the output to the stage's input (each computing only the gradients
// that lead there: a convolution its input gradient, not its weight's), and captures the
// gradient arriving at every such node that also leads to a parameter off that path. BW then
// runs each of those nodes once from its captured gradient, asking for its parameters only
// (the convolution's weight gradient). No node's input gradient is computed twice and the
// forward is never re-run, whatever a child holds inside (a residual block, a whole MLP).

// A node of the graph where BW starts: the parameters it reaches off the input path, and the
// gradient arriving at each of its inputs, as BI captured it.
struct WeightRoot {
  std::shared_ptr<torch::autograd::Node> node;
  std::vector<std::size_t> parameters;   // indices into the stage's parameters
  std::vector<torch::Tensor> gradients;  // [input of node]; undefined where none arrived
};

struct GraphCut {
  // False where one node reaches a parameter both on and off the input path (a weight used
  // twice in the stage, once before a later use's input): BW from that node would recompute
  // and count the on-path part again. The stage then splits at the output: BI the input
  // gradient alone, BW every weight gradient (correct, but the input path runs twice).
  bool usable = true;
  std::vector<WeightRoot> roots;  // in the order the engine runs them in a full backward
};

// The cut of the graph under `output` (an output's gradient edge), for the input gradient of
// `input` (a leaf).
[[nodiscard]] inline GraphCut cut_graph(const torch::autograd::Edge& output, const torch::Tensor& input,
                                        const std::vector<torch::Tensor>& parameters) {
  using torch::autograd::Node;
  GraphCut cut;
  const std::shared_ptr<Node>& root = output.function;
  const std::shared_ptr<Node> input_node = torch::autograd::impl::try_get_grad_accumulator(input);
  if (!root || !input_node) return cut;
  std::unordered_map<const Node*, std::size_t> parameter_of;  // a parameter's AccumulateGrad -> its index
  std::vector<std::shared_ptr<Node>> accumulators;            // alive while compared by address
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    if (auto a = torch::autograd::impl::try_get_grad_accumulator(parameters[i])) {
      parameter_of.emplace(a.get(), i);
      accumulators.push_back(std::move(a));
    }
  }
  const std::size_t words = (parameters.size() + 63) / 64;
  struct Info {
    std::shared_ptr<Node> node;
    bool reaches_input = false;
    std::vector<std::uint64_t> reached;  // bit set of the parameters reached
  };
  std::vector<Info> info;
  std::unordered_map<const Node*, std::size_t> index;
  std::vector<std::pair<std::size_t, std::size_t>> stack;  // (node, next edge to look at)
  const auto visit = [&](const std::shared_ptr<Node>& n) {
    if (index.contains(n.get())) return;
    index.emplace(n.get(), info.size());
    info.push_back({n, false, std::vector<std::uint64_t>(words, 0)});
    stack.emplace_back(info.size() - 1, 0);
  };
  visit(root);
  while (!stack.empty()) {  // depth first, each node finished after every node it leads to
    const std::size_t i = stack.back().first;
    const auto& edges = info[i].node->next_edges();
    if (stack.back().second < edges.size()) {
      const torch::autograd::Edge& e = edges[stack.back().second++];
      if (e.is_valid()) visit(e.function);
      continue;
    }
    stack.pop_back();
    Info& n = info[i];
    n.reaches_input = n.node == input_node;
    if (const auto p = parameter_of.find(n.node.get()); p != parameter_of.end()) {
      n.reached[p->second / 64] |= std::uint64_t{1} << (p->second % 64);
    }
    for (const torch::autograd::Edge& e : edges) {
      if (!e.is_valid()) continue;
      const Info& c = info[index.at(e.function.get())];
      n.reaches_input = n.reaches_input || c.reaches_input;
      for (std::size_t w = 0; w < words; ++w) n.reached[w] |= c.reached[w];
    }
  }
  for (const Info& n : info) {
    if (!n.reaches_input || n.node == input_node) continue;
    std::vector<std::uint64_t> off(words, 0), on(words, 0);
    for (const torch::autograd::Edge& e : n.node->next_edges()) {
      if (!e.is_valid()) continue;
      const Info& c = info[index.at(e.function.get())];
      for (std::size_t w = 0; w < words; ++w) (c.reaches_input ? on : off)[w] |= c.reached[w];
    }
    WeightRoot r{n.node, {}, {}};
    for (std::size_t w = 0; w < words; ++w) {
      if ((off[w] & on[w]) != 0) {
        cut.usable = false;
        return cut;
      }
      for (std::size_t b = 0; b < 64; ++b) {
        if ((off[w] >> b & 1U) != 0) r.parameters.push_back(w * 64 + b);
      }
    }
    if (!r.parameters.empty()) cut.roots.push_back(std::move(r));
  }
  // The engine runs ready nodes latest-created first; shared parameters then sum in its order.
  std::sort(cut.roots.begin(), cut.roots.end(),
            [](const WeightRoot& a, const WeightRoot& b) { return a.node->sequence_nr() > b.node->sequence_nr(); });
  return cut;
}

// The gradients arriving at `targets` (edges into nodes of the graph), running only the
// nodes that lead to them; with keep_graph the graph stays for a later call, without it each
// node frees what it saved once it has run.
[[nodiscard]] inline std::vector<torch::Tensor> run_engine(const torch::autograd::edge_list& roots,
                                                           const std::vector<torch::Tensor>& gradients,
                                                           const torch::autograd::edge_list& targets,
                                                           bool keep_graph = true) {
  return torch::autograd::Engine::get_default_engine().execute(roots, gradients, keep_graph,
                                                               /*create_graph=*/false, /*accumulate_grad=*/false,
                                                               targets);
}

// The gradients of `leaves` (undefined where none arrives) from `gradient` entering the graph
// at `root`: what torch::autograd::grad({output}, leaves, {gradient}, keep_graph, false, true)
// computes, the same engine run, with the output's gradient edge standing in for the output.
// A leaf the graph never used has no gradient accumulator; autograd::grad then gives it a
// dummy target nothing reaches, and so do the undefined entries here.
[[nodiscard]] inline std::vector<torch::Tensor> leaf_gradients(const torch::autograd::Edge& root,
                                                               const torch::Tensor& gradient,
                                                               const std::vector<torch::Tensor>& leaves,
                                                               bool keep_graph) {
  torch::autograd::edge_list targets;
  std::vector<std::size_t> of;  // [target] -> leaf
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (auto a = torch::autograd::impl::try_get_grad_accumulator(leaves[i])) {
      targets.emplace_back(std::move(a), 0);
      of.push_back(i);
    }
  }
  std::vector<torch::Tensor> out(leaves.size());
  if (targets.empty()) return out;
  const std::vector<torch::Tensor> got = run_engine({root}, {gradient}, targets, keep_graph);
  for (std::size_t k = 0; k < of.size(); ++k) out[of[k]] = got[k];
  return out;
}

}  // namespace detail::torch_adapter
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

// ------------------------------------------------------------ counting what libtorch allocates, per rank
//
// Peak memory per rank is measured, not computed: TorchMemoryCounter::install() replaces
// libtorch's CPU allocator by a counting one over the same c10::alloc_cpu (c10::SetCPUAllocator,
// once per process, for the process's lifetime: libtorch keeps the pointer). Each allocation is charged
// to the tag of the thread that makes it (TorchMemoryCounter::Tag: a pipeline rank, set by
// count_torch_memory around every call of a stage on its rank thread) and credited back to that
// same tag when it is freed, whichever thread frees it. Per tag the counter keeps the bytes
// held now, their high-water mark (transients inside a call included) and the settled peak: the
// most held at the end of a call, which is what the simulator's memory over time models
// (activations kept between actions, not an operator's workspace). With one intra-op thread
// (torch::set_num_threads(1)) every CPU kernel and autograd's CPU backward run on the calling
// thread, so a rank thread's tag sees all its stage allocates; what other threads allocate goes
// to TorchMemoryCounter::untagged. Allocations made before install() are not counted (their
// frees neither). Tensors over memory libtorch did not allocate (from_blob: the views of the
// executor's buffers) cost nothing here: the executor's own buffers are counted apart
// (docs/accuracy.md, "Peak memory per rank").

class TorchMemoryCounter {
 public:
  static constexpr int tags = 66;       // ranks 0..63, then the two below
  static constexpr int profiling = 64;  // profile_sequential's measurements
  static constexpr int untagged = 65;   // threads without a Tag

  // The process's counter, installing the counting allocator on the first call. Throws when
  // another allocator set with a higher priority keeps it out.
  [[nodiscard]] static TorchMemoryCounter& install();

  // Charges what the calling thread allocates to `tag` while alive (nested: the outer tag
  // returns after).
  class Tag {
   public:
    explicit Tag(int tag);
    ~Tag();
    Tag(const Tag&) = delete;
    Tag& operator=(const Tag&) = delete;

   private:
    int previous_;
  };

  // Bytes of `tag` allocated and not yet freed; their high-water mark; the most held at the end
  // of a call (settle). Each since the last reset_peaks(tag).
  [[nodiscard]] std::int64_t current(int tag) const { return slot(tag).current.load(std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t peak(int tag) const { return slot(tag).peak.load(std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t settled_peak(int tag) const { return slot(tag).settled.load(std::memory_order_relaxed); }
  // Both peaks back to what `tag` holds now (call between steps, with no call running).
  void reset_peaks(int tag) {
    Slot& s = slot(tag);
    const std::int64_t now = s.current.load(std::memory_order_relaxed);
    s.peak.store(now, std::memory_order_relaxed);
    s.settled.store(now, std::memory_order_relaxed);
  }
  // Records what `tag` holds now as a settled value (the end of a call).
  void settle(int tag) {
    Slot& s = slot(tag);
    raise(s.settled, s.current.load(std::memory_order_relaxed));
  }

  void add(int tag, std::int64_t bytes) {
    Slot& s = slot(tag);
    raise(s.peak, s.current.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  }
  void remove(int tag, std::int64_t bytes) { slot(tag).current.fetch_sub(bytes, std::memory_order_relaxed); }

  // The tag of the calling thread (untagged outside any Tag).
  [[nodiscard]] static int& thread_tag() noexcept {
    static thread_local int tag = untagged;
    return tag;
  }

 private:
  struct Slot {
    std::atomic<std::int64_t> current{0}, peak{0}, settled{0};
  };
  std::array<Slot, tags> slots_;

  [[nodiscard]] const Slot& slot(int tag) const { return slots_.at(checked(tag)); }
  [[nodiscard]] Slot& slot(int tag) { return slots_.at(checked(tag)); }
  [[nodiscard]] static std::size_t checked(int tag) {
    if (tag < 0 || tag >= tags) {
      detail::fail({"torch memory counter", detail::concat("tag ", tag, " is outside [0, ", tags, ")"), "TorchMemoryCounter",
            "Tag ranks 0..63 (more ranks than that in one process are not counted)"});
    }
    return static_cast<std::size_t>(tag);
  }
  static void raise(std::atomic<std::int64_t>& peak, std::int64_t value) {
    std::int64_t seen = peak.load(std::memory_order_relaxed);
    while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
    }
  }
};

}  // namespace libtorch
namespace detail::torch_adapter {

// libtorch's own CPU allocation (c10::alloc_cpu, aligned as its default allocator aligns) with
// a header before each block: its size and owner, so that its free is credited to the tag that
// allocated it. The block's address is its context and the deleter is fixed, as raw_allocate
// (which some kernels use: gelu's) requires.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(libtorch::TorchMemoryCounter* counter) { counter_() = counter; }

  c10::DataPtr allocate(std::size_t n) const override {
    auto* base = static_cast<std::byte*>(c10::alloc_cpu(header + n));
    const int owner = libtorch::TorchMemoryCounter::thread_tag();
    new (base) Header{static_cast<std::int64_t>(n), owner};
    counter_()->add(owner, static_cast<std::int64_t>(n));
    void* data = base + header;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  [[nodiscard]] c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  struct Header {
    std::int64_t bytes;
    int owner;
  };
  // A multiple of the alignment, so that the data after it is aligned as the block is.
  static constexpr std::size_t header = (sizeof(Header) + c10::gAlignment - 1) / c10::gAlignment * c10::gAlignment;
  static libtorch::TorchMemoryCounter*& counter_() {
    static libtorch::TorchMemoryCounter* counter = nullptr;
    return counter;
  }
  static void release(void* data) {
    if (data == nullptr) return;
    std::byte* base = static_cast<std::byte*>(data) - header;
    const Header h = *reinterpret_cast<const Header*>(base);
    counter_()->remove(h.owner, h.bytes);
    c10::free_cpu(base);
  }
};

}  // namespace detail::torch_adapter
namespace libtorch {

inline TorchMemoryCounter& TorchMemoryCounter::install() {
  // Never freed: libtorch keeps the allocator for the process's life, and blocks freed at exit
  // still credit the counter.
  static TorchMemoryCounter* const counter = [] {
    auto* c = new TorchMemoryCounter;
    auto* a = new detail::torch_adapter::CountingCpuAllocator(c);
    // Above the default allocator's priority (0), so that it takes; the highest, so that a
    // later SetCPUAllocator of lower priority cannot drop the counting unnoticed.
    c10::SetCPUAllocator(a, std::numeric_limits<std::uint8_t>::max());
    if (c10::GetCPUAllocator() != a) {
      detail::fail({"torch memory counter", "libtorch kept its CPU allocator (another was set with the highest priority)",
            "TorchMemoryCounter::install", "Do not set a CPU allocator of priority 255 when counting memory"});
    }
    return c;
  }();
  return *counter;
}

inline TorchMemoryCounter::Tag::Tag(int tag) : previous_(thread_tag()) {
  (void)checked(tag);
  thread_tag() = tag;
}
inline TorchMemoryCounter::Tag::~Tag() { thread_tag() = previous_; }

// `f` with every call charged to its rank (StageContext::rank) and settled at its end: set on
// each stage of a World whose memory is measured (the bench, the tests). Keeps an around_call
// already set, inside the tag.
[[nodiscard]] inline StageFunctions count_torch_memory(StageFunctions f) {
  TorchMemoryCounter& counter = TorchMemoryCounter::install();
  f.around_call = [&counter, inner = std::move(f.around_call)](const StageContext& c, StageCallRef call) {
    const TorchMemoryCounter::Tag tag(c.rank);
    if (inner) {
      inner(c, call);
    } else {
      call();
    }
    counter.settle(c.rank);
  };
  return f;
}

// ------------------------------------------------------------ profiling a Sequential's children
//
// torchgpipe's balance_by_time / balance_by_size, for ppsched: each child of a Sequential is
// timed as the adapter runs it (a one-child TorchStage on the calling thread: forward, full
// backward, and backward_input then backward_weight) at several micro-batch sizes, with
// warm-up and repetitions, and its bytes are measured; the result is a ppsched Profile the
// partitioner and `ppsched-plan --profile` read (profile_to_json in graph/profile_json.hpp
// writes it). Times are wall-clock milliseconds on the calling thread, so set
// torch::set_num_threads as the run will (one intra-op thread per rank on a CPU pipeline).

struct TorchProfileOptions {
  // The micro-batch sizes to measure at (rows: the first dimension of the model's input).
  std::vector<std::int64_t> rows{8};
  // The model's input for one micro-batch of `rows` rows (any dtype: token ids too).
  std::function<torch::Tensor(std::int64_t rows)> input;
  int warmup = 2;       // runs per child and size before timing
  int repetitions = 5;  // timed runs per child and size; the median is the profile's figure
  // The last stage's loss, as TorchStageOptions::loss takes it, and its target for a size
  // (empty: zeros shaped as the model's output). The last stage's backward starts with this
  // call (the adapter runs it as TorchStage::functions' loss does: the output as a leaf, the
  // loss, its gradient), so its time is added to the last child's B and BI. Empty: not timed.
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  std::function<torch::Tensor(std::int64_t rows)> target;
};

// One measured time: the median of the repetitions and their spread, in ms.
// One child at one micro-batch size.
struct TorchLayerSample {
  std::int64_t rows = 0;
  profiling::TimeSpread forward, backward, backward_input, backward_weight;  // B; then BI and BW of the split
  // Counted by TorchMemoryCounter on TorchStages of the model's tail (detail::torch_adapter::
  // held_by_stage): what a stage starting at this child holds per micro-batch after its
  // forward, less what a stage starting at the next child holds. A stage's children then sum to
  // what the stage holds from its forward to its backward, to the byte where the stage runs to
  // the model's end; one that ends earlier holds that sum less its last child's boundary_bytes.
  double activation_bytes = 0.0;
  // The same after backward_input: what is still held for backward_weight, from which
  // cost_model_of takes CostModel::weight_memory_fraction. It can exceed activation_bytes: BI
  // keeps the whole graph (the engine runs it with keep_graph) and adds the gradients it
  // captured for BW.
  double weight_bytes = 0.0;
  double output_bytes = 0.0;      // the tensor the child hands on
  // Of activation_bytes, what a cut right after this child lets go (Layer::boundary_bytes): its
  // output where only the next child saves it (a transformer block's, which the next block's
  // layer norm saves), held while that child runs in the same stage; the next stage's copy is
  // the executor's buffer. Counted as activation_bytes less what a stage of this child alone
  // holds; 0 for the last child, which no cut follows.
  double boundary_bytes = 0.0;
  // The same after backward_input, of weight_bytes. It differs where the stage cut after this
  // child keeps its output's gradient for BW while, uncut, the child's BW needs no gradient at
  // its output: a transformer block's (its output is a sum), where the gradient kept at the cut
  // weighs what the next layer norm's saved input did, so the term is 0.
  double boundary_weight_bytes = 0.0;
};

struct TorchLayerProfile {
  std::string name;        // "3:Conv2d": the child's index and class name
  double param_bytes = 0;  // parameters first met in this child (a shared one counts once)
  std::vector<TorchLayerSample> samples;  // [size], in TorchProfileOptions::rows' order
};

struct TorchProfile {
  std::vector<std::int64_t> rows;
  std::vector<TorchLayerProfile> layers;
  // What a call of a stage function costs once however many children the stage runs (the
  // autograd engine's start, the payload views), in ms, per kind of call. Each child is timed
  // as a one-child stage, so each child's timing paid it once: profile_sequential estimates it
  // at every size as (the children's times summed - the whole model's as one stage) /
  // (children - 1), takes the median over the sizes, clamped to [0, the least child's time],
  // and takes it off every child's times, so that a stage's children plus one call_overhead
  // are the stage. All zero for a model of one child.
  struct CallOverhead {
    double forward = 0.0, backward = 0.0, backward_input = 0.0, backward_weight = 0.0;
  };
  CallOverhead call_overhead;
  // [size]: the loss's call (TorchProfileOptions::loss), already in the last child's B and BI;
  // empty when no loss was given.
  std::vector<profiling::TimeSpread> loss;

  // The Profile at one measured size: a chain of the children with the medians (ms) and
  // bytes at that size, the full backward beside the split halves, `rows` set to that size,
  // and every measured size as the layer's points (graph/rows.hpp), so the planner prices any
  // micro-batch size from measurement rather than by scaling this one. Its action_overhead is
  // the mean of call_overhead's four: add the backend's own (measure_backend_overheads) to
  // it, do not overwrite it. first_stage_backward_in_bw is set: the adapter's first stage runs
  // its whole backward in BW.
  [[nodiscard]] Profile at(std::int64_t micro_batch_rows) const;
};

}  // namespace libtorch
namespace detail::torch_adapter {

template <class F>
[[nodiscard]] double time_ms(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// "torch::nn::Conv2dImpl" -> "Conv2d".
[[nodiscard]] inline std::string short_name(std::string name) {
  if (const auto colons = name.rfind("::"); colons != std::string::npos) name.erase(0, colons + 2);
  if (name.size() > 4 && name.ends_with("Impl")) name.erase(name.size() - 4);
  return name;
}

[[nodiscard]] inline libtorch::TorchTensorSpec spec_of(const torch::Tensor& t) {
  return {t.scalar_type(), std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end()), -1};
}

}  // namespace detail::torch_adapter
namespace libtorch {

inline Profile TorchProfile::at(std::int64_t micro_batch_rows) const {
  const auto k = static_cast<std::size_t>(std::find(rows.begin(), rows.end(), micro_batch_rows) - rows.begin());
  if (k == rows.size()) {
    std::string measured;
    for (std::int64_t r : rows) measured += detail::concat(measured.empty() ? "" : ", ", r);
    detail::fail({"torch profile", detail::concat("no measurement at ", micro_batch_rows, " rows"), "TorchProfile::at",
          detail::concat("Ask for a measured size (", measured, "), or add it to TorchProfileOptions::rows")});
  }
  // Bytes were counted (TorchMemoryCounter installed) when any child's were: then every child
  // carries what its BI leaves for BW, 0 included, so that every stage of a cut has its share.
  const bool counted = std::any_of(layers.begin(), layers.end(), [](const TorchLayerProfile& l) {
    return std::any_of(l.samples.begin(), l.samples.end(), [](const TorchLayerSample& s) { return s.activation_bytes > 0.0; });
  });
  std::vector<Layer> out;
  for (const TorchLayerProfile& l : layers) {
    const TorchLayerSample& s = l.samples[k];
    Layer layer;
    layer.name = l.name;
    layer.forward = s.forward.median;
    layer.backward_input = s.backward_input.median;
    layer.backward_weight = s.backward_weight.median;
    layer.backward = s.backward.median;
    layer.param_bytes = l.param_bytes;
    layer.activation_bytes = s.activation_bytes;
    layer.output_bytes = s.output_bytes;
    if (counted) layer.weight_bytes = s.weight_bytes;
    if (counted) layer.boundary_bytes = s.boundary_bytes;
    if (counted) layer.boundary_weight_bytes = s.boundary_weight_bytes;
    if (l.samples.size() > 1) {
      for (const TorchLayerSample& m : l.samples) {
        const auto relative = [](const profiling::TimeSpread& t) { return t.relative_spread(); };
        CostPoint point;
        point.rows = static_cast<double>(m.rows);
        point.forward = m.forward.median;
        point.backward_input = m.backward_input.median;
        point.backward_weight = m.backward_weight.median;
        point.backward = m.backward.median;
        point.activation_bytes = m.activation_bytes;
        point.output_bytes = m.output_bytes;
        if (counted) point.weight_bytes = m.weight_bytes;
        if (counted) point.boundary_bytes = m.boundary_bytes;
        if (counted) point.boundary_weight_bytes = m.boundary_weight_bytes;
        point.spread = std::max({relative(m.forward), relative(m.backward), relative(m.backward_input),
                                 relative(m.backward_weight)});
        layer.points.push_back(point);
      }
      std::sort(layer.points.begin(), layer.points.end(),
                [](const CostPoint& a, const CostPoint& b) { return a.rows < b.rows; });
    }
    out.push_back(std::move(layer));
  }
  Profile p;
  p.graph = LayerGraph::chain(std::move(out));
  p.time_unit = "ms";
  p.rows = static_cast<double>(micro_batch_rows);
  const CallOverhead& o = call_overhead;
  p.action_overhead = (o.forward + o.backward + o.backward_input + o.backward_weight) / 4.0;
  // A TorchStage whose input takes no gradient leaves the whole backward to BW (backward_input).
  p.first_stage_backward_in_bw = true;
  return p;
}

}  // namespace libtorch
namespace detail::torch_adapter {

// A TorchStage of `model`'s children first..last - 1 over typed boundaries (child k's input
// inputs[k], the model's output inputs[size]), its functions, and the buffers of one
// micro-batch's calls, `grad` as the output's gradient. Built in place: `f` calls `stage`.
struct PartStage {
  PartStage(const torch::nn::Sequential& model, const std::vector<torch::Tensor>& inputs, std::size_t first,
            std::size_t last, const torch::Tensor& grad)
      : stage(part_of(model, first, last), options_of(inputs[first], inputs[last])),
        f(stage.functions()),
        in(libtorch::torch_payloads(spec_of(inputs[first]), {inputs[first]})),
        grad_out(libtorch::torch_payloads(spec_of(inputs[last]), {grad})),
        output(grad_out.size()),
        grad_in(in.size()),
        weight_grad(f.weight_grad_size) {}
  PartStage(const PartStage&) = delete;
  PartStage& operator=(const PartStage&) = delete;

  libtorch::TorchStage stage;
  StageFunctions f;
  std::vector<float> in, grad_out, output, grad_in, weight_grad;

 private:
  static torch::nn::Sequential part_of(const torch::nn::Sequential& model, std::size_t first, std::size_t last) {
    torch::nn::Sequential part;
    for (std::size_t k = first; k < last; ++k) part->push_back(*(model->begin() + static_cast<std::ptrdiff_t>(k)));
    return part;
  }
  static libtorch::TorchStageOptions options_of(const torch::Tensor& input, const torch::Tensor& output) {
    libtorch::TorchStageOptions so;
    so.input_tensors = {spec_of(input)};
    so.output_tensors = {spec_of(output)};
    return so;
  }
};

// Bytes a stage holds for one micro-batch, counted: after its forward, and after its
// backward_input (the graph and the gradients kept for BW).
struct HeldBytes {
  double forward = 0.0;
  double input_backward = 0.0;
};

// What a TorchStage of `model`'s children first..last - 1 holds for one micro-batch, child k's
// input being inputs[k] and the model's output inputs[size], counted after its forward and
// after its backward_input. profile_sequential counts it on every tail (first..end) and on every
// child alone: a child's share is its tail's less the next tail's, so a stage that runs to the
// model's end is predicted to the byte; and its boundary_bytes is its share less what it holds
// alone, the one term a sum of shares cannot see: its output, where only the next child saves
// it, is held when that child runs in the same stage and let go where the next stage starts
// there (its input is then the executor's buffer); boundary_weight_bytes likewise after
// backward_input. Counting a whole chain's forward instead
// charged each child its output, held or not (docs/accuracy.md).
[[nodiscard]] inline HeldBytes held_by_stage(const torch::nn::Sequential& model, const std::vector<torch::Tensor>& inputs,
                                             std::size_t first, std::size_t last) {
  libtorch::TorchMemoryCounter& counter = libtorch::TorchMemoryCounter::install();
  // Any gradient of the right shape: bytes do not depend on its values.
  PartStage p(model, inputs, first, last, torch::ones_like(inputs[last]));
  const libtorch::TorchMemoryCounter::Tag tag(libtorch::TorchMemoryCounter::profiling);
  const std::int64_t before = counter.current(libtorch::TorchMemoryCounter::profiling);
  HeldBytes out;
  p.f.forward(0, p.in, p.output);
  out.forward = static_cast<double>(counter.current(libtorch::TorchMemoryCounter::profiling) - before);
  p.f.backward_input(0, p.in, p.grad_out, p.grad_in);
  out.input_backward = static_cast<double>(counter.current(libtorch::TorchMemoryCounter::profiling) - before);
  p.f.backward_weight(0, p.in, p.grad_out, p.weight_grad);
  return out;
}

// The four calls of a TorchStage of `model`'s children first..last - 1, child k's input being
// inputs[k], timed as the adapter runs them: F, B, then F, BI, BW, after `warmup` rounds.
struct StageTimes {
  profiling::TimeSpread forward, backward, backward_input, backward_weight;
};
[[nodiscard]] inline StageTimes time_stage(const torch::nn::Sequential& model, const std::vector<torch::Tensor>& inputs,
                                           std::size_t first, std::size_t last, int warmup, int repetitions) {
  torch::manual_seed(static_cast<std::uint64_t>(first));
  PartStage p(model, inputs, first, last, torch::randn_like(inputs[last]));
  const StageFunctions& f = p.f;
  std::vector<double> fw, b, bi, bw;
  const libtorch::TorchMemoryCounter::Tag tag(libtorch::TorchMemoryCounter::profiling);
  for (int rep = 0; rep < warmup + repetitions; ++rep) {
    const bool timed = rep >= warmup;
    std::fill(p.weight_grad.begin(), p.weight_grad.end(), 0.0f);
    const double f1 = time_ms([&] { f.forward(0, p.in, p.output); });
    const double full = time_ms([&] { f.backward(0, p.in, p.grad_out, p.grad_in, p.weight_grad); });
    std::fill(p.weight_grad.begin(), p.weight_grad.end(), 0.0f);
    const double f2 = time_ms([&] { f.forward(0, p.in, p.output); });
    const double input_part = time_ms([&] { f.backward_input(0, p.in, p.grad_out, p.grad_in); });
    const double weight_part = time_ms([&] { f.backward_weight(0, p.in, p.grad_out, p.weight_grad); });
    if (!timed) continue;
    fw.push_back(f1);
    fw.push_back(f2);
    b.push_back(full);
    bi.push_back(input_part);
    bw.push_back(weight_part);
  }
  return {spread_of(fw), spread_of(b), spread_of(bi), spread_of(bw)};
}

// The loss's call at one size, as TorchStage's loss runs it: the model's output `y` as a leaf
// that takes a gradient, the loss against the target, the gradient, copied out as floats.
[[nodiscard]] inline profiling::TimeSpread time_loss(const libtorch::TorchProfileOptions& options, const torch::Tensor& y, std::int64_t rows) {
  const torch::Tensor target = options.target ? options.target(rows) : torch::zeros_like(y);
  if (!target.defined()) {
    detail::fail({"torch profile", detail::concat("the target for ", rows, " rows is undefined"), "libtorch::TorchProfileOptions::target",
          "Return one micro-batch's target tensor, or leave target empty for zeros shaped as the output"});
  }
  std::vector<float> grad(static_cast<std::size_t>(y.numel()));
  const torch::Tensor grad_out = torch::from_blob(grad.data(), y.sizes(), torch::kFloat32);
  std::vector<double> ms;
  for (int rep = 0; rep < options.warmup + options.repetitions; ++rep) {
    const double t = time_ms([&] {
      const torch::AutoGradMode grad_mode(true);
      const torch::Tensor output = y.detach().requires_grad_(true);
      const torch::Tensor value = options.loss(output, target);
      if (!value.defined() || value.numel() != 1 || !value.requires_grad()) {
        detail::fail({"torch profile", "the loss is not one scalar computed from the output", "libtorch::TorchProfileOptions::loss",
              "Return one scalar computed from the output (e.g. torch::mse_loss(output, target))"});
      }
      grad_out.copy_(torch::autograd::grad({value}, {output})[0]);
    });
    if (rep >= options.warmup) ms.push_back(t);
  }
  return spread_of(std::move(ms));
}

// TorchProfile::call_overhead from the children's times alone ([child][size]) and the whole
// chain's ([size]), and every child's times with it taken off.
inline libtorch::TorchProfile::CallOverhead take_off_call_overhead(std::vector<libtorch::TorchLayerProfile>& children,
                                                         const std::vector<StageTimes>& whole) {
  const auto one = [&](profiling::TimeSpread libtorch::TorchLayerSample::* kind, profiling::TimeSpread StageTimes::* whole_kind) {
    std::vector<double> per_size;
    double least = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < whole.size(); ++k) {
      double sum = 0.0;
      for (const libtorch::TorchLayerProfile& c : children) {
        sum += (c.samples[k].*kind).median;
        least = std::min(least, (c.samples[k].*kind).median);
      }
      per_size.push_back((sum - (whole[k].*whole_kind).median) / static_cast<double>(children.size() - 1));
    }
    const double per_call = std::clamp(spread_of(per_size).median, 0.0, least);
    for (libtorch::TorchLayerProfile& c : children) {
      for (libtorch::TorchLayerSample& sample : c.samples) {
        profiling::TimeSpread& t = sample.*kind;
        t.median -= per_call;  // per_call is at most the least median
        for (double* v : {&t.q1, &t.q3, &t.min, &t.max}) *v = std::max(0.0, *v - per_call);
      }
    }
    return per_call;
  };
  libtorch::TorchProfile::CallOverhead o;
  o.forward = one(&libtorch::TorchLayerSample::forward, &StageTimes::forward);
  o.backward = one(&libtorch::TorchLayerSample::backward, &StageTimes::backward);
  o.backward_input = one(&libtorch::TorchLayerSample::backward_input, &StageTimes::backward_input);
  o.backward_weight = one(&libtorch::TorchLayerSample::backward_weight, &StageTimes::backward_weight);
  return o;
}

}  // namespace detail::torch_adapter
namespace libtorch {

// Measures every child of `model` (see above). The model is left as it was: its parameters,
// their .grad, and its buffers (a batch norm's running statistics) are restored.
[[nodiscard]] inline TorchProfile profile_sequential(torch::nn::Sequential model,
                                                     const TorchProfileOptions& options) {
  const auto bad = [](const std::string& problem, const char* where, const char* fix) {
    detail::fail({"torch profile", problem, where, fix});
  };
  if (model->size() == 0) bad("the Sequential has no children", "profile_sequential", "Give a model with children");
  if (options.rows.empty()) bad("no micro-batch sizes", "TorchProfileOptions::rows", "List at least one size");
  for (std::int64_t r : options.rows) {
    if (r < 1) {
      bad(detail::concat("a micro-batch size of ", r), "TorchProfileOptions::rows", "Give sizes >= 1");
    }
    if (std::count(options.rows.begin(), options.rows.end(), r) > 1) {
      bad(detail::concat("the micro-batch size ", r, " measured twice"), "TorchProfileOptions::rows",
          "List each size once");
    }
  }
  if (!options.input) {
    bad("no input", "TorchProfileOptions::input", "Give a function returning one micro-batch's input for a size");
  }
  if (options.warmup < 0 || options.repetitions < 1) {
    bad(detail::concat("warmup ", options.warmup, ", repetitions ", options.repetitions),
        "TorchProfileOptions::warmup/repetitions", "Give warmup >= 0 and repetitions >= 1");
  }
  std::vector<torch::Tensor> buffers;
  for (const torch::Tensor& b : model->buffers()) buffers.push_back(b.clone());
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : model->parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : p.grad());

  TorchProfile out;
  out.rows = options.rows;
  std::vector<const void*> seen;  // parameters already counted
  std::vector<detail::torch_adapter::StageTimes> whole;  // [size]: every child as one stage
  for (std::size_t c = 0; c < model->size(); ++c) {
    TorchLayerProfile layer;
    layer.name = detail::concat(c, ":", detail::torch_adapter::short_name(model->ptr(c)->name()));
    for (const torch::Tensor& p : model->ptr(c)->parameters()) {
      if (std::find(seen.begin(), seen.end(), p.unsafeGetTensorImpl()) != seen.end()) continue;
      seen.push_back(p.unsafeGetTensorImpl());
      layer.param_bytes += static_cast<double>(p.numel() * static_cast<std::int64_t>(p.element_size()));
    }
    out.layers.push_back(std::move(layer));
  }
  for (std::int64_t rows : options.rows) {
    const torch::Tensor input = options.input(rows);
    if (!input.defined()) {
      bad(detail::concat("the input for ", rows, " rows is undefined"), "TorchProfileOptions::input",
          "Return one micro-batch's input tensor");
    }
    // What each child takes, the model's output last.
    std::vector<torch::Tensor> chain{input.detach().contiguous()};
    {
      const torch::NoGradGuard no_grad;
      for (std::size_t c = 0; c < model->size(); ++c) {
        const torch::Tensor y = (model->begin() + static_cast<std::ptrdiff_t>(c))->forward(chain.back());
        if (!y.defined() || !torch::isFloatingType(y.scalar_type())) {
          bad(detail::concat("child ", out.layers[c].name, " at ", rows, " rows returns ",
                             y.defined() ? c10::toString(y.scalar_type()) : "nothing"),
              "profile_sequential", "Profile children whose output is a floating-point tensor");
        }
        chain.push_back(y.detach().contiguous());
      }
    }
    // [c]: a stage of children c..end; [size]: nothing.
    const std::size_t n = model->size();
    std::vector<detail::torch_adapter::HeldBytes> held(n + 1);
    for (std::size_t c = 0; c < n; ++c) held[c] = detail::torch_adapter::held_by_stage(model, chain, c, n);
    for (std::size_t c = 0; c < n; ++c) {
      const torch::Tensor& y = chain[c + 1];
      TorchLayerSample sample;
      sample.rows = rows;
      // A stage holds what the stage after it holds and more (none of the cases known differ);
      // the planner's byte fields are >= 0 whatever a module does.
      sample.activation_bytes = std::max(0.0, held[c].forward - held[c + 1].forward);
      sample.weight_bytes = std::max(0.0, held[c].input_backward - held[c + 1].input_backward);
      if (c + 1 < n) {
        // Where a stage cut after this child holds more than its share (the term would be
        // negative: no model known), the field stays 0, as if no cut changed anything.
        const detail::torch_adapter::HeldBytes alone = detail::torch_adapter::held_by_stage(model, chain, c, c + 1);
        sample.boundary_bytes = std::clamp(sample.activation_bytes - alone.forward, 0.0, sample.activation_bytes);
        sample.boundary_weight_bytes = std::clamp(sample.weight_bytes - alone.input_backward, 0.0, sample.weight_bytes);
      }
      sample.output_bytes = static_cast<double>(y.numel() * static_cast<std::int64_t>(y.element_size()));
      // Timed as the adapter runs the child: a one-child stage over typed boundaries.
      const detail::torch_adapter::StageTimes t =
          detail::torch_adapter::time_stage(model, chain, c, c + 1, options.warmup, options.repetitions);
      sample.forward = t.forward;
      sample.backward = t.backward;
      sample.backward_input = t.backward_input;
      sample.backward_weight = t.backward_weight;
      out.layers[c].samples.push_back(sample);
    }
    // The whole model as one stage: what n one-child stages paid n times, it pays once.
    if (n > 1) whole.push_back(detail::torch_adapter::time_stage(model, chain, 0, n, options.warmup, options.repetitions));
    if (options.loss) {
      out.loss.push_back(detail::torch_adapter::time_loss(options, chain.back(), rows));
    }
  }
  if (!whole.empty()) out.call_overhead = detail::torch_adapter::take_off_call_overhead(out.layers, whole);
  for (std::size_t k = 0; k < out.loss.size(); ++k) {
    TorchLayerSample& last = out.layers.back().samples[k];
    for (profiling::TimeSpread* t : {&last.backward, &last.backward_input}) {
      t->median += out.loss[k].median;
      t->min += out.loss[k].min;
      t->max += out.loss[k].max;
    }
  }
  {
    const torch::NoGradGuard no_grad;
    const std::vector<torch::Tensor> now = model->buffers();
    for (std::size_t i = 0; i < now.size(); ++i) now[i].copy_(buffers[i]);
    const std::vector<torch::Tensor> params = model->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i];
  }
  return out;
}

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

// The stage type a program builds, spelled at the top; profiling, memory counting, tied
// parameters and the rest of the adapter are ppsched::libtorch:: (not ppsched::torch, which
// would hide libtorch's own ::torch inside namespace ppsched).
using libtorch::TorchStage;
using libtorch::TorchStageOptions;
}  // namespace ppsched
