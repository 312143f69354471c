// The glue between an existing model and ppsched: layers [first, last) of an mlp::Mlp as one
// pipeline stage. This is all the ppsched-specific code a user writes. It keeps, for every
// micro-batch in flight, what that micro-batch's backward needs — each layer's tanh output
// and, between backward_input and backward_weight, each layer's pre-activation gradient —
// because a pipeline runs several micro-batches' forwards before their backwards.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ppsched/runtime/stage.hpp>
#include <span>
#include <string>
#include <vector>

#include "mlp.hpp"

namespace mlp {

class MlpStage {
 public:
  MlpStage(Mlp& model, std::size_t first, std::size_t last, std::size_t rows, std::int32_t microbatches)
      : model_(model), first_(first), last_(last), rows_(rows) {
    std::size_t widest = 0;
    for (std::size_t l = first; l < last; ++l) {
      const Linear& layer = model.layers[l];
      offsets_.push_back(parameters_);
      parameters_ += layer.parameter_count();
      widest = std::max({widest, layer.in(), layer.out()});
    }
    scratch_.resize(rows * widest);
    const auto m = static_cast<std::size_t>(microbatches);
    outputs_.assign(m, std::vector<std::vector<float>>(last - first));
    grads_.assign(m, std::vector<std::vector<float>>(last - first));
    for (std::size_t mb = 0; mb < m; ++mb) {
      for (std::size_t l = first; l < last; ++l) {
        outputs_[mb][l - first].resize(rows * model.layers[l].out());
        grads_[mb][l - first].resize(rows * model.layers[l].out());
      }
    }
  }

  // The stage as ppsched sees it. `loss_scale` multiplies the squared error (e.g. 1 / batch
  // size); the last stage of the pipeline computes the loss.
  // example-begin mlp-stage-functions
  [[nodiscard]] ppsched::StageFunctions functions(bool last_stage, float loss_scale, float learning_rate) {
    ppsched::StageFunctions f;
    f.input_size = rows_ * model_.layers[first_].in();
    f.output_size = rows_ * model_.layers[last_ - 1].out();
    f.target_size = last_stage ? f.output_size : 0;
    f.weight_grad_size = parameters_;
    f.forward = [this](std::int32_t mb, std::span<const float> in, std::span<float> out) { forward(mb, in, out); };
    f.backward_input = [this](std::int32_t mb, std::span<const float>, std::span<const float> grad_out,
                              std::span<float> grad_in) { backward_input(mb, grad_out, grad_in); };
    f.backward_weight = [this](std::int32_t mb, std::span<const float> in, std::span<const float>,
                               std::span<float> weight_grad) { backward_weight(mb, in, weight_grad); };
    if (last_stage) {
      f.loss = [loss_scale](std::int32_t, std::span<const float> out, std::span<const float> target,
                            std::span<float> grad_out) {
        return MeanSquaredError::forward_backward(out, target, loss_scale, grad_out);
      };
    }
    f.optimizer_step = [this, learning_rate](std::span<const float> weight_grad) {
      for (std::size_t l = first_; l < last_; ++l) {
        Linear& layer = model_.layers[l];
        layer.step(weight_grad.subspan(offsets_[l - first_], layer.parameter_count()), learning_rate);
      }
    };
    return f;
  }
  // example-end mlp-stage-functions

  // Recomputation and offload (docs/runtime.md, "Recomputation and offload"): turns the
  // stage's callables into ones that honour StageContext::keep_activation and move a
  // micro-batch's saved tanh outputs to host and back. Dropping is modelled by poisoning the
  // saved outputs with NaN and marking them missing, so that a backward that would read what
  // its forward did not keep fails with an error rather than with a wrong gradient. With
  // `own_recompute` the stage gives its own recompute; otherwise the executor's default
  // (forward again, keeping) runs.
  void add_memory_actions(ppsched::StageFunctions& f, bool own_recompute) {
    kept_.assign(outputs_.size(), 1);
    f.forward = [this](const ppsched::StageContext& c, std::span<const float> in, std::span<float> out) {
      forward(c.microbatch, in, out);
      if (c.keep_activation) {
        kept_[static_cast<std::size_t>(c.microbatch)] = 1;
      } else {
        drop(c.microbatch);
      }
    };
    if (own_recompute) {
      recomputed_.resize(rows_ * model_.layers[last_ - 1].out());
      f.recompute = [this](const ppsched::StageContext& c, std::span<const float> in) {
        forward(c.microbatch, in, recomputed_);
        kept_[static_cast<std::size_t>(c.microbatch)] = 1;
      };
    }
    f.backward_input = [this, g = f.backward_input](const ppsched::StageContext& c, std::span<const float> in,
                                                    std::span<const float> grad_out, std::span<float> grad_in) {
      require_kept(c.microbatch, "backward_input");
      g(c, in, grad_out, grad_in);
    };
    f.offload_size = 0;
    for (const auto& y : outputs_.front()) f.offload_size += y.size();
    f.offload = [this](const ppsched::StageContext& c, std::span<float> host) {
      require_kept(c.microbatch, "offload");
      auto to = host.begin();
      for (const auto& y : outputs_[static_cast<std::size_t>(c.microbatch)]) to = std::copy(y.begin(), y.end(), to);
      drop(c.microbatch);
    };
    f.reload = [this](const ppsched::StageContext& c, std::span<const float> host) {
      auto from = host.begin();
      for (auto& y : outputs_[static_cast<std::size_t>(c.microbatch)]) {
        std::copy(from, from + static_cast<std::ptrdiff_t>(y.size()), y.begin());
        from += static_cast<std::ptrdiff_t>(y.size());
      }
      kept_[static_cast<std::size_t>(c.microbatch)] = 1;
    };
  }

