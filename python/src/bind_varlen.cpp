// Variable-length batches (plan/varlen.hpp): costs fitted to sequence lengths, a batch split
// into micro-batches four ways, their per-micro-batch cost table, and a plan for the step.
// plan_microbatches returns the search's SearchResult (bind_search.cpp).
#include "common.hpp"
#include "plan_options.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/plan/varlen.hpp"

namespace ppsched_py {
namespace {

namespace pp = ppsched;
namespace pl = ppsched::plan;
using pp::detail::concat;

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr pl::SplitMethod split_methods[] = {pl::SplitMethod::padded, pl::SplitMethod::packed, pl::SplitMethod::bucketed,
                                             pl::SplitMethod::balanced};

// A SplitMethod or its name, as the rest of the package takes a method by name.
pl::SplitMethod split_method_of(const py::handle& h) {
  if (py::isinstance<pl::SplitMethod>(h)) return h.cast<pl::SplitMethod>();
  if (!py::isinstance<py::str>(h)) throw py::type_error("split_batch: method is a SplitMethod or its name");
  const auto name = h.cast<std::string>();
  for (const pl::SplitMethod s : split_methods)
    if (pl::split_method_name(s) == name) return s;
  pp::detail::fail({"split_batch", concat("unknown method '", name, "'"), "method",
            "use 'padded', 'packed', 'bucketed' or 'balanced' (or a SplitMethod)"});
}

// Micro-batches from a Split or a list of Microbatch.
std::vector<pl::Microbatch> microbatches_of(const py::handle& h) {
  if (py::isinstance<pl::Split>(h)) return h.cast<const pl::Split&>().microbatches;
  if (py::isinstance<py::str>(h) || !py::isinstance<py::sequence>(h))
    throw py::type_error("give a Split or a list of Microbatch");
  return h.cast<std::vector<pl::Microbatch>>();
}

pl::SplitOptions split_options(std::optional<std::int64_t> token_budget, double memory_cap_bytes, std::int32_t microbatches) {
  pl::SplitOptions o;
  o.token_budget = token_budget;
  o.cap.activation_bytes = memory_cap_bytes;
  o.microbatches = microbatches;
  return o;
}

std::string term_repr(const pl::TermFit& t) {
  return concat("TermFit(fixed=", float_repr(t.fixed), ", per_token=", float_repr(t.per_token),
                ", per_square=", float_repr(t.per_square), ", max_relative_residual=", float_repr(t.max_relative_residual),
                ")");
}

}  // namespace

void bind_varlen(py::module_& m) {
  py::class_<pl::MicrobatchShape>(m, "MicrobatchShape",
                                  "What a micro-batch computes: its tokens (padding included) and the sum of its\n"
                                  "sequences' squared lengths (attention looks within each sequence).")
      .def(py::init([](double tokens, double squares) { return pl::MicrobatchShape{tokens, squares}; }), py::kw_only(),
           py::arg("tokens") = 0.0, py::arg("squares") = 0.0)
      .def_readwrite("tokens", &pl::MicrobatchShape::tokens)
      .def_readwrite("squares", &pl::MicrobatchShape::squares)
      .def("__eq__", [](const pl::MicrobatchShape& a, const pl::MicrobatchShape& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const pl::MicrobatchShape& s) {
        return concat("MicrobatchShape(tokens=", float_repr(s.tokens), ", squares=", float_repr(s.squares), ")");
      });
  m.def(
      "shape_of",
      [](const std::vector<std::int64_t>& lengths, std::int64_t padded_length) { return pl::shape_of(lengths, padded_length); },
      py::arg("lengths"), py::kw_only(), py::arg("padded_length") = 0,
      "The shape of a micro-batch of these sequence lengths, each padded to padded_length when it is > 0.");

  py::class_<pl::LengthSample>(m, "LengthSample",
                               "One measured micro-batch: its sequences' lengths as run (a padded sequence at its\n"
                               "padded length) and what each stage cost on it.")
      .def(py::init([](std::vector<std::int64_t> lengths, std::vector<pp::StageCost> stages) {
             return pl::LengthSample{std::move(lengths), std::move(stages)};
           }),
           py::arg("lengths"), py::arg("stages"))
      .def_readwrite("lengths", &pl::LengthSample::lengths)
      .def_readwrite("stages", &pl::LengthSample::stages)
      .def("__repr__", [](const pl::LengthSample& s) {
        return concat("LengthSample(sequences=", s.lengths.size(), ", stages=", s.stages.size(), ")");
      });

  py::class_<pl::TermFit>(m, "TermFit",
                          "One fitted quantity, fixed + per_token x tokens + per_square x squares, with its largest\n"
                          "residual against the samples, absolute and relative.")
      .def_readonly("fixed", &pl::TermFit::fixed)
      .def_readonly("per_token", &pl::TermFit::per_token)
      .def_readonly("per_square", &pl::TermFit::per_square)
      .def_readonly("max_residual", &pl::TermFit::max_residual)
      .def_readonly("max_relative_residual", &pl::TermFit::max_relative_residual)
      .def("at", &pl::TermFit::at, py::arg("shape"), "The fitted value for a micro-batch of this shape (never below 0).")
      .def("__repr__", &term_repr);

  py::class_<pl::StageLengthFit>(m, "StageLengthFit", "One stage's fitted times and bytes.")
      .def_readonly("forward", &pl::StageLengthFit::forward)
      .def_readonly("backward_input", &pl::StageLengthFit::backward_input)
      .def_readonly("backward_weight", &pl::StageLengthFit::backward_weight)
      .def_readonly("backward", &pl::StageLengthFit::backward, "when every sample measured the full backward")
      .def_readonly("activation_bytes", &pl::StageLengthFit::activation_bytes)
      .def_readonly("output_bytes", &pl::StageLengthFit::output_bytes)
      .def("cost_at", &pl::stage_cost_at, py::arg("shape"), "The stage's StageCost on a micro-batch of this shape.")
      .def("__repr__", [](const pl::StageLengthFit& f) { return concat("StageLengthFit(forward=", term_repr(f.forward), ")"); });

  py::class_<pl::LengthCosts>(m, "LengthCosts", "Per stage, what a micro-batch of any shape costs (fit_length_costs).")
      .def_readonly("stages", &pl::LengthCosts::stages)
      .def_readonly("samples", &pl::LengthCosts::samples)
      .def_property_readonly("max_relative_residual", &pl::LengthCosts::max_relative_residual,
                             "the worst relative residual of every stage and quantity")
      .def("__repr__", [](const pl::LengthCosts& c) {
        return concat("LengthCosts(stages=", c.stages.size(), ", samples=", c.samples,
                      ", max_relative_residual=", float_repr(c.max_relative_residual()), ")");
      });

  m.def(
      "fit_length_costs", [](const std::vector<pl::LengthSample>& samples) { return pl::fit_length_costs(samples); },
      py::arg("samples"),
      "Fits every stage's times as fixed + per_token x tokens + per_square x sum(len^2), and its bytes as\n"
      "fixed + per_token x tokens, by least squares of the relative error. Raises ppsched.Error naming the\n"
      "sample or the term: points that cannot determine the terms (one token count; every sample at one\n"
      "sequence length) are refused rather than fitted arbitrarily.");
  m.def("length_samples", &pl::length_samples, py::arg("profile"), py::arg("sequence_length"),
        "The samples of a profile measured at several micro-batch sizes (its layers' points), every sequence\n"
        "sequence_length tokens long, one stage per layer. Give fit_length_costs the samples of two lengths or more.");

  py::enum_<pl::SplitMethod>(m, "SplitMethod", "How split_batch makes micro-batches (split_batch also takes the names).")
      .value("padded", pl::SplitMethod::padded, "arrival order, a fixed number of sequences each, padded to the longest")
      .value("packed", pl::SplitMethod::packed, "first-fit decreasing to a token count; no padding")
      .value("bucketed", pl::SplitMethod::bucketed, "sorted by length, padded within a micro-batch")
      .value("balanced", pl::SplitMethod::balanced, "packed, predicted costs balanced, cheap ones first and last");

  py::class_<pl::Microbatch>(m, "Microbatch", "One micro-batch of a split: its sequences (indices into the batch) and shape.")
      .def_readonly("sequences", &pl::Microbatch::sequences)
      .def_readonly("tokens", &pl::Microbatch::tokens, "real tokens (no padding)")
      .def_readonly("padded_length", &pl::Microbatch::padded_length, "every sequence runs at this length; 0: packed")
      .def_readonly("shape", &pl::Microbatch::shape)
      .def("__eq__", [](const pl::Microbatch& a, const pl::Microbatch& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const pl::Microbatch& mb) {
        return concat("Microbatch(sequences=", mb.sequences.size(), ", tokens=", mb.tokens, ", padded_length=", mb.padded_length,
                      ")");
      });

  py::class_<pl::Split>(m, "Split", "A batch split into micro-batches, in the order they run.")
      .def_readonly("method", &pl::Split::method)
      .def_readonly("microbatches", &pl::Split::microbatches)
      .def_readonly("token_limit", &pl::Split::token_limit, "tokens a micro-batch could hold (2**63-1: no limit)")
      .def_readonly("tokens", &pl::Split::tokens, "real tokens of the batch")
      .def_readonly("computed_tokens", &pl::Split::computed_tokens, "with padding")
      .def_property_readonly("padding_fraction", &pl::Split::padding_fraction)
      .def("__len__", [](const pl::Split& s) { return s.microbatches.size(); })
      .def("__repr__", [](const pl::Split& s) {
        return concat("Split(method='", pl::split_method_name(s.method), "', microbatches=", s.microbatches.size(),
                      ", padding_fraction=", float_repr(s.padding_fraction()), ")");
      });

  m.def(
      "token_limit",
      [](const pl::LengthCosts& costs, std::optional<std::int64_t> token_budget, double memory_cap_bytes) {
        return pl::token_limit(costs, split_options(token_budget, memory_cap_bytes, 0));
      },
      py::arg("costs"), py::kw_only(), py::arg("token_budget") = py::none(), py::arg("memory_cap_bytes") = inf,
      "The tokens a micro-batch may hold: the budget and, per stage s of S, what keeps its fitted\n"
      "activation bytes x (S - s) under the cap (2**63-1: no limit).");
  m.def(
      "split_batch",
      [](const std::vector<std::int64_t>& lengths, const pl::LengthCosts& costs, const py::object& method,
         std::optional<std::int64_t> token_budget, double memory_cap_bytes, std::int32_t microbatches) {
        const pl::SplitMethod how = split_method_of(method);
        const pl::SplitOptions o = split_options(token_budget, memory_cap_bytes, microbatches);
        py::gil_scoped_release release;
        return pl::split_batch(lengths, costs, how, o);
      },
      py::arg("lengths"), py::arg("costs"), py::arg("method") = "balanced", py::kw_only(),
      py::arg("token_budget") = py::none(), py::arg("memory_cap_bytes") = inf, py::arg("microbatches") = 0,
      "Splits a batch (its sequence lengths, in arrival order) into micro-batches: method 'padded',\n"
      "'packed', 'bucketed' or 'balanced' (or a SplitMethod). token_budget: tokens a micro-batch may\n"
      "compute, padding included; memory_cap_bytes: stored activation bytes per rank; microbatches: at\n"
      "most this many (0: as the limit gives). Raises ppsched.Error naming the input (an empty batch, a\n"
      "length < 1, a sequence longer than a micro-batch may hold, packing with no budget, cap or count).");
  m.def(
      "length_cost_model",
      [](const pl::LengthCosts& costs, const py::object& microbatches, std::optional<pp::CostModel> base) {
        return pl::length_cost_model(costs, microbatches_of(microbatches), base ? std::move(*base) : pp::CostModel{});
      },
      py::arg("costs"), py::arg("microbatches"), py::kw_only(), py::arg("base") = py::none(),
      "The CostModel of these micro-batches (a Split or a list of Microbatch) on the fit's stages: `base`\n"
      "(unit, link, fixed costs, ...) with its per_microbatch table filled, stage-major.");
  m.def(
      "plan_microbatches",
      [](const pl::LengthCosts& costs, const py::object& microbatches, std::optional<pp::CostModel> base,
         double memory_cap_bytes, std::optional<std::vector<std::int32_t>> chunks, std::optional<bool> fixed_families,
         std::optional<bool> greedy, std::optional<bool> dualpipev, std::optional<bool> v_blocks,
         std::optional<bool> split_backward, std::optional<double> fb_overlap, std::optional<std::int32_t> max_simulations,
         std::optional<bool> comm_on_compute_stream, const std::string& objective, double makespan_bound) {
        pl::StepPlanOptions o;
        if (base) o.base = std::move(*base);
        o.cap.activation_bytes = memory_cap_bytes;
        o.search = SearchKnobs{std::move(chunks), fixed_families, greedy, dualpipev, v_blocks, split_backward,
                               comm_on_compute_stream, fb_overlap, max_simulations}
                       .applied_to(o.search);
        o.search.objective = objective_of(objective, makespan_bound);
        const std::vector<pl::Microbatch> mbs = microbatches_of(microbatches);
        py::gil_scoped_release release;
        return pl::plan_microbatches(costs, mbs, o);
      },
      py::arg("costs"), py::arg("microbatches"), py::kw_only(), py::arg("base") = py::none(),
      py::arg("memory_cap_bytes") = inf, py::arg("chunks") = py::none(), py::arg("fixed_families") = py::none(),
      py::arg("greedy") = py::none(), py::arg("dualpipev") = py::none(), py::arg("v_blocks") = py::none(),
      py::arg("split_backward") = py::none(), py::arg("fb_overlap") = py::none(), py::arg("max_simulations") = py::none(),
      py::arg("comm_on_compute_stream") = py::none(), py::arg("objective") = "makespan",
      py::arg("makespan_bound") = inf,
      "The schedule for these micro-batches (a Split or a list of Microbatch), chosen by the schedule search\n"
      "over their own costs (length_cost_model; one stage per rank of the fit). Its defaults search less\n"
      "than search_schedule's, to plan a step within about a millisecond: chunks [1], no greedy, V blocks\n"
      "or DualPipeV (pass them to search more). memory_cap_bytes: stored activation bytes per rank.\n"
      "Returns a SearchResult; raises ppsched.Error as search_schedule does.");
}

}  // namespace ppsched_py
