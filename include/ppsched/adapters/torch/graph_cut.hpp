// The libtorch adapter's split backward: the cut of a micro-batch's autograd graph into the
// input gradient (BI) and the weight gradient (BW), each node run once. Part of
// <ppsched/adapters/torch.hpp>.
#pragma once

#include "ppsched/config.hpp"

#include <torch/autograd.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ppsched/adapters/torch/tensors.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail::torch_adapter {

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

}  // namespace ppsched
