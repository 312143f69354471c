// What the binding files of the extension module _ppsched share: the registration function
// each file defines, and the Python spelling of ppsched's names. The bindings add no logic to
// the library: each function converts its arguments, calls one C++ function and converts back.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/csv.hpp"

namespace ppsched_py {

namespace py = pybind11;

void bind_schedule(py::module_& m);
void bind_sim(py::module_& m);
void bind_trace(py::module_& m);
void bind_partition(py::module_& m);
void bind_plan(py::module_& m);
void bind_profile(py::module_& m);
void bind_search(py::module_& m);
void bind_frameworks(py::module_& m);
void bind_varlen(py::module_& m);

// PyTorch's spelling, as Action.op shows it: "I" and "W" for BI and BW, the C++ names otherwise.
inline std::string op_text(ppsched::Op op) { return std::string(ppsched::detail::pytorch_op_name(op)); }

// Either spelling of an operation (PyTorch's I and W, or ppsched's BI and BW); anything else
// is a ppsched.Error naming the valid ones.
inline ppsched::Op op_from_text(std::string_view text) {
  using ppsched::Op;
  if (text == "I") return Op::BI;
  if (text == "W") return Op::BW;
  for (int i = 0; i < ppsched::op_count; ++i) {
    const auto op = static_cast<Op>(i);
    if (ppsched::op_name(op) == text) return op;
  }
  ppsched::detail::fail({"Action", ppsched::detail::concat("unknown operation '", text, "'"), "op",
                 "use one of F, B, I (or BI), W (or BW), SEND_F, RECV_F, SEND_B, RECV_B, R, OFFLOAD, RELOAD"});
}

// repr() of a float as Python writes it, for the reprs of result types.
inline std::string float_repr(double x) { return py::repr(py::float_(x)).cast<std::string>(); }

}  // namespace ppsched_py
