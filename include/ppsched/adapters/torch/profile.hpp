// Profiling a Sequential's children into a ppsched Profile (profile_sequential). Part of
// <ppsched/adapters/torch.hpp>.
#pragma once

#include "ppsched/config.hpp"

#include <torch/autograd.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/adapters/torch/memory.hpp"
#include "ppsched/adapters/torch/stage.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/runtime/time_spread.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace libtorch {

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
  // micro-batch size from measurement rather than by scaling this one. Its fixed_costs.action is
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
  p.fixed_costs.action = (o.forward + o.backward + o.backward_input + o.backward_weight) / 4.0;
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

}  // namespace libtorch

}  // namespace ppsched
