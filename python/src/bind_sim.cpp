// The hardware and cost vocabulary (Device, Interconnect, StageCost, CostModel), the simulator
// with its result, the Timeline (the same type predicted and measured), and the closed forms.
#include "common.hpp"

#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/sim/analytic.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched_py {
namespace {

namespace pp = ppsched;
using pp::detail::concat;

constexpr double inf = std::numeric_limits<double>::infinity();

std::string stage_cost_repr(const pp::StageCost& s) {
  std::string out = concat("StageCost(forward=", float_repr(s.forward), ", backward_input=", float_repr(s.backward_input),
                           ", backward_weight=", float_repr(s.backward_weight));
  if (s.backward) out += concat(", backward=", float_repr(*s.backward));
  if (s.activation_bytes != 0.0) out += concat(", activation_bytes=", float_repr(s.activation_bytes));
  if (s.output_bytes != 0.0) out += concat(", output_bytes=", float_repr(s.output_bytes));
  return out + ")";
}

std::string span_repr(const pp::Span& s) {
  return concat("Span(rank=", s.rank, ", stage=", s.action.stage, ", op='", op_text(s.action.op),
                "', microbatch=", s.action.microbatch, ", start=", float_repr(s.start), ", end=", float_repr(s.end),
                s.lane == pp::Lane::compute ? std::string() : concat(", lane='", pp::lane_name(s.lane), "'"), ")");
}

pp::Lane lane_from_text(const std::string& text) {
  for (const pp::Lane lane : {pp::Lane::compute, pp::Lane::comm, pp::Lane::copy})
    if (pp::lane_name(lane) == text) return lane;
  pp::detail::fail({"Span", concat("unknown lane '", text, "'"), "lane", "use 'compute', 'comm' or 'copy'"});
}

}  // namespace