  // Layer-wise recomputation (docs/plan.md, MemoryPolicy::layerwise): a forward told not to
  // keep its activation keeps each layer's input (the checkpoints) and drops the rest; the
  // backward recomputes one layer from its input, runs that layer's backward and drops its
  // output again, from the last layer to the first, so at most one layer's output is held
  // beside the checkpoints; R does nothing, the backward recomputes. The weight gradient reads
  // the layers' inputs from the checkpoints. The same arithmetic on the same inputs: gradients
  // are bit-identical to a forward that kept everything.
  void add_layerwise_recompute(ppsched::StageFunctions& f) {
    kept_.assign(outputs_.size(), 1);
    checkpoints_.assign(outputs_.size(), {});
    recompute_scratch_.resize(scratch_.size());
    f.forward = [this](const ppsched::StageContext& c, std::span<const float> in, std::span<float> out) {
      const auto mb = static_cast<std::size_t>(c.microbatch);
      forward(c.microbatch, in, out);
      if (c.keep_activation) {
        kept_[mb] = 1;
        checkpoints_[mb].clear();
        return;
      }
      // The inputs of layers first+1 .. last-1 (layer first's is the stage input, kept by the
      // executor and passed to the backward).
      checkpoints_[mb].assign(outputs_[mb].begin(), outputs_[mb].end() - 1);
      drop(c.microbatch);
    };
    f.recompute = [](const ppsched::StageContext&, std::span<const float>) {};
    f.backward_input = [this](const ppsched::StageContext& c, std::span<const float> in, std::span<const float> grad_out,
                              std::span<float> grad_in) {
      if (kept_[static_cast<std::size_t>(c.microbatch)] != 0) {
        backward_input(c.microbatch, grad_out, grad_in);
      } else {
        backward_input_layerwise(c.microbatch, in, grad_out, grad_in);
      }
    };
  }

  // Layer-wise recomputation with offloaded checkpoints (docs/plan.md,
  // MemoryPolicy::layerwise_offload): add_layerwise_recompute, and OFFLOAD / RELOAD move a
  // micro-batch's checkpoints — the layers' inputs its forward kept, not the dropped outputs —
  // to the host pool and back. Offloaded, they are poisoned with NaN and marked away, so that
  // a backward that runs before their RELOAD fails with an error rather than a wrong gradient.
  void add_layerwise_offload(ppsched::StageFunctions& f) {
    add_layerwise_recompute(f);
    away_.assign(outputs_.size(), 0);
    // R recomputes nothing itself (the backward does), but it is where the checkpoints must be
    // back: checking here names an R scheduled before its RELOAD.
    f.recompute = [this](const ppsched::StageContext& c, std::span<const float>) {
      require_checkpoints(c.microbatch, "recompute");
    };
    f.offload_size = 0;
    for (std::size_t l = first_; l + 1 < last_; ++l) f.offload_size += rows_ * model_.layers[l].out();
    f.offload = [this](const ppsched::StageContext& c, std::span<float> host) {
      const auto mb = static_cast<std::size_t>(c.microbatch);
      require_checkpoints(c.microbatch, "offload");
      auto to = host.begin();
      for (auto& x : checkpoints_[mb]) {
        to = std::copy(x.begin(), x.end(), to);
        std::fill(x.begin(), x.end(), std::nanf(""));
      }
      away_[mb] = 1;
    };
    f.reload = [this](const ppsched::StageContext& c, std::span<const float> host) {
      const auto mb = static_cast<std::size_t>(c.microbatch);
      auto from = host.begin();
      for (auto& x : checkpoints_[mb]) {
        std::copy(from, from + static_cast<std::ptrdiff_t>(x.size()), x.begin());
        from += static_cast<std::ptrdiff_t>(x.size());
      }
      away_[mb] = 0;
    };
    f.backward_weight = [this, g = f.backward_weight](const ppsched::StageContext& c, std::span<const float> in,
                                                      std::span<const float> grad_out, std::span<float> weight_grad) {
      require_checkpoints(c.microbatch, "backward_weight");
      g(c, in, grad_out, weight_grad);
    };
  }

