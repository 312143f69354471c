// A cut as other frameworks take it (partition/frameworks.hpp): Megatron-LM's
// --pipeline-model-parallel-layout string and torchtitan's per-stage module lists, both ways.
// The names keep their C++ spelling at the top level of the package, each naming its framework
// (parse_megatron_layout, torchtitan_boundaries, ...), as the rest of the package is flat.
#include "common.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/partition/frameworks.hpp"
#include "ppsched/partition/partition.hpp"

namespace ppsched_py {
namespace {

namespace pp = ppsched;
namespace fw = ppsched::frameworks;
using fw::LayerKind;
using pp::detail::concat;

// A kind from a LayerKind or its letter ("E", "t", "m", "L"), so that Python may write a stage
// as the letters Megatron writes.
LayerKind kind_of(const py::handle& h) {
  if (py::isinstance<LayerKind>(h)) return h.cast<LayerKind>();
  if (py::isinstance<py::str>(h)) {
    const auto text = h.cast<std::string>();
    for (const LayerKind k : {LayerKind::embedding, LayerKind::transformer, LayerKind::mtp, LayerKind::loss}) {
      if (text.size() == 1 && text[0] == fw::megatron_letter(k)) return k;
    }
    pp::detail::fail({"layer kind", concat("'", text, "' is not a kind"), "",
              "use a LayerKind or its letter: E (embedding), t (transformer), m (MTP), L (loss); case-sensitive"});
  }
  throw py::type_error("a layer kind is a LayerKind or one of the letters 'E', 't', 'm', 'L'");
}

// Kinds from a sequence of LayerKind / letters, or one string of letters ("Ettt").
std::vector<LayerKind> kinds_of(const py::handle& h) {
  std::vector<LayerKind> out;
  if (py::isinstance<py::str>(h)) {
    for (const char c : h.cast<std::string>()) out.push_back(kind_of(py::str(std::string(1, c))));
    return out;
  }
  if (!py::isinstance<py::sequence>(h)) throw py::type_error("give the kinds as a list of LayerKind or a string of letters");
  for (const py::handle item : h.cast<py::sequence>()) out.push_back(kind_of(item));
  return out;
}

std::string letters_of(const std::vector<LayerKind>& stage) {
  std::string s;
  for (const LayerKind k : stage) s += fw::megatron_letter(k);
  return s;
}

// A graph from a LayerGraph, a Profile (its graph) or a list of Layers (a chain), as partition() takes it.
pp::LayerGraph graph_of(const py::object& model) {
  if (py::isinstance<pp::LayerGraph>(model)) return model.cast<pp::LayerGraph>();
  if (py::isinstance<pp::Profile>(model)) return model.cast<pp::Profile>().graph;
  if (py::isinstance<py::str>(model) || !py::isinstance<py::sequence>(model))
    throw py::type_error("give a LayerGraph, a Profile or a list of Layer");
  return pp::LayerGraph(model.cast<std::vector<pp::Layer>>());
}

std::vector<std::vector<std::string>> name_lists(const py::object& lists) {
  if (lists.is_none()) return {};
  if (py::isinstance<py::str>(lists)) throw py::type_error("give a list of lists of module names");
  return lists.cast<std::vector<std::vector<std::string>>>();
}

std::string layout_repr(const fw::StageLayout& l) {
  // The canonical string where there is one; an empty layout (or one that is all empty stages)
  // has none, so its stages are shown as letters.
  std::string text;
  try {
    text = py::repr(py::str(fw::to_megatron_layout(l))).cast<std::string>();
  } catch (const pp::error&) {
    std::vector<std::string> stages;
    for (const auto& st : l.stages) stages.push_back(letters_of(st));
    text = py::repr(py::cast(stages)).cast<std::string>();
  }
  return concat("StageLayout(", text, ", ranks=", l.ranks, ", stages=", l.stage_count(), ")");
}

}  // namespace

void bind_frameworks(py::module_& m) {
  py::enum_<LayerKind>(m, "LayerKind", "What a layer is to Megatron: its letter in a layout (LayerKind.x.letter).")
      .value("embedding", LayerKind::embedding, "E")
      .value("transformer", LayerKind::transformer, "t (a decoder layer)")
      .value("mtp", LayerKind::mtp, "m (a multi-token-prediction layer)")
      .value("loss", LayerKind::loss, "L (the output and loss, with the final norm)")
      .def_property_readonly("letter", [](LayerKind k) { return std::string(1, fw::megatron_letter(k)); });

  py::class_<fw::StageLayout>(m, "StageLayout",
                              "A model cut into stages, each the kinds of its layers in order, stages in global order\n"
                              "(Megatron's string order). Stage s runs on rank s % ranks as its virtual stage\n"
                              "s // ranks. Stages may be empty. str() is Megatron's layout string.")
      .def(py::init([](const py::sequence& stages, std::int32_t ranks) {
             fw::StageLayout l;
             for (const py::handle st : stages) l.stages.push_back(kinds_of(st));
             l.ranks = ranks == 0 ? l.stage_count() : ranks;
             return l;
           }),
           py::arg("stages"), py::kw_only(), py::arg("ranks") = 0,
           "stages: per stage a list of LayerKind or a string of letters (\"Ettt\", \"\", \"L\"); ranks: the\n"
           "pipeline size, 0 for one stage per rank. Not checked here: check_megatron_layout does.")
      .def_property_readonly("stages", [](const fw::StageLayout& l) { return l.stages; })
      .def_property_readonly("letters",
                             [](const fw::StageLayout& l) {
                               std::vector<std::string> out;
                               for (const auto& st : l.stages) out.push_back(letters_of(st));
                               return out;
                             },
                             "each stage's letters, e.g. ['Ettt', 'tt', ..., 'L']")
      .def_readonly("ranks", &fw::StageLayout::ranks)
      .def_property_readonly("stage_count", &fw::StageLayout::stage_count)
      .def_property_readonly("virtual_stages", &fw::StageLayout::virtual_stages, "stages per rank (Megatron's VPP size)")
      .def("rank_of", &fw::StageLayout::rank_of, py::arg("stage"))
      .def("virtual_stage_of", &fw::StageLayout::virtual_stage_of, py::arg("stage"))
      .def("stage_at", &fw::StageLayout::stage_at, py::arg("rank"), py::arg("virtual_stage"),
           "the stage that `rank` holds as its virtual stage `virtual_stage`")
      .def(
          "count",
          [](const fw::StageLayout& l, const py::object& kind, std::optional<std::int32_t> stage) {
            const LayerKind k = kind_of(kind);
            if (!stage) return l.count(k);
            if (*stage < 0 || *stage >= l.stage_count())
              pp::detail::fail({"StageLayout.count", concat("stage ", *stage, " is outside 0..", l.stage_count() - 1), "stage",
                        "give a stage of the layout"});
            return l.count(*stage, k);
          },
          py::arg("kind"), py::arg("stage") = py::none(),
          "Layers of `kind` in one stage (Megatron's get_num_layers_to_build), or in the whole layout.")
      .def(
          "offset",
          [](const fw::StageLayout& l, std::int32_t stage, const py::object& kind) {
            if (stage < 0 || stage > l.stage_count())
              pp::detail::fail({"StageLayout.offset", concat("stage ", stage, " is outside 0..", l.stage_count()), "stage",
                        "give a stage of the layout"});
            return l.offset(stage, kind_of(kind));
          },
          py::arg("stage"), py::arg("kind"),
          "Layers of `kind` before `stage` (Megatron's get_layer_offset: its first decoder is layers.<offset>).")
      .def("__len__", [](const fw::StageLayout& l) { return l.stages.size(); })
      .def("__eq__", [](const fw::StageLayout& a, const fw::StageLayout& b) { return a == b; }, py::is_operator())
      .def("__str__", [](const fw::StageLayout& l) { return fw::to_megatron_layout(l); })
      .def("__repr__", &layout_repr);

  m.def("to_megatron_layout", &fw::to_megatron_layout, py::arg("layout"),
        "Megatron's --pipeline-model-parallel-layout string for a layout, canonical: x*n for a run of three\n"
        "or more, (S|)*k for equal consecutive stages where shorter. Megatron's example of 32 stages on 16\n"
        "ranks is written \"Et*3|(tt|)*29,m|L\" exactly.");
  m.def(
      "parse_megatron_layout", [](const std::string& text, std::int32_t ranks) { return fw::parse_megatron_layout(text, ranks); },
      py::arg("text"), py::kw_only(), py::arg("ranks") = 0,
      "Reads a Megatron layout string (E t m L, '|' between stages, x*n and (...)*n, commas ignored, empty\n"
      "stages allowed). ranks: --pipeline-model-parallel-size, the stage count a multiple of it; 0: one\n"
      "stage per rank. Syntax only (check_megatron_layout checks Megatron's rules). Raises ppsched.Error\n"
      "naming the character where the text goes wrong.");
  m.def(
      "check_megatron_layout",
      [](const fw::StageLayout& l, std::optional<std::size_t> transformer_layers, std::optional<std::size_t> mtp_layers) {
        fw::check_megatron_layout(l, transformer_layers, mtp_layers);
      },
      py::arg("layout"), py::kw_only(), py::arg("transformer_layers") = py::none(), py::arg("mtp_layers") = py::none(),
      "Raises ppsched.Error, naming the rule and the stage, where Megatron would refuse the layout: E first\n"
      "and once, L last, every t before every m, m only in its rank's last virtual stage; and, when given,\n"
      "the counts of t (--num-layers) and m (--mtp-num-layers).");
  m.def("layer_kind", [](const std::string& name) { return fw::layer_kind(name); }, py::arg("name"),
        "The kind a layer's name suggests (embed/wte/wpe: E; loss, lm_head, output, head, final norms: L;\n"
        "mtp: m; anything else t), on its last dotted part. A guess: override it where it misleads.");
  m.def(
      "layer_kinds",
      [](const py::object& graph, const py::dict& overrides) {
        std::vector<std::pair<std::string, LayerKind>> list;
        for (const auto& [name, kind] : overrides) list.emplace_back(name.cast<std::string>(), kind_of(kind));
        return fw::layer_kinds(graph_of(graph), list);
      },
      py::arg("graph"), py::arg("overrides") = py::dict(),
      "The kind of every layer (a LayerGraph, a Profile or a list of Layer), by index: layer_kind of its\n"
      "name, except the layers `overrides` names ({name: LayerKind or letter}; an unknown name raises).");
  m.def(
      "stage_layout",
      [](const py::object& cut, const py::object& kinds, std::int32_t ranks) {
        const std::vector<LayerKind> k = kinds_of(kinds);
        if (py::isinstance<pp::Partition>(cut)) return fw::stage_layout(cut.cast<const pp::Partition&>(), k, ranks);
        if (py::isinstance<py::str>(cut) || !py::isinstance<py::sequence>(cut))
          throw py::type_error("stage_layout: give a Partition or a list of boundaries");
        const auto boundaries = cut.cast<std::vector<std::size_t>>();
        return fw::stage_layout(boundaries, k, ranks);
      },
      py::arg("cut"), py::arg("kinds"), py::kw_only(), py::arg("ranks"),
      "The layout of a cut: a Partition (kinds by layer index, layer_kinds(graph), read in its order) or\n"
      "boundaries [0, ..., n] (kinds by position). A run of E or L layers in a stage is one letter. ranks:\n"
      "Megatron's pipeline size (a cut for v virtual stages on p ranks has v*p stages and ranks=p); 0: one\n"
      "stage per rank.");
  m.def(
      "megatron_boundaries",
      [](const fw::StageLayout& l, const py::object& kinds_in_order) {
        return fw::megatron_boundaries(l, kinds_of(kinds_in_order));
      },
      py::arg("layout"), py::arg("kinds_in_order"),
      "The way back: the boundaries (positions in the order `kinds_in_order` describes) at which the layout\n"
      "cuts the model; t and m take one layer each, E and L the run of embedding or loss layers there.\n"
      "Raises ppsched.Error when a letter does not match the layer there or the counts differ.");
  m.def(
      "torchtitan_module_fqns",
      [](const pp::Partition& part, const py::object& graph, const py::object& fqns_by_layer) {
        return fw::torchtitan_module_fqns(part, graph_of(graph), name_lists(fqns_by_layer));
      },
      py::arg("partition"), py::arg("graph"), py::kw_only(), py::arg("fqns_by_layer") = py::none(),
      "torchtitan's module_fqns_per_model_part for a partition: per stage the module names its layers\n"
      "stand for (each layer its own name, unless fqns_by_layer gives one list per layer). A name must be\n"
      "a top-level child (\"norm\") or one entry of a ModuleList/ModuleDict child (\"layers.3\").");
  m.def(
      "torchtitan_boundaries",
      [](const py::object& fqns_per_stage, const py::object& graph, const py::object& fqns_by_layer,
         std::vector<std::size_t> order) {
        const auto stages = name_lists(fqns_per_stage);
        return fw::torchtitan_boundaries(stages, graph_of(graph), name_lists(fqns_by_layer), order);
      },
      py::arg("fqns_per_stage"), py::arg("graph"), py::kw_only(), py::arg("fqns_by_layer") = py::none(),
      py::arg("order") = std::vector<std::size_t>{},
      "The way back from torchtitan's module lists: the boundaries (positions in `order`, default the\n"
      "graph's topological order). Each module once, stages contiguous; raises ppsched.Error otherwise.");
  m.def("torchtitan_llm_fqns", &fw::torchtitan_llm_fqns, py::arg("layout"),
        "torchtitan's names for a decoder-only LLM by the layout's letters: E 'tok_embeddings', the i-th t\n"
        "'layers.<i>', L 'norm' and 'output'. An m (torchtitan has no MTP module) or a second L raises.");
  m.def(
      "layout_of_torchtitan_llm_fqns",
      [](const py::object& fqns_per_stage, std::int32_t ranks) {
        const auto stages = name_lists(fqns_per_stage);
        return fw::layout_of_torchtitan_llm_fqns(stages, ranks);
      },
      py::arg("fqns_per_stage"), py::kw_only(), py::arg("ranks") = 0,
      "The layout that torchtitan LLM module lists describe (tok_embeddings, layers.<i> in order, norm then\n"
      "output). ranks as in parse_megatron_layout. Any other name raises, with its stage and place.");
}

}  // namespace ppsched_py
