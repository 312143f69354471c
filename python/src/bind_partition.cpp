// The model as layers (Layer, LayerGraph, Profile) and the partitioner: balanced contiguous
// stages under device speeds, memory caps and communication costs.
#include "common.hpp"

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/partition/cost_model.hpp"
#include "ppsched/partition/partition.hpp"

namespace ppsched_py {
namespace {

namespace pp = ppsched;
using pp::detail::concat;

// A graph from what Python may pass: a LayerGraph, a Profile (its graph) or a list of Layers
// (a chain).
pp::LayerGraph graph_of(const py::object& model) {
  if (py::isinstance<pp::LayerGraph>(model)) return model.cast<pp::LayerGraph>();
  if (py::isinstance<pp::Profile>(model)) return model.cast<pp::Profile>().graph;
  if (py::isinstance<py::str>(model) || !py::isinstance<py::sequence>(model))
    throw py::type_error("partition: give a LayerGraph, a Profile or a list of Layer");
  return pp::LayerGraph(model.cast<std::vector<pp::Layer>>());
}

std::string partition_repr(const pp::Partition& p) {
  return concat("Partition(method='", p.method, "', stages=", p.stages.size(), ", boundaries=",
                py::repr(py::cast(p.boundaries)).cast<std::string>(), ", bottleneck=", float_repr(p.bottleneck),
                ", imbalance=", float_repr(p.imbalance), ")");
}

}  // namespace

void bind_partition(py::module_& m) {
  py::class_<pp::Layer>(m, "Layer",
                        "One layer's profiled costs for one micro-batch: times of forward, backward for the\n"
                        "input (I) and for the weights (W), the full backward when measured, and bytes.")
      .def(py::init([](std::string name, double forward, double backward_input, double backward_weight,
                       std::optional<double> backward, double param_bytes, double activation_bytes,
                       double output_bytes) {
             pp::Layer l;
             l.name = std::move(name);
             l.forward = forward;
             l.backward_input = backward_input;
             l.backward_weight = backward_weight;
             l.backward = backward;
             l.param_bytes = param_bytes;
             l.activation_bytes = activation_bytes;
             l.output_bytes = output_bytes;
             return l;
           }),
           py::kw_only(), py::arg("name") = "", py::arg("forward") = 0.0, py::arg("backward_input") = 0.0,
           py::arg("backward_weight") = 0.0, py::arg("backward") = py::none(), py::arg("param_bytes") = 0.0,
           py::arg("activation_bytes") = 0.0, py::arg("output_bytes") = 0.0)
      .def_readwrite("name", &pp::Layer::name)
      .def_readwrite("forward", &pp::Layer::forward)
      .def_readwrite("backward_input", &pp::Layer::backward_input)
      .def_readwrite("backward_weight", &pp::Layer::backward_weight)
      .def_readwrite("backward", &pp::Layer::backward)
      .def_readwrite("param_bytes", &pp::Layer::param_bytes)
      .def_readwrite("activation_bytes", &pp::Layer::activation_bytes)
      .def_readwrite("output_bytes", &pp::Layer::output_bytes)
      .def_readwrite("recompute_saves_bytes", &pp::Layer::recompute_saves_bytes)
      .def_readwrite("recompute_time", &pp::Layer::recompute_time)
      .def_readwrite("weight_bytes", &pp::Layer::weight_bytes)
      .def_readwrite("boundary_bytes", &pp::Layer::boundary_bytes)
      .def_readwrite("boundary_weight_bytes", &pp::Layer::boundary_weight_bytes)
      .def("__eq__", [](const pp::Layer& a, const pp::Layer& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const pp::Layer& l) {
        return concat("Layer(name=", py::repr(py::str(l.name)).cast<std::string>(), ", forward=", float_repr(l.forward),
                      ", backward_input=", float_repr(l.backward_input), ", backward_weight=",
                      float_repr(l.backward_weight), ", param_bytes=", float_repr(l.param_bytes),
                      ", activation_bytes=", float_repr(l.activation_bytes), ")");
      });

  py::class_<pp::LayerGraph>(m, "LayerGraph",
                             "Layers and the edges between them (a chain when edges are left out). Checked on\n"
                             "construction: a cycle, an edge out of range or a bad cost raises ppsched.Error.")
      .def(py::init([](std::vector<pp::Layer> layers, std::optional<std::vector<std::pair<std::size_t, std::size_t>>> edges) {
             if (!edges) return pp::LayerGraph(std::move(layers));
             std::vector<pp::Edge> list;
             for (const auto& [from, to] : *edges) list.push_back({from, to});
             return pp::LayerGraph(std::move(layers), std::move(list));
           }),
           py::arg("layers"), py::arg("edges") = py::none())
      .def_property_readonly("layers", &pp::LayerGraph::layers)
      .def_property_readonly("edges",
                             [](const pp::LayerGraph& g) {
                               std::vector<std::pair<std::size_t, std::size_t>> out;
                               for (const pp::Edge& e : g.edges()) out.emplace_back(e.from, e.to);
                               return out;
                             })
      .def_property_readonly("topological_order", &pp::LayerGraph::topological_order)
      .def_property_readonly("is_chain", &pp::LayerGraph::is_chain)
      .def("__len__", &pp::LayerGraph::size)
      .def("__eq__", [](const pp::LayerGraph& a, const pp::LayerGraph& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const pp::LayerGraph& g) {
        return concat("LayerGraph(layers=", g.size(), ", edges=", g.edges().size(), g.is_chain() ? ", chain" : "", ")");
      });

  py::class_<pp::Profile>(m, "Profile",
                          "What a profiler measured: the layer graph, the devices in pipeline order, the link, the\n"
                          "time unit and the runtime's fixed costs. load_profile() reads one from JSON.")
      .def(py::init([](pp::LayerGraph graph, std::vector<pp::Device> devices, pp::Interconnect link,
                       std::string time_unit, double rows) {
             pp::Profile p;
             p.graph = std::move(graph);
             p.devices = std::move(devices);
             p.link = link;
             p.time_unit = std::move(time_unit);
             p.rows = rows;
             return p;
           }),
           py::arg("graph"), py::kw_only(), py::arg("devices") = std::vector<pp::Device>{},
           py::arg("link") = pp::Interconnect{}, py::arg("time_unit") = "", py::arg("rows") = 0.0)
      .def_readwrite("graph", &pp::Profile::graph)
      .def_readwrite("devices", &pp::Profile::devices)
      .def_readwrite("link", &pp::Profile::link)
      .def_readwrite("time_unit", &pp::Profile::time_unit)
      .def_readwrite("rows", &pp::Profile::rows)
      // Profile::fixed_costs, under the profile JSON's names.
      .def_property(
          "action_overhead", [](const pp::Profile& p) { return p.fixed_costs.action; },
          [](pp::Profile& p, double v) { p.fixed_costs.action = v; })
      .def_property(
          "transfer_overhead", [](const pp::Profile& p) { return p.fixed_costs.transfer; },
          [](pp::Profile& p, double v) { p.fixed_costs.transfer = v; })
      .def_property(
          "step_overhead", [](const pp::Profile& p) { return p.fixed_costs.step; },
          [](pp::Profile& p, double v) { p.fixed_costs.step = v; })
      .def_property(
          "concurrent_slowdown", [](const pp::Profile& p) { return p.fixed_costs.concurrent_slowdown; },
          [](pp::Profile& p, std::vector<double> v) { p.fixed_costs.concurrent_slowdown = std::move(v); })
      .def_readwrite("first_stage_backward_in_bw", &pp::Profile::first_stage_backward_in_bw)
      .def_property_readonly("layers", [](const pp::Profile& p) { return p.graph.layers(); })
      .def("at_rows", &pp::profile_at_rows, py::arg("rows"), py::arg("reference_rows") = 0.0,
           "The profile priced at `rows` samples per micro-batch.")
      .def("__eq__", [](const pp::Profile& a, const pp::Profile& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const pp::Profile& p) {
        return concat("Profile(layers=", p.graph.size(), ", devices=", p.devices.size(),
                      ", time_unit=", py::repr(py::str(p.time_unit.text())).cast<std::string>(), ")");
      });

  py::class_<pp::PartitionStage>(m, "PartitionStage",
                                 "One stage of a cut: its layers (positions begin..end-1 of the order), its times\n"
                                 "(divided by its device's speed) and its bytes.")
      .def_readonly("rank", &pp::PartitionStage::rank)
      .def_readonly("begin", &pp::PartitionStage::begin)
      .def_readonly("end", &pp::PartitionStage::end)
      .def_readonly("first_layer_name", &pp::PartitionStage::first_layer_name)
      .def_readonly("last_layer_name", &pp::PartitionStage::last_layer_name)
      .def_readonly("speed", &pp::PartitionStage::speed)
      .def_readonly("forward", &pp::PartitionStage::forward)
      .def_readonly("backward_input", &pp::PartitionStage::backward_input)
      .def_readonly("backward_weight", &pp::PartitionStage::backward_weight)
      .def_readonly("backward", &pp::PartitionStage::backward)
      .def_readonly("compute_time", &pp::PartitionStage::compute_time)
      .def_readonly("recv_time", &pp::PartitionStage::recv_time)
      .def_readonly("send_time", &pp::PartitionStage::send_time)
      .def_readonly("recv_bytes", &pp::PartitionStage::recv_bytes)
      .def_readonly("send_bytes", &pp::PartitionStage::send_bytes)
      .def_readonly("time", &pp::PartitionStage::time)
      .def_readonly("param_bytes", &pp::PartitionStage::param_bytes)
      .def_readonly("static_bytes", &pp::PartitionStage::static_bytes)
      .def_readonly("activation_bytes", &pp::PartitionStage::activation_bytes)
      .def_readonly("in_flight", &pp::PartitionStage::in_flight)
      .def_readonly("peak_bytes", &pp::PartitionStage::peak_bytes)
      .def_readonly("memory_cap", &pp::PartitionStage::memory_cap)
      .def_property_readonly("size", &pp::PartitionStage::size)
      .def_property_readonly("fits_memory", &pp::PartitionStage::fits_memory)
      .def("__repr__", [](const pp::PartitionStage& s) {
        return concat("PartitionStage(rank=", s.rank, ", begin=", s.begin, ", end=", s.end,
                      ", time=", float_repr(s.time), ", peak_bytes=", float_repr(s.peak_bytes), ")");
      });

  py::class_<pp::Partition>(m, "Partition", "Layers cut into contiguous stages, each priced.")
      .def_readonly("method", &pp::Partition::method)
      .def_readonly("order", &pp::Partition::order, "order[position] = layer index")
      .def_readonly("boundaries", &pp::Partition::boundaries, "stages + 1 positions, from 0 to the layer count")
      .def_readonly("stages", &pp::Partition::stages)
      .def_readonly("bottleneck", &pp::Partition::bottleneck)
      .def_readonly("bottleneck_stage", &pp::Partition::bottleneck_stage)
      .def_readonly("mean_time", &pp::Partition::mean_time)
      .def_readonly("imbalance", &pp::Partition::imbalance)
      .def_property_readonly("fits_memory", &pp::Partition::fits_memory)
      .def("layers_of", &pp::Partition::layers_of, py::arg("stage"), "The layer indices of a stage, in order.")
      .def("__len__", [](const pp::Partition& p) { return p.stages.size(); })
      .def("__eq__", [](const pp::Partition& a, const pp::Partition& b) { return a == b; }, py::is_operator())
      .def("__str__", [](const pp::Partition& p) { return pp::to_string(p); })
      .def("__repr__", &partition_repr);

  m.def(
      "partition",
      [](const py::object& model, std::int32_t stages, const std::string& method,
         std::optional<std::vector<pp::Device>> devices, std::optional<pp::Interconnect> link,
         double optimizer_state_factor, std::vector<double> inflight, std::vector<std::size_t> order,
         std::optional<std::vector<std::size_t>> boundaries) {
        const pp::LayerGraph graph = graph_of(model);
        pp::PartitionCostModel cost;
        if (py::isinstance<pp::Profile>(model)) {
          const auto& profile = model.cast<const pp::Profile&>();
          cost.devices = profile.devices;
          cost.link = profile.link;
        }
        if (devices) cost.devices = std::move(*devices);
        if (link) cost.link = *link;
        cost.optimizer_state_factor = optimizer_state_factor;
        cost.inflight = std::move(inflight);
        py::gil_scoped_release release;
        if (boundaries || method == "given") {
          if (!boundaries)
            pp::detail::fail({"partition", "method 'given' needs the boundaries", "boundaries",
                      "pass boundaries=[0, ..., len(layers)]"});
          return pp::evaluate_partition(graph, *boundaries, cost, order);
        }
        if (method == "optimal") return pp::partition_optimal(graph, stages, cost, order);
        if (method == "uniform") return pp::partition_uniform(graph, stages, cost, order);
        if (method == "by-params" || method == "by_params" || method == "params")
          return pp::partition_by_params(graph, stages, cost, order);
        pp::detail::fail({"partition", concat("unknown method '", method, "'"), "method",
                  "use 'optimal', 'uniform', 'by-params' or 'given' (with boundaries)"});
      },
      py::arg("model"), py::kw_only(), py::arg("stages") = 0, py::arg("method") = "optimal",
      py::arg("devices") = py::none(), py::arg("link") = py::none(),
      py::arg("optimizer_state_factor") = pp::default_optimizer_state_factor,
      py::arg("inflight") = std::vector<double>{}, py::arg("order") = std::vector<std::size_t>{},
      py::arg("boundaries") = py::none(),
      "Cuts a model (a LayerGraph, a Profile, or a list of Layer as a chain) into `stages` contiguous\n"
      "stages. method: 'optimal' (the smallest bottleneck, exactly, under device speeds, memory caps\n"
      "and communication), 'uniform' (equal layer counts, as Megatron-LM), 'by-params' (balanced\n"
      "parameter bytes, as DeepSpeed), or 'given' with boundaries=[0, ..., n] to price a split.\n"
      "devices / link default to a Profile's own. inflight: micro-batches each stage keeps (1F1B's\n"
      "when empty). Raises ppsched.Error when no split fits the memory caps, saying what cap would.");

  m.def("inflight_1f1b", &pp::inflight_1f1b, py::arg("stages"), py::arg("microbatches") = std::numeric_limits<std::int32_t>::max(),
        "1F1B's in-flight counts per stage: min(stages - j, microbatches).");
  m.def("inflight_gpipe", &pp::inflight_gpipe, py::arg("stages"), py::arg("microbatches"),
        "GPipe's in-flight counts per stage: every micro-batch.");
}

}  // namespace ppsched_py
