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
//
// The adapter's parts, each a header of its own: adapters/torch/tensors.hpp (the boundary
// forms and options), graph_cut.hpp (the split backward), stage.hpp (TorchStage), memory.hpp
// (counting libtorch's allocations), profile.hpp (profiling a Sequential), tied.hpp (weights
// tied across stages). This header includes them all.
#pragma once

#include "ppsched/adapters/torch/graph_cut.hpp"
#include "ppsched/adapters/torch/memory.hpp"
#include "ppsched/adapters/torch/profile.hpp"
#include "ppsched/adapters/torch/stage.hpp"
#include "ppsched/adapters/torch/tensors.hpp"
#include "ppsched/adapters/torch/tied.hpp"
#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {
// The stage type a program builds, spelled at the top; profiling, memory counting, tied
// parameters and the rest of the adapter are ppsched::libtorch:: (not ppsched::torch, which
// would hide libtorch's own ::torch inside namespace ppsched).
using libtorch::TorchStage;
using libtorch::TorchStageOptions;
}  // namespace ppsched
