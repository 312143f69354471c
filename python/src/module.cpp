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
      "validation, simulation, timelines and their writers, partitioning and the planner.";

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
  ppsched_py::bind_plan(m);
  ppsched_py::bind_profile(m);
}
