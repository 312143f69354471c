// Variable-length sequences through a pipeline: token ids travel as int64 (exact at any
// vocabulary size), hidden states as float, each micro-batch carries its own length up to a
// declared maximum, and the per-token targets reach the last stage as a side input instead
// of travelling through every stage. Four stages on four CPU ranks, 1F1B, trained a few
// steps; then an evaluation pass with the forward-only schedule returns the losses and
// outputs. The model is a toy (an embedding, then a learned scale per stage); the shape of
// the glue is what carries over (docs/guide.md, "Typed, variable-length boundaries").
#include <ppsched/ppsched.hpp>
#include <ppsched/runtime.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  constexpr int ranks = 4, microbatches = 8;
  constexpr std::size_t max_tokens = 16, hidden = 4, vocabulary = 100'000;
  // Boundaries: stage 0 takes token ids; every later boundary carries hidden states.
  const std::vector<ppsched::TensorSpec> tokens{{ppsched::DType::i64, max_tokens}};
  const std::vector<ppsched::TensorSpec> states{{ppsched::DType::f32, max_tokens * hidden}};

  std::vector<float> scale(ranks, 0.5f);
  // What backward needs, per stage and micro-batch (inputs stay valid until then anyway:
  // docs/runtime.md, lifetimes; a copy keeps the example independent of that rule).
  std::vector<std::vector<std::vector<float>>> saved(ranks, std::vector<std::vector<float>>(microbatches));
  auto embed = [](std::int64_t token, std::size_t k) {
    return static_cast<float>((token * 7 + static_cast<std::int64_t>(k)) % 13) / 13.0f;
  };

  std::vector<ppsched::StageFunctions> stages(ranks);
  for (int s = 0; s < ranks; ++s) {
    ppsched::StageFunctions& f = stages[static_cast<std::size_t>(s)];
    f.input_tensors = s == 0 ? tokens : states;
    f.output_tensors = states;
    f.weight_grad_size = 1;
    f.forward = [&, s](const ppsched::StageContext& c, std::span<const float> in, std::span<float> out) {
      std::vector<float>& x = saved[static_cast<std::size_t>(s)][static_cast<std::size_t>(c.microbatch)];
      if (s == 0) {  // the embedding: one row of `hidden` values per token id
        const auto ids = ppsched::ConstPayload(in, tokens).tensor<std::int64_t>(0);
        x.assign(ids.size() * hidden, 0.0f);
        for (std::size_t t = 0; t < ids.size(); ++t) {
          for (std::size_t k = 0; k < hidden; ++k) x[t * hidden + k] = embed(ids[t], k);
        }
      } else {
        const auto h = ppsched::ConstPayload(in, states).tensor<float>(0);
        x.assign(h.begin(), h.end());
      }
      const auto y = ppsched::Payload(out, states).resize<float>(0, x.size());  // this micro-batch's length
      for (std::size_t i = 0; i < x.size(); ++i) y[i] = scale[static_cast<std::size_t>(s)] * x[i];
    };
    f.backward = [&, s](const ppsched::StageContext& c, std::span<const float>, std::span<const float> grad_out,
                        std::span<float> grad_in, std::span<float> weight_grad) {
      const std::vector<float>& x = saved[static_cast<std::size_t>(s)][static_cast<std::size_t>(c.microbatch)];
      const auto dy = ppsched::ConstPayload(grad_out, states).tensor<float>(0);
      float dw = 0.0f;
      for (std::size_t i = 0; i < dy.size(); ++i) dw += dy[i] * x[i];
      weight_grad[0] = dw;
      if (s == 0) return;  // the token ids get no gradient
      const auto dx = ppsched::Payload(grad_in, states).resize<float>(0, dy.size());
      for (std::size_t i = 0; i < dy.size(); ++i) dx[i] = scale[static_cast<std::size_t>(s)] * dy[i];
    };
    f.optimizer_step = [&, s](std::span<const float> dw) { scale[static_cast<std::size_t>(s)] -= 0.05f * dw[0]; };
  }
  // The loss reads each token's target from side input 0, listed so that the batch is
  // checked before every step.
  stages.back().side_inputs = {0};
  stages.back().loss = [&](const ppsched::StageContext& c, std::span<const float> out, std::span<const float>,
                           std::span<float> grad) {
    const auto y = ppsched::ConstPayload(out, states).tensor<float>(0);
    const auto target = c.side_input<float>(0);  // max_tokens per micro-batch; the first y.size() / hidden count
    const auto dy = ppsched::Payload(grad, states).resize<float>(0, y.size());
    float loss = 0.0f;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const float d = y[i] - target[i / hidden];
      loss += 0.5f * d * d;
      dy[i] = d / static_cast<float>(microbatches);
    }
    return loss;
  };

  // The batch: micro-batch k holds 3 + 13k mod 14 tokens, ids across the vocabulary.
  const std::size_t in_floats = ppsched::payload_floats(tokens);
  std::vector<float> inputs(in_floats * microbatches);
  std::vector<float> targets(max_tokens * microbatches, 0.0f);
  for (std::size_t mb = 0; mb < microbatches; ++mb) {
    const std::size_t length = 3 + 13 * mb % 14;
    const auto ids = ppsched::Payload(std::span<float>(inputs).subspan(mb * in_floats, in_floats), tokens)
                         .resize<std::int64_t>(0, length);
    for (std::size_t t = 0; t < length; ++t) {
      ids[t] = static_cast<std::int64_t>((mb * 7919 + t * 104'729) % vocabulary);
      targets[mb * max_tokens + t] = 0.25f;
    }
  }
  const ppsched::SideInput side[] = {ppsched::SideInput::of<float>(targets, max_tokens)};

  ppsched::CpuCluster cluster(ranks);
  std::vector<ppsched::CpuBackend*> backends;
  for (int r = 0; r < ranks; ++r) backends.push_back(&cluster.rank(r));
  ppsched::World<ppsched::CpuBackend> world(
      backends, ppsched::make_1f1b({.ranks = ranks, .microbatches = microbatches}), stages);
  for (int step = 0; step < 5; ++step) {
    const ppsched::StepResult& r = world.run_step({inputs, {}, side});
    std::printf("step %d: loss %.6f\n", step, r.mean_loss());
  }

  // Evaluation: the forward-only schedule returns the losses, and the outputs with keep_outputs.
  ppsched::ExecutorOptions eval_options;
  eval_options.keep_outputs = true;
  ppsched::World<ppsched::CpuBackend> eval(
      backends, ppsched::make_forward_only({.ranks = ranks, .microbatches = microbatches}), stages,
      eval_options);
  const ppsched::StepResult& r = eval.run_step({inputs, {}, side});
  const std::size_t out_floats = ppsched::payload_floats(states);
  for (std::size_t mb = 0; mb < microbatches; ++mb) {
    const auto y = ppsched::ConstPayload(std::span<const float>(r.outputs).subspan(mb * out_floats, out_floats), states)
                       .tensor<float>(0);
    std::printf("micro-batch %zu: %2zu tokens, loss %.6f\n", mb, y.size() / hidden, static_cast<double>(r.losses[mb]));
  }
  return 0;
}
