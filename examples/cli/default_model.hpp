// The model ppsched-plan plans when run with no model flag: a GPT-style decoder (token and
// position embedding, 32 identical transformer blocks, final norm + LM head + loss) at
// hidden size 4096, sequence length 2048, 32 heads, vocabulary 51200, micro-batch 1, bf16
// weights and activations, on devices doing 156 TFLOP/s of dense bf16 math (an A100's 312
// TFLOP/s peak at 50% utilisation). Every number comes from the arithmetic below, so the
// relative costs are those of a real model of this shape; docs/cli.md repeats it in words.
//
// Per block, forward FLOPs are 24·b·s·h² (the QKV, output and two MLP matrix products)
// plus 4·b·s²·h (attention scores and their product with the values). The backward pass
// costs twice the forward: the matrix products' backward splits evenly into the input
// gradient (BI) and the weight gradient (BW), while the attention products have no weights,
// so all 8·b·s²·h of their backward belongs to BI. A block keeps 34·s·b·h bytes of
// activations for its backward (Korthikanti et al., "Reducing Activation Recomputation in
// Large Transformer Models", 2022, with the s² attention matrix not stored, as with
// FlashAttention) and holds 12·h² + 13·h parameters.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ppsched/graph/layer_graph.hpp"

namespace ppsched::cli {

struct GptShape {
  double hidden = 4096;
  double sequence = 2048;
  double microbatch = 1;
  double vocabulary = 51200;
  std::size_t blocks = 32;
  double flops_per_ms = 156e12 / 1e3;  // sustained bf16 math per millisecond
  double bytes_per_value = 2;          // bf16
};

// The layers of the default model, times in milliseconds and sizes in bytes.
[[nodiscard]] inline std::vector<Layer> gpt_layers(const GptShape& g = {}) {
  const double b = g.microbatch, s = g.sequence, h = g.hidden, v = g.vocabulary;
  const double hidden_state_bytes = b * s * h * g.bytes_per_value;  // what flows between layers

  std::vector<Layer> layers;
  layers.reserve(g.blocks + 2);
  // Embedding: a gather (no math to speak of, bandwidth-bound) whose backward is a
  // scatter-add into the table; token ids have no gradient, so BI is zero. Large table.
  Layer embedding;
  embedding.name = "embedding";
  embedding.forward = 0.05;
  embedding.backward_input = 0.0;
  embedding.backward_weight = 0.10;
  embedding.param_bytes = (v + s) * h * g.bytes_per_value;  // token and position tables
  embedding.activation_bytes = b * s * 8;                   // the int64 token ids
  embedding.output_bytes = hidden_state_bytes;
  layers.push_back(embedding);

  const double matmul_flops = 24 * b * s * h * h;
  const double attention_flops = 4 * b * s * s * h;
  for (std::size_t i = 0; i < g.blocks; ++i) {
    Layer block;
    block.name = "block " + std::to_string(i);
    block.forward = (matmul_flops + attention_flops) / g.flops_per_ms;
    block.backward_input = (matmul_flops + 2 * attention_flops) / g.flops_per_ms;
    block.backward_weight = matmul_flops / g.flops_per_ms;
    block.param_bytes = (12 * h * h + 13 * h) * g.bytes_per_value;
    block.activation_bytes = 34 * s * b * h;
    block.output_bytes = hidden_state_bytes;
    layers.push_back(block);
  }

  // LM head: the 2·b·s·h·v logits product and its backward (input and weight halves),
  // plus softmax and cross-entropy over fp32 logits, memory-bound: about 0.85 ms forward
  // and 0.56 ms backward at 1.5 TB/s. It keeps its input and the fp32 logits; its output
  // is the scalar loss.
  const double logits_flops = 2 * b * s * h * v;
  Layer head;
  head.name = "lm head";
  head.forward = logits_flops / g.flops_per_ms + 0.85;
  head.backward_input = logits_flops / g.flops_per_ms + 0.56;
  head.backward_weight = logits_flops / g.flops_per_ms;
  head.param_bytes = (h * v + 2 * h) * g.bytes_per_value;  // untied output matrix and final norm
  head.activation_bytes = hidden_state_bytes + b * s * v * 4;
  head.output_bytes = 4;
  layers.push_back(head);
  return layers;
}

}  // namespace ppsched::cli
