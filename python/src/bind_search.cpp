// The schedule search (plan/search/search.hpp): the fastest schedule for measured, uneven costs
// under a per-rank memory cap, with every candidate it considered and one line on why the
// winner won. The planner's entry from a profile (search_plan) is bound in bind_plan.cpp beside
// plan(); the result types here are shared with it and with plan_microbatches (bind_varlen.cpp).
#include "common.hpp"
#include "plan_options.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/plan/search/search.hpp"

namespace ppsched_py {
namespace {

namespace pp = ppsched;
namespace pl = ppsched::plan;
using pp::detail::concat;

constexpr double inf = std::numeric_limits<double>::infinity();

std::string candidate_repr(const pl::Candidate& c) {
  return concat("Candidate(name=", py::repr(py::str(c.name)).cast<std::string>(), ", makespan=", float_repr(c.makespan),
                ", timing='", pl::timing_name(c.timing), "', peak_microbatches=", float_repr(c.peak_microbatches),
                ", fits=", c.fits ? "True" : "False", c.built ? "" : ", built=False", ")");
}

}  // namespace

void bind_search(py::module_& m) {
  py::class_<pl::Candidate>(m, "Candidate",
                            "One schedule the search considered: how it was built, its makespan (simulated, exact,\n"
                            "or only the dependency bound: `timing` says which), its peak memory and whether it keeps\n"
                            "to the cap (`note` says why not, or why it was not built).")
      .def_readonly("name", &pl::Candidate::name)
      .def_property_readonly("kind", [](const pl::Candidate& c) { return std::string(pl::candidate_kind_name(c.kind)); },
                             "'fixed family', 'dualpipev', 'greedy' or 'v-block'")
      .def_property_readonly("family",
                             [](const pl::Candidate& c) -> std::optional<std::string> {
                               if (c.family == nullptr) return std::nullopt;
                               return std::string(c.family->name);
                             })
      .def_property_readonly("placement", [](const pl::Candidate& c) { return std::string(pp::placement_kind_name(c.placement)); })
      .def_readonly("chunks", &pl::Candidate::chunks)
      .def_readonly("built", &pl::Candidate::built)
      .def_property_readonly("timing", [](const pl::Candidate& c) { return std::string(pl::timing_name(c.timing)); },
                             "'simulated', 'exact' (free communication: the bound is the makespan) or 'bound'")
      .def_readonly("bound", &pl::Candidate::bound, "the dependency-only makespan, never above the simulated one")
      .def_readonly("makespan", &pl::Candidate::makespan)
      .def_readonly("bubble_fraction", &pl::Candidate::bubble_fraction)
      .def_readonly("span", &pl::Candidate::span)
      .def_readonly("peak_microbatches", &pl::Candidate::peak_microbatches, "max over ranks, in M_B")
      .def_readonly("peak_bytes", &pl::Candidate::peak_bytes, "max over ranks, activation bytes")
      .def_readonly("fits", &pl::Candidate::fits)
      .def_readonly("note", &pl::Candidate::note)
      .def_property_readonly("timed", &pl::Candidate::timed)
      .def("__repr__", &candidate_repr);

  py::class_<pl::SearchResult>(m, "SearchResult",
                               "The search's winner, compute-only (`schedule`) and lowered with its SEND/RECV\n"
                               "(`lowered`), its costs on the winner's placement, its simulation and validation; every\n"
                               "candidate, and `why` it won in one line.")
      .def_readonly("schedule", &pl::SearchResult::schedule)
      .def_readonly("lowered", &pl::SearchResult::lowered)
      .def_readonly("costs", &pl::SearchResult::costs)
      .def_readonly("simulation", &pl::SearchResult::simulation)
      .def_readonly("validation", &pl::SearchResult::validation)
      .def_readonly("candidates", &pl::SearchResult::candidates)
      .def_readonly("winner", &pl::SearchResult::winner, "index of the winner in candidates")
      .def_readonly("why", &pl::SearchResult::why)
      .def_property_readonly("makespan", [](const pl::SearchResult& r) { return r.simulation.makespan; },
                             "the winner's simulated makespan")
      .def_property_readonly("best", [](const pl::SearchResult& r) { return r.best(); }, "the winner's Candidate")
      .def_property_readonly(
          "best_family",
          [](const pl::SearchResult& r) -> std::optional<pl::Candidate> {
            if (const pl::Candidate* c = r.best_family()) return *c;
            return std::nullopt;
          },
          "the fastest fixed family that fits, or None")
      .def("__repr__", [](const pl::SearchResult& r) {
        return concat("SearchResult(schedule=", py::repr(py::str(r.schedule.name)).cast<std::string>(),
                      ", makespan=", float_repr(r.simulation.makespan), ", candidates=", r.candidates.size(), ")");
      });

  m.def(
      "search_schedule",
      [](std::int32_t ranks, std::int32_t microbatches, pp::CostModel costs, double memory_cap_microbatches,
         double activation_bytes_cap, std::vector<double> rank_activation_bytes,
         std::optional<std::vector<std::int32_t>> chunks, std::optional<bool> fixed_families, std::optional<bool> greedy,
         std::optional<bool> dualpipev, std::optional<bool> v_blocks, std::optional<bool> split_backward,
         std::optional<double> fb_overlap, std::optional<std::int32_t> max_simulations,
         std::optional<bool> comm_on_compute_stream, const std::string& objective, double makespan_bound) {
        pl::SearchOptions options =
            SearchKnobs{std::move(chunks), fixed_families, greedy, dualpipev, v_blocks, split_backward,
                        comm_on_compute_stream, fb_overlap, max_simulations}
                .applied_to({});
        options.objective = objective_of(objective, makespan_bound);
        pl::SearchProblem problem;
        problem.ranks = ranks;
        problem.microbatches = microbatches;
        problem.cap.microbatches = memory_cap_microbatches;
        problem.cap.activation_bytes = activation_bytes_cap;
        problem.cap.rank_activation_bytes = std::move(rank_activation_bytes);
        py::gil_scoped_release release;
        problem.costs = pl::evenly_split(std::move(costs), ranks, microbatches);
        return pl::search_schedule(problem, options);
      },
      py::kw_only(), py::arg("ranks"), py::arg("microbatches"), py::arg("costs"),
      py::arg("memory_cap_microbatches") = inf, py::arg("activation_bytes_cap") = inf,
      py::arg("rank_activation_bytes") = std::vector<double>{}, py::arg("chunks") = py::none(),
      py::arg("fixed_families") = py::none(), py::arg("greedy") = py::none(), py::arg("dualpipev") = py::none(),
      py::arg("v_blocks") = py::none(), py::arg("split_backward") = py::none(), py::arg("fb_overlap") = py::none(),
      py::arg("max_simulations") = py::none(), py::arg("comm_on_compute_stream") = py::none(),
      py::arg("objective") = "makespan", py::arg("makespan_bound") = inf,
      "Searches for the fastest schedule of `ranks` ranks and `microbatches` micro-batches that keeps to\n"
      "the memory caps: every fixed family, DualPipeV, the V building blocks and the greedy zero-bubble\n"
      "constructions on each placement, ranked by simulation. costs: the model cut one stage per rank\n"
      "(one StageCost per rank, one for all, or a per-micro-batch table); a placement with v stages per\n"
      "rank cuts each rank's share into v equal parts. Caps per rank: memory_cap_microbatches (M_B),\n"
      "activation_bytes_cap and rank_activation_bytes (stored activation bytes). The search's knobs\n"
      "(chunks: interleaving depths, default [1, 2, 4]; greedy, dualpipev, v_blocks, fixed_families,\n"
      "split_backward, fb_overlap, max_simulations, comm_on_compute_stream) keep the C++ defaults when\n"
      "None. objective: 'makespan', 'span' or 'memory' (within makespan_bound). Raises ppsched.Error for\n"
      "bad input and when no candidate keeps to the cap (the message gives the least memory needed).");
}

}  // namespace ppsched_py
