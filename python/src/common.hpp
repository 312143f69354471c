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
#include "ppsched/graph/time_unit.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/csv.hpp"

// A TimeUnit is a str in Python, both ways: read from a str (a scale such as "ms" or a unit of
// the model's own), written back as the text it was given. Every field and argument that was a
// str before TimeUnit stays one, so `timeline.unit = "ms"` and `costs.unit == "ms"` still read.
namespace pybind11::detail {
template <>
struct type_caster<ppsched::TimeUnit> {
  PYBIND11_TYPE_CASTER(ppsched::TimeUnit, const_name("str"));
  bool load(handle src, bool convert) {
    make_caster<std::string> text;
    if (!text.load(src, convert)) return false;
    value = ppsched::TimeUnit(cast_op<std::string&&>(std::move(text)));
    return true;
  }
  static handle cast(const ppsched::TimeUnit& unit, return_value_policy policy, handle parent) {
    return make_caster<std::string>::cast(unit.text(), policy, parent);
  }
};
}  // namespace pybind11::detail

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