  // The saved tanh output of layer `first + k` for micro-batch `mb`; throws when the forward
  // did not keep it (or it is offloaded) and nothing restored it.
  [[nodiscard]] std::span<const float> saved_output(std::int32_t mb, std::size_t k, const char* reader) const {
    require_kept(mb, reader);
    return outputs_[static_cast<std::size_t>(mb)][k];
  }

 private:
  Mlp& model_;
  std::size_t first_;
  std::size_t last_;
  std::size_t rows_;
  std::size_t parameters_ = 0;
  std::vector<std::size_t> offsets_;                      // of each layer in the weight gradient
  std::vector<float> scratch_;                            // one layer's pre-activation or input gradient
  std::vector<std::vector<std::vector<float>>> outputs_;  // [mb][layer]: tanh output
  std::vector<std::vector<std::vector<float>>> grads_;    // [mb][layer]: pre-activation gradient
  std::vector<char> kept_;                                // [mb]: saved outputs present (add_memory_actions)
  std::vector<float> recomputed_;                         // the output an own recompute discards
  std::vector<std::vector<std::vector<float>>> checkpoints_;  // [mb][k]: input of layer first+1+k (layer-wise)
  std::vector<float> recompute_scratch_;                  // a recomputed layer's pre-activation
  std::vector<char> away_;                                // [mb]: checkpoints offloaded, not yet reloaded

  void drop(std::int32_t mb) {
    for (auto& y : outputs_[static_cast<std::size_t>(mb)]) std::fill(y.begin(), y.end(), std::nanf(""));
    kept_[static_cast<std::size_t>(mb)] = 0;
  }
  [[nodiscard]] std::string layer_range() const {
    return "layers " + std::to_string(first_) + ".." + std::to_string(last_ - 1);
  }
  void require_kept(std::int32_t mb, const char* reader) const {
    if (kept_.empty() || kept_[static_cast<std::size_t>(mb)] != 0) return;
    throw ppsched::error({"MlpStage",
                          std::string(reader) + " reads micro-batch " + std::to_string(mb) +
                              "'s saved activations, which its forward did not keep",
                          layer_range(), "Recompute (R) or reload (RELOAD) the micro-batch before its backward"});
  }

  void require_checkpoints(std::int32_t mb, const char* reader) const {
    if (away_.empty() || away_[static_cast<std::size_t>(mb)] == 0) return;
    throw ppsched::error({"MlpStage",
                          std::string(reader) + " reads micro-batch " + std::to_string(mb) +
                              "'s checkpoints, which OFFLOAD moved to host",
                          layer_range(), "Reload (RELOAD) the micro-batch before its recompute and backward"});
  }

  [[nodiscard]] std::span<float> scratch(std::size_t floats) { return std::span<float>(scratch_).first(floats); }

  // example-begin mlp-stage-passes
  void forward(std::int32_t mb, std::span<const float> in, std::span<float> out) {
    std::span<const float> x = in;
    for (std::size_t l = first_; l < last_; ++l) {
      const Linear& layer = model_.layers[l];
      std::span<float> z = scratch(rows_ * layer.out());
      layer.forward(x, z);
      std::vector<float>& y = outputs_[static_cast<std::size_t>(mb)][l - first_];
      Tanh::forward(z, y);
      x = y;
    }
    std::copy(x.begin(), x.end(), out.begin());
  }

  void backward_input(std::int32_t mb, std::span<const float> grad_out, std::span<float> grad_in) {
    std::span<const float> g = grad_out;
    for (std::size_t l = last_; l-- > first_;) {
      const Linear& layer = model_.layers[l];
      std::vector<float>& dz = grads_[static_cast<std::size_t>(mb)][l - first_];
      Tanh::backward(outputs_[static_cast<std::size_t>(mb)][l - first_], g, dz);
      if (l > first_) {
        std::span<float> dx = scratch(rows_ * layer.in());
        layer.backward_input(dz, dx);
        g = dx;
      } else if (!grad_in.empty()) {  // stage 0 has no input gradient to send
        layer.backward_input(dz, grad_in);
      }
    }
  }

  void backward_weight(std::int32_t mb, std::span<const float> in, std::span<float> weight_grad) {
    const auto m = static_cast<std::size_t>(mb);
    // Layer-wise, the layers' inputs are the checkpoints (their outputs were dropped again).
    const auto& inputs = !checkpoints_.empty() && !checkpoints_[m].empty() ? checkpoints_[m] : outputs_[m];
    for (std::size_t l = first_; l < last_; ++l) {
      const Linear& layer = model_.layers[l];
      const std::span<const float> x = l == first_ ? in : std::span<const float>(inputs[l - 1 - first_]);
      layer.backward_weight(x, grads_[static_cast<std::size_t>(mb)][l - first_],
                            weight_grad.subspan(offsets_[l - first_], layer.parameter_count()));
    }
  }
  // example-end mlp-stage-passes