void bind_sim(py::module_& m) {
  // ------------------------------------------------------------------ hardware
  py::class_<pp::Device>(m, "Device",
                         "One accelerator: its speed relative to the profiled one, and the bytes it may hold\n"
                         "(inf: no cap).")
      .def(py::init([](double speed, double memory_bytes) { return pp::Device{speed, memory_bytes}; }),
           py::kw_only(), py::arg("speed") = 1.0, py::arg("memory_bytes") = inf)
      .def_readwrite("speed", &pp::Device::speed)
      .def_readwrite("memory_bytes", &pp::Device::memory_bytes)
      .def("__eq__", [](const pp::Device& a, const pp::Device& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const pp::Device& d) {
        return concat("Device(speed=", float_repr(d.speed), ", memory_bytes=", float_repr(d.memory_bytes), ")");
      });

  py::class_<pp::Interconnect>(m, "Interconnect",
                               "A link: a transfer of n bytes takes latency + n / bandwidth (inf: free).")
      .def(py::init([](double latency, double bandwidth) { return pp::Interconnect{latency, bandwidth}; }),
           py::kw_only(), py::arg("latency") = 0.0, py::arg("bandwidth") = inf)
      .def_readwrite("latency", &pp::Interconnect::latency)
      .def_readwrite("bandwidth", &pp::Interconnect::bandwidth)
      .def("transfer_time", &pp::Interconnect::transfer_time, py::arg("bytes"))
      .def("__eq__", [](const pp::Interconnect& a, const pp::Interconnect& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const pp::Interconnect& l) {
        return concat("Interconnect(latency=", float_repr(l.latency), ", bandwidth=", float_repr(l.bandwidth), ")");
      });

  // ------------------------------------------------------------------ costs
  py::class_<pp::StageCost>(m, "StageCost",
                            "What one micro-batch costs on one stage: times of F, I (backward_input) and W\n"
                            "(backward_weight), B when it is not I + W, and the bytes it stores and sends.")
      .def(py::init([](double forward, double backward_input, double backward_weight, std::optional<double> backward,
                       double activation_bytes, double output_bytes, std::optional<double> recompute,
                       std::optional<double> recompute_saved_bytes, std::optional<double> offload_bytes,
                       std::optional<double> weight_memory_fraction) {
             pp::StageCost s;
             s.forward = forward;
             s.backward_input = backward_input;
             s.backward_weight = backward_weight;
             s.backward = backward;
             s.activation_bytes = activation_bytes;
             s.output_bytes = output_bytes;
             s.recompute = recompute;
             s.recompute_saved_bytes = recompute_saved_bytes;
             s.offload_bytes = offload_bytes;
             s.weight_memory_fraction = weight_memory_fraction;
             return s;
           }),
           py::kw_only(), py::arg("forward") = 1.0, py::arg("backward_input") = 1.0, py::arg("backward_weight") = 1.0,
           py::arg("backward") = py::none(), py::arg("activation_bytes") = 0.0, py::arg("output_bytes") = 0.0,
           py::arg("recompute") = py::none(), py::arg("recompute_saved_bytes") = py::none(),
           py::arg("offload_bytes") = py::none(), py::arg("weight_memory_fraction") = py::none())
      .def_readwrite("forward", &pp::StageCost::forward)
      .def_readwrite("backward_input", &pp::StageCost::backward_input)
      .def_readwrite("backward_weight", &pp::StageCost::backward_weight)
      .def_readwrite("backward", &pp::StageCost::backward)
      .def_readwrite("activation_bytes", &pp::StageCost::activation_bytes)
      .def_readwrite("output_bytes", &pp::StageCost::output_bytes)
      .def_readwrite("recompute", &pp::StageCost::recompute)
      .def_readwrite("recompute_saved_bytes", &pp::StageCost::recompute_saved_bytes)
      .def_readwrite("recompute_peak_bytes", &pp::StageCost::recompute_peak_bytes)
      .def_readwrite("offload_bytes", &pp::StageCost::offload_bytes)
      .def_readwrite("weight_memory_fraction", &pp::StageCost::weight_memory_fraction)
      .def("__eq__", [](const pp::StageCost& a, const pp::StageCost& b) { return a == b; }, py::is_operator())
      .def("__repr__", &stage_cost_repr);

  py::class_<pp::CostModel>(m, "CostModel",
                            "The simulator's costs: per stage (one StageCost per virtual stage, or one for all),\n"
                            "optionally scaled per micro-batch, the link between stages, and the runtime's fixed\n"
                            "costs per action, per transfer and per step. Times are in `unit`.")
      .def(py::init([](std::vector<pp::StageCost> stages, std::string unit, std::vector<double> microbatch_scale,
                       std::vector<pp::StageCost> per_microbatch, pp::Interconnect link, double weight_memory_fraction,
                       double fb_overlap, double action_overhead, double transfer_overhead, double step_overhead,
                       pp::Interconnect host_link, std::vector<double> concurrent_slowdown) {
             pp::CostModel c;
             c.stages = std::move(stages);
             c.unit = std::move(unit);
             c.microbatch_scale = std::move(microbatch_scale);
             c.per_microbatch = std::move(per_microbatch);
             c.link = link;
             c.weight_memory_fraction = weight_memory_fraction;
             c.fb_overlap = fb_overlap;
             c.fixed_costs = pp::FixedCosts{action_overhead, transfer_overhead, step_overhead, std::move(concurrent_slowdown)};
             c.host_link = host_link;
             return c;
           }),
           py::kw_only(), py::arg("stages"), py::arg("unit") = "unit",
           py::arg("microbatch_scale") = std::vector<double>{}, py::arg("per_microbatch") = std::vector<pp::StageCost>{},
           py::arg("link") = pp::Interconnect{}, py::arg("weight_memory_fraction") = 0.5, py::arg("fb_overlap") = 0.0,
           py::arg("action_overhead") = 0.0, py::arg("transfer_overhead") = 0.0, py::arg("step_overhead") = 0.0,
           py::arg("host_link") = pp::Interconnect{}, py::arg("concurrent_slowdown") = std::vector<double>{})
      .def_readwrite("unit", &pp::CostModel::unit)
      .def_readwrite("stages", &pp::CostModel::stages)
      .def_readwrite("microbatch_scale", &pp::CostModel::microbatch_scale)
      .def_readwrite("per_microbatch", &pp::CostModel::per_microbatch)
      .def_readwrite("link", &pp::CostModel::link)
      .def_readwrite("weight_memory_fraction", &pp::CostModel::weight_memory_fraction)
      .def_readwrite("fb_overlap", &pp::CostModel::fb_overlap)
      // CostModel::fixed_costs, under the names the profile JSON and Profile give them.
      .def_property(
          "action_overhead", [](const pp::CostModel& c) { return c.fixed_costs.action; },
          [](pp::CostModel& c, double v) { c.fixed_costs.action = v; })
      .def_property(
          "transfer_overhead", [](const pp::CostModel& c) { return c.fixed_costs.transfer; },
          [](pp::CostModel& c, double v) { c.fixed_costs.transfer = v; })
      .def_property(
          "step_overhead", [](const pp::CostModel& c) { return c.fixed_costs.step; },
          [](pp::CostModel& c, double v) { c.fixed_costs.step = v; })
      .def_readwrite("host_link", &pp::CostModel::host_link)
      .def_property(
          "concurrent_slowdown", [](const pp::CostModel& c) { return c.fixed_costs.concurrent_slowdown; },
          [](pp::CostModel& c, std::vector<double> v) { c.fixed_costs.concurrent_slowdown = std::move(v); })
      .def("check", &pp::check_cost_model, py::arg("stages"), py::arg("microbatches"),
           "Raises ppsched.Error, naming the field, unless the model fits a schedule of this size and\n"
           "holds only finite, non-negative values.")
      .def("__repr__", [](const pp::CostModel& c) {
        return concat("CostModel(unit=", py::repr(py::str(c.unit.text())).cast<std::string>(), ", stages=",
                      py::repr(py::cast(c.stages)).cast<std::string>(), ")");
      });

  m.def("uniform_costs", &pp::uniform_costs, py::arg("forward") = 1.0, py::arg("backward_input") = 1.0,
        py::arg("backward_weight") = 1.0, py::kw_only(), py::arg("unit") = "unit",
        "Every stage alike, communication free: the analytic set-up (B = backward_input + backward_weight).");

  // ------------------------------------------------------------------ timeline
  py::class_<pp::Span>(m, "Span", "When one action ran, on which rank and lane.")
      .def(py::init([](std::int32_t rank, std::int32_t stage, const std::string& op, std::int32_t microbatch,
                       double start, double end, const std::string& lane, std::uint32_t group) {
             return pp::Span{rank, pp::Action{op_from_text(op), stage, microbatch, group}, lane_from_text(lane), start,
                             end};
           }),
           py::kw_only(), py::arg("rank"), py::arg("stage"), py::arg("op"), py::arg("microbatch"), py::arg("start"),
           py::arg("end"), py::arg("lane") = "compute", py::arg("group") = 0)
      .def_readonly("rank", &pp::Span::rank)
      .def_property_readonly("stage", [](const pp::Span& s) { return s.action.stage; })
      .def_property_readonly("op", [](const pp::Span& s) { return op_text(s.action.op); })
      .def_property_readonly("microbatch", [](const pp::Span& s) { return s.action.microbatch; })
      .def_readonly("action", &pp::Span::action)
      .def_property_readonly("lane", [](const pp::Span& s) { return std::string(pp::lane_name(s.lane)); })
      .def_readonly("start", &pp::Span::start)
      .def_readonly("end", &pp::Span::end)
      .def_property_readonly("duration", [](const pp::Span& s) { return s.end - s.start; })
      .def("__eq__", [](const pp::Span& a, const pp::Span& b) { return a == b; }, py::is_operator())
      .def("__repr__", &span_repr);

  py::class_<pp::Timeline>(m, "Timeline",
                           "When each action ran: the simulator predicts one, a run measures one. Iterating\n"
                           "gives its spans; `spans` is a list (a copy).")
      .def(py::init([](std::int32_t ranks, std::vector<pp::Span> spans, std::string unit) {
             return pp::Timeline{ranks, std::move(unit), std::move(spans)};
           }),
           py::kw_only(), py::arg("ranks"), py::arg("spans"), py::arg("unit") = "unit")
      .def(py::init([](const pp::SimResult& r) { return r.timeline; }), py::arg("simulation"),
           "The timeline of a Simulation (so every writer takes a Simulation too).")
      .def_readwrite("ranks", &pp::Timeline::ranks)
      .def_readwrite("unit", &pp::Timeline::unit)
      .def_readwrite("spans", &pp::Timeline::spans)
      .def("__len__", [](const pp::Timeline& t) { return t.spans.size(); })
      .def("__getitem__",
           [](const pp::Timeline& t, std::ptrdiff_t i) {
             const auto n = static_cast<std::ptrdiff_t>(t.spans.size());
             if (i < 0) i += n;
             if (i < 0 || i >= n) throw py::index_error("timeline index out of range");
             return t.spans[static_cast<std::size_t>(i)];
           })
      .def("__iter__", [](const pp::Timeline& t) { return py::iter(py::cast(t.spans)); })
      .def("__eq__", [](const pp::Timeline& a, const pp::Timeline& b) { return a == b; }, py::is_operator())
      .def(
          "to_list",
          [](const pp::Timeline& t) {
            py::list out;
            for (const pp::Span& s : t.spans) {
              py::dict d;
              d["rank"] = s.rank;
              d["stage"] = s.action.stage;
              d["op"] = op_text(s.action.op);
              d["microbatch"] = s.action.microbatch;
              d["group"] = s.action.group;
              d["lane"] = std::string(pp::lane_name(s.lane));
              d["start"] = s.start;
              d["end"] = s.end;
              out.append(d);
            }
            return out;
          },
          "The spans as plain dicts (rank, stage, op, microbatch, group, lane, start, end), e.g. for pandas.")
      .def("__repr__", [](const pp::Timeline& t) {
        return concat("Timeline(ranks=", t.ranks, ", spans=", t.spans.size(),
                      ", unit=", py::repr(py::str(t.unit.text())).cast<std::string>(), ")");
      });

  // ------------------------------------------------------------------ simulation
  py::class_<pp::SimRankStats>(m, "SimRankStats", "One rank's figures in a simulation.")
      .def_readonly("first_start", &pp::SimRankStats::first_start)
      .def_readonly("last_end", &pp::SimRankStats::last_end)
      .def_readonly("span", &pp::SimRankStats::span, "last_end - first_start")
      .def_readonly("busy", &pp::SimRankStats::busy, "compute time")
      .def_readonly("input_wait", &pp::SimRankStats::input_wait, "compute idle while a remote input is on its way")
      .def_readonly("idle", &pp::SimRankStats::idle, "makespan - busy")
      .def_readonly("idle_in_span", &pp::SimRankStats::idle_in_span, "span - busy")
      .def("__repr__", [](const pp::SimRankStats& r) {
        return concat("SimRankStats(busy=", float_repr(r.busy), ", idle=", float_repr(r.idle),
                      ", span=", float_repr(r.span), ", input_wait=", float_repr(r.input_wait), ")");
      });

  py::class_<pp::MemorySample>(m, "MemorySample", "Activation memory of a rank just after a change.")
      .def_readonly("time", &pp::MemorySample::time)
      .def_readonly("activations", &pp::MemorySample::activations)
      .def_readonly("bytes", &pp::MemorySample::bytes)
      .def("__repr__", [](const pp::MemorySample& s) {
        return concat("MemorySample(time=", float_repr(s.time), ", activations=", float_repr(s.activations),
                      ", bytes=", float_repr(s.bytes), ")");
      });

  py::class_<pp::SimResult>(m, "Simulation",
                            "A simulated step: makespan, bubbles, per-rank figures, peak memory and the timeline.")
      .def_readonly("makespan", &pp::SimResult::makespan)
      .def_readonly("bubble_fraction", &pp::SimResult::bubble_fraction, "total idle / (ranks x makespan)")
      .def_property_readonly(
          "bubble_per_rank",
          [](const pp::SimResult& r) {
            std::vector<double> out;
            for (const pp::SimRankStats& s : r.ranks) out.push_back(r.makespan > 0.0 ? s.idle / r.makespan : 0.0);
            return out;
          },
          "per rank: idle / makespan")
      .def_readonly("ranks", &pp::SimResult::ranks, "per rank: SimRankStats")
      .def_readonly("ideal_time", &pp::SimResult::ideal_time, "busy time of the busiest rank")
      .def_readonly("bubble_vs_ideal", &pp::SimResult::bubble_vs_ideal, "(makespan - ideal_time) / ideal_time")
      .def_readonly("memory", &pp::SimResult::memory, "per rank: RankMemory (peak activations, bytes)")
      .def_property_readonly(
          "peak_memory",
          [](const pp::SimResult& r) {
            std::vector<double> out;
            for (const pp::RankMemory& mem : r.memory) out.push_back(mem.peak_microbatches);
            return out;
          },
          "per rank: peak stored activations in M_B (one micro-batch's activations of the rank's share)")
      .def_property_readonly(
          "peak_memory_bytes",
          [](const pp::SimResult& r) {
            std::vector<double> out;
            for (const pp::RankMemory& mem : r.memory) out.push_back(mem.peak_bytes);
            return out;
          },
          "per rank: peak activation bytes (0 unless the costs give activation_bytes)")
      .def_readonly("stage_peak_in_flight", &pp::SimResult::stage_peak_in_flight)
      .def_readonly("memory_over_time", &pp::SimResult::memory_over_time)
      .def_readonly("timed_peak", &pp::SimResult::timed_peak)
      .def_readonly("lowered_internally", &pp::SimResult::lowered_internally)
      .def_readonly("step_overhead", &pp::SimResult::step_overhead)
      .def_readonly("timeline", &pp::SimResult::timeline)
      .def("__repr__", [](const pp::SimResult& r) {
        return concat("Simulation(makespan=", float_repr(r.makespan), ", bubble_fraction=", float_repr(r.bubble_fraction),
                      ", ranks=", r.ranks.size(), ", spans=", r.timeline.spans.size(), ")");
      });

  m.def(
      "simulate",
      [](const pp::Schedule& s, const pp::CostModel* costs, bool comm_on_compute_stream, bool ideal_communication,
         bool record_timeline) {
        pp::SimOptions o;
        o.comm_on_compute_stream = comm_on_compute_stream;
        o.ideal_communication = ideal_communication;
        o.record_timeline = record_timeline;
        const pp::CostModel unit_costs = pp::uniform_costs(1.0, 1.0, 1.0);
        py::gil_scoped_release release;
        return pp::simulate(s, costs != nullptr ? *costs : unit_costs, o);
      },
      py::arg("schedule"), py::arg("costs") = py::none(), py::kw_only(), py::arg("comm_on_compute_stream") = false,
      py::arg("ideal_communication") = false, py::arg("record_timeline") = true,
      "Runs the schedule under the costs (None: uniform_costs(1, 1, 1)) with rendezvous communication and\n"
      "in-order streams, and predicts its timeline. A compute-only schedule is lowered first with these\n"
      "costs. Raises ppsched.Error for an invalid schedule, costs that do not fit it, or a deadlock.");

  // ------------------------------------------------------------------ closed forms
  py::class_<pp::AnalyticBubble>(m, "AnalyticBubble", "A family's closed-form idle time per rank, as the literature states it.")
      .def_readonly("family", &pp::AnalyticBubble::family)
      .def_readonly("formula", &pp::AnalyticBubble::formula)
      .def_readonly("measured_against", &pp::AnalyticBubble::measured_against, "'makespan' or 'span'")
      .def_readonly("idle_per_rank", &pp::AnalyticBubble::idle_per_rank)
      .def_readonly("holds", &pp::AnalyticBubble::holds)
      .def_readonly("condition", &pp::AnalyticBubble::condition)
      .def("__repr__", [](const pp::AnalyticBubble& a) {
        return concat("AnalyticBubble(family='", a.family, "', formula='", a.formula,
                      "', idle_per_rank=", float_repr(a.idle_per_rank), ", holds=", a.holds ? "True" : "False", ")");
      });
  m.def(
      "analytic_bubble",
      [](const std::string& family, std::int32_t ranks, std::int32_t microbatches, std::int32_t chunks, double forward,
         double backward_input, double backward_weight) {
        return pp::analytic_bubble(family, ranks, microbatches, chunks, forward, backward_input, backward_weight);
      },
      py::arg("family"), py::kw_only(), py::arg("ranks"), py::arg("microbatches"), py::arg("chunks") = 1,
      py::arg("forward") = 1.0, py::arg("backward_input") = 1.0, py::arg("backward_weight") = 1.0,
      "The family's closed-form idle time per rank; times are per rank (summed over its chunks).");
}

}  // namespace ppsched_py
