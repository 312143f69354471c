// The extension module _ppsched: the exception type, then each part's bindings (one file per
// part, so that they compile in parallel). ppsched/__init__.py re-exports all of it.
//
// The library is built in compiled mode (PPSCHED_COMPILED, from ppsched_compiled_dep): its heavy
// functions are compiled once in src/compiled.cpp and only declared here.
#include "common.hpp"

PYBIND11_MODULE(_ppsched, m) {
  namespace py = pybind11;
  m.doc() =
      "ppsched's C++ library, bound: schedule families, PyTorch's CSV and action strings, lowering, "
      "validation, simulation, timelines and their writers, partitioning, Megatron and torchtitan layouts, "
      "the planner, the schedule search and variable-length batches.";

  // ValueError's subclass: bad input is a value error in Python's terms, and code that catches
  // ValueError around a call keeps working. Every ppsched::error keeps its message.
  py::register_exception<ppsched::error>(m, "Error", PyExc_ValueError);
  m.attr("Error").attr("__doc__") =
      "A ppsched input was rejected: the message names the input, the place in it and the fix "
      "(the C++ library's ppsched::error).";

  ppsched_py::bind_schedule(m);
  ppsched_py::bind_sim(m);
  ppsched_py::bind_trace(m);
  ppsched_py::bind_partition(m);
  // The search's result types first: search_plan (bind_plan) and plan_microbatches (bind_varlen)
  // return them, and pybind11 names a type in a docstring only once it is registered.
  ppsched_py::bind_search(m);
  ppsched_py::bind_plan(m);
  ppsched_py::bind_profile(m);
  ppsched_py::bind_frameworks(m);
  ppsched_py::bind_varlen(m);
}