  // backward_input with each layer's output recomputed from its input right before its own
  // backward, and dropped after it.
  void backward_input_layerwise(std::int32_t mb, std::span<const float> in, std::span<const float> grad_out,
                                std::span<float> grad_in) {
    const auto m = static_cast<std::size_t>(mb);
    require_checkpoints(mb, "backward_input");
    std::span<const float> g = grad_out;
    for (std::size_t l = last_; l-- > first_;) {
      const Linear& layer = model_.layers[l];
      std::vector<float>& y = outputs_[m][l - first_];
      const std::span<const float> x = l == first_ ? in : std::span<const float>(checkpoints_[m][l - 1 - first_]);
      const std::span<float> z = std::span<float>(recompute_scratch_).first(rows_ * layer.out());
      layer.forward(x, z);
      Tanh::forward(z, y);
      std::vector<float>& dz = grads_[m][l - first_];
      Tanh::backward(y, g, dz);
      std::fill(y.begin(), y.end(), std::nanf(""));  // freed: the next layer down needs only dz
      if (l > first_) {
        std::span<float> dx = scratch(rows_ * layer.in());
        layer.backward_input(dz, dx);
        g = dx;
      } else if (!grad_in.empty()) {
        layer.backward_input(dz, grad_in);
      }
    }
  }
};

// Training without a pipeline: every micro-batch through the whole model in order, its
// gradient computed on its own and added to the step's total in micro-batch order — the
// usual gradient accumulation — then one SGD step. Returns each micro-batch's loss; fills
// `gradient` (all layers' gradients, layer after layer) when given.
inline std::vector<float> train_step_unpipelined(Mlp& model, std::span<const float> inputs,
                                                 std::span<const float> targets, std::size_t rows,
                                                 std::int32_t microbatches, float loss_scale, float learning_rate,
                                                 std::vector<float>* gradient = nullptr) {
  const std::size_t layers = model.layers.size();
  std::vector<std::size_t> offset(layers + 1, 0);
  std::size_t widest = 0;
  for (std::size_t l = 0; l < layers; ++l) {
    offset[l + 1] = offset[l] + model.layers[l].parameter_count();
    widest = std::max({widest, model.layers[l].in(), model.layers[l].out()});
  }
  std::vector<float> total(offset[layers], 0.0f);
  std::vector<float> part(offset[layers]);
  std::vector<std::vector<float>> y(layers);
  std::vector<float> z(rows * widest), dz(rows * widest), g(rows * widest), dx(rows * widest);
  std::vector<float> losses;
  const std::size_t in_size = rows * model.layers.front().in();
  const std::size_t out_size = rows * model.layers.back().out();
  for (std::int32_t mb = 0; mb < microbatches; ++mb) {
    std::span<const float> x = inputs.subspan(static_cast<std::size_t>(mb) * in_size, in_size);
    for (std::size_t l = 0; l < layers; ++l) {
      const Linear& layer = model.layers[l];
      y[l].resize(rows * layer.out());
      layer.forward(x, std::span<float>(z).first(rows * layer.out()));
      Tanh::forward(std::span<const float>(z).first(rows * layer.out()), y[l]);
      x = y[l];
    }
    losses.push_back(
        MeanSquaredError::forward_backward(y.back(), targets.subspan(static_cast<std::size_t>(mb) * out_size, out_size),
                                           loss_scale, std::span<float>(g).first(out_size)));
    for (std::size_t l = layers; l-- > 0;) {
      const Linear& layer = model.layers[l];
      const std::size_t n = rows * layer.out();
      Tanh::backward(y[l], std::span<const float>(g).first(n), std::span<float>(dz).first(n));
      const std::span<const float> layer_input =
          l == 0 ? inputs.subspan(static_cast<std::size_t>(mb) * in_size, in_size) : std::span<const float>(y[l - 1]);
      layer.backward_weight(layer_input, std::span<const float>(dz).first(n),
                            std::span<float>(part).subspan(offset[l], layer.parameter_count()));
      if (l > 0) {
        layer.backward_input(std::span<const float>(dz).first(n), std::span<float>(dx).first(rows * layer.in()));
        std::swap(g, dx);
      }
    }
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += part[i];
  }
  for (std::size_t l = 0; l < layers; ++l) {
    model.layers[l].step(std::span<const float>(total).subspan(offset[l], model.layers[l].parameter_count()),
                         learning_rate);
  }
  if (gradient != nullptr) *gradient = total;
  return losses;
}

}  // namespace mlp
