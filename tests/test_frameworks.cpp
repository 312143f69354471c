// Layouts for other frameworks (partition/frameworks.hpp): every example of Megatron-LM's
// documentation for --pipeline-model-parallel-layout read as Megatron reads it (stages, ranks,
// layers per stage, offsets) and written back in a canonical form that reads the same; the
// rejections of malformed strings, each naming the character; Megatron's placement rules; a
// partition to a layout and back; torchtitan's module lists both ways.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/partition/frameworks.hpp"
#include "ppsched/partition/partition.hpp"

using namespace ppsched;
namespace fw = ppsched::frameworks;
using fw::LayerKind;

namespace {

// One documented example: the string, the pipeline size it is given with, and per stage the
// letters Megatron would build there, as a compact string ("Ettt", "", "m").
struct MegatronExample {
  const char* source;
  const char* text;
  std::int32_t ranks;
  std::vector<std::string> stages;
  std::optional<std::size_t> num_layers, mtp_layers;  // what the doc runs it with, when it says
};

std::string letters(const std::vector<LayerKind>& stage) {
  std::string s;
  for (LayerKind k : stage) s += fw::megatron_letter(k);
  return s;
}

std::vector<std::string> repeated(std::vector<std::string> head, const std::string& stage, std::size_t n,
                                  const std::vector<std::string>& tail) {
  for (std::size_t i = 0; i < n; ++i) head.push_back(stage);
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ppsched::error& e) {
    return e.what();
  }
  return "(no error)";
}

// Megatron's own reading (parse_str_to_list): drop the commas, expand (...)*n then x*n with its two
// regular expressions, split at '|'; nullopt where it would fail (a character left that is not a
// letter). Counts past 4 digits are left out of the comparison (they would only take memory).
std::optional<std::vector<std::string>> megatron_reference(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  for (const char* pattern : {R"(\(([^)]+)\)\*(\d+))", R"((.)\*(\d+))"}) {
    const std::regex re(pattern);
    std::string out;
    auto begin = s.cbegin();
    std::smatch m;
    while (std::regex_search(begin, s.cend(), m, re)) {
      out.append(begin, m[0].first);
      if (m[2].length() > 4) return std::nullopt;
      const int n = std::stoi(m[2].str());
      for (int k = 0; k < n; ++k) out += m[1].str();
      begin = m[0].second;
    }
    out.append(begin, s.cend());
    s = out;
  }
  std::vector<std::string> stages(1);
  for (char c : s) {
    if (c == '|') {
      stages.emplace_back();
    } else if (c == 'E' || c == 't' || c == 'm' || c == 'L') {
      stages.back() += c;
    } else {
      return std::nullopt;
    }
  }
  return stages;
}

LayerGraph llm_graph(std::size_t blocks) {
  std::vector<Layer> layers;
  layers.push_back({.name = "tok_embeddings", .forward = 1.0});
  for (std::size_t i = 0; i < blocks; ++i) layers.push_back({.name = "layers." + std::to_string(i), .forward = 2.0});
  layers.push_back({.name = "norm", .forward = 0.5});
  layers.push_back({.name = "output", .forward = 1.5});
  return LayerGraph::chain(std::move(layers));
}

}  // namespace

TEST_CASE("every example of Megatron's layout documentation reads as Megatron reads it", "[frameworks][megatron]") {
  const std::string layout_page =
      "docs.nvidia.com/megatron-core/developer-guide/latest/user-guide/features/pipeline_parallel_layout.html";
  const std::string mtp_split = "github.com/NVIDIA/Megatron-LM docs/user-guide/features/mtp_layer_split.md";
  const std::string loss_split = "github.com/NVIDIA/Megatron-LM docs/user-guide/features/mtp_loss_split.md";
  const std::vector<MegatronExample> examples = {
      // DeepSeek-V3, 61 decoder layers + 1 MTP layer on PP16 VPP2; the page's table: rank 0 holds
      // E + 3 decoders then 2, ranks 1-13 2 and 2, rank 14 2 and the MTP, rank 15 2 and the loss.
      {layout_page.c_str(), "Et*3|(tt|)*29,m|L", 16, repeated({"Ettt"}, "tt", 29, {"m", "L"}), 61, 1},
      // "it is legal to have empty stages, e.g., E||t|L (the second stage is empty)".
      {layout_page.c_str(), "E||t|L", 4, {"E", "", "t", "L"}, 1, std::nullopt},
      // The help text of --pipeline-model-parallel-layout (megatron/training/arguments.py) and
      // TransformerConfig's docstring.
      {"megatron/training/arguments.py, --pipeline-model-parallel-layout help", "E|(t|)*3,m|m||L", 8,
       {"E", "t", "t", "t", "m", "m", "", "L"}, 3, 2},
      // MTP split over ranks 4, 5, 6 (VPP 1) with PP8: 16 stages, VPP 2.
      {mtp_split.c_str(), "E|(t|)*11m|m|m|L", 8, repeated({"E"}, "t", 11, {"m", "m", "m", "L"}), 11, 3},
      // The same page's non-uniform split: 2 MTP layers on rank 5, 1 on rank 6.
      {mtp_split.c_str(), "E|(t|)*12mm|m|L", 8, repeated({"E"}, "t", 12, {"mm", "m", "L"}), 12, 3},
      // Loss split: L slots on ranks 6 and 7 (VPP 1), 1 + 3 MTP layers of them.
      {loss_split.c_str(), "E|(t|)*10m|m|m|LL|LL", 8, repeated({"E"}, "t", 10, {"m", "m", "m", "LL", "LL"}), 10, 3},
      // parse_str_to_list's docstring (megatron/core/transformer/pipeline_parallel_layer_layout.py).
      {"pipeline_parallel_layer_layout.py, parse_str_to_list", "Ettt|(tt|)*29,m|L", 16,
       repeated({"Ettt"}, "tt", 29, {"m", "L"}), 61, 1},
  };
  for (const MegatronExample& ex : examples) {
    INFO(ex.text << " from " << ex.source);
    const fw::StageLayout layout = fw::parse_megatron_layout(ex.text, ex.ranks);
    // Megatron's get_num_stages_from_str and the virtual pipeline size it derives.
    CHECK(layout.stage_count() == static_cast<std::int32_t>(ex.stages.size()));
    CHECK(layout.ranks == ex.ranks);
    CHECK(layout.virtual_stages() == layout.stage_count() / ex.ranks);
    std::vector<std::string> got;
    for (const auto& st : layout.stages) got.push_back(letters(st));
    CHECK(got == ex.stages);
    // get_num_layers_to_build and get_layer_offset per (pp rank, vp stage), counted independently.
    for (std::int32_t v = 0; v < layout.virtual_stages(); ++v) {
      for (std::int32_t r = 0; r < ex.ranks; ++r) {
        const std::int32_t s = layout.stage_at(r, v);
        CHECK(layout.rank_of(s) == r);
        CHECK(layout.virtual_stage_of(s) == v);
        std::size_t before = 0;
        for (std::int32_t b = 0; b < s; ++b) {
          for (char c : ex.stages[static_cast<std::size_t>(b)]) before += c == 't' ? 1 : 0;
        }
        std::size_t here = 0;
        for (char c : ex.stages[static_cast<std::size_t>(s)]) here += c == 't' ? 1 : 0;
        CHECK(layout.count(s, LayerKind::transformer) == here);
        CHECK(layout.offset(s, LayerKind::transformer) == before);
      }
    }
    // Megatron's own rules (validate_layer_layout) with the counts the doc runs it with.
    CHECK_NOTHROW(fw::check_megatron_layout(layout, ex.num_layers, ex.mtp_layers));
    // Written back: canonical, read the same, and a fixed point.
    const std::string canonical = fw::to_megatron_layout(layout);
    INFO("canonical: " << canonical);
    CHECK(fw::parse_megatron_layout(canonical, ex.ranks) == layout);
    CHECK(fw::to_megatron_layout(fw::parse_megatron_layout(canonical, ex.ranks)) == canonical);
  }
}

TEST_CASE("the documented tables: offsets and ranks of Megatron's examples", "[frameworks][megatron]") {
  // pipeline_parallel_layout: rank 14's second virtual stage is the MTP, rank 15's the loss; rank
  // 0's first holds the embedding and decoders 0-2, its second decoders 32-33 (3 + 2 * 15 before).
  const auto a = fw::parse_megatron_layout("Et*3|(tt|)*29,m|L", 16);
  CHECK(a.virtual_stages() == 2);
  CHECK(letters(a.stages[static_cast<std::size_t>(a.stage_at(14, 1))]) == "m");
  CHECK(letters(a.stages[static_cast<std::size_t>(a.stage_at(15, 1))]) == "L");
  CHECK(a.offset(a.stage_at(0, 1), LayerKind::transformer) == 33);
  CHECK(a.count(LayerKind::transformer) == 61);
  // Its canonical form is the documented string itself.
  CHECK(fw::to_megatron_layout(a) == "Et*3|(tt|)*29,m|L");
  // mtp_layer_split: rank 0's VPP 1 is decoder layer 7; ranks 4, 5, 6 hold MTP layers 0, 1, 2.
  const auto d = fw::parse_megatron_layout("E|(t|)*11m|m|m|L", 8);
  CHECK(d.offset(d.stage_at(0, 1), LayerKind::transformer) == 7);
  for (std::int32_t r = 4; r <= 6; ++r) {
    CHECK(d.count(d.stage_at(r, 1), LayerKind::mtp) == 1);
    CHECK(d.offset(d.stage_at(r, 1), LayerKind::mtp) == static_cast<std::size_t>(r - 4));
  }
  // The non-uniform one: PP5 holds 2 MTP layers at offset 0, PP6 one at offset 2.
  const auto e = fw::parse_megatron_layout("E|(t|)*12mm|m|L", 8);
  CHECK(e.count(e.stage_at(5, 1), LayerKind::mtp) == 2);
  CHECK(e.offset(e.stage_at(5, 1), LayerKind::mtp) == 0);
  CHECK(e.offset(e.stage_at(6, 1), LayerKind::mtp) == 2);
  // mtp_loss_split: ranks 6 and 7 (VPP 1) hold two loss slots each; rank 3's VPP 1 is MTP layer 0.
  const auto f = fw::parse_megatron_layout("E|(t|)*10m|m|m|LL|LL", 8);
  CHECK(f.count(f.stage_at(6, 1), LayerKind::loss) == 2);
  CHECK(f.count(f.stage_at(7, 1), LayerKind::loss) == 2);
  CHECK(f.offset(f.stage_at(3, 1), LayerKind::mtp) == 0);
  // Megatron's stage count without a pipeline size: ranks 0 means one stage per rank.
  CHECK(fw::parse_megatron_layout("E||t|L").stage_count() == 4);
  CHECK(fw::parse_megatron_layout("E||t|L").virtual_stages() == 1);
}

TEST_CASE("Megatron's grammar: commas, repeats of letters, separators and groups", "[frameworks][megatron]") {
  const auto same = [](const char* a, const char* b) {
    INFO(a << " vs " << b);
    CHECK(fw::parse_megatron_layout(a) == fw::parse_megatron_layout(b));
  };
  same("Et*3|t*2,L", "Ettt|ttL");
  same("E,t,t|t,L", "Ett|tL");
  same("E|t*1,0|L", "E|t*10|L");  // Megatron drops every comma before it reads the counts
  same("(E|)*1,t|L", "E|t|L");
  same("E|*3tL", "E|||tL");  // x*n repeats any single item, '|' too
  same("E|(t*2|)*2,L", "E|tt|tt|L");
  same("E|t*0|L", "E||L");
  same("(|)*2", "||");
  same("E|t|", "E|t|");  // a trailing '|' is an empty last stage
  CHECK(fw::parse_megatron_layout("E|t|").stage_count() == 3);
  // Canonical forms: short runs stay letters, a group only where shorter, a last stage alone.
  CHECK(fw::to_megatron_layout(fw::parse_megatron_layout("E|t|t|t|m|m||L")) == "E|t|t|t|m|m||L");
  CHECK(fw::to_megatron_layout(fw::parse_megatron_layout("E|tttt|tttt|tttt|tttt")) == "E|(t*4|)*3,t*4");
  CHECK(fw::to_megatron_layout(fw::parse_megatron_layout("E|(|)*8L")) == "E|(|)*8,L");
  CHECK(fw::to_megatron_layout(fw::parse_megatron_layout("Et||||||||")) == "Et|(|)*7");
  for (const char* text : {"E|tttt|tttt|tttt|tttt", "Et||||||||", "E|(|)*8L", "|", "||E", "E|t|"}) {
    const auto l = fw::parse_megatron_layout(text);
    CHECK(fw::parse_megatron_layout(fw::to_megatron_layout(l)) == l);
  }
  CHECK_THROWS_AS(fw::to_megatron_layout(fw::StageLayout{{{}}, 1}), ppsched::error);  // would be ""
}

TEST_CASE("malformed Megatron layouts name the character and the problem", "[frameworks][megatron]") {
  struct Bad {
    const char* text;
    const char* where;
    const char* problem;
  };
  const std::vector<Bad> bad = {
      {"Et*3|(tt|*29", "character 6 '('", "never closed"},
      {"Et*|L", "character 4 '|'", "not followed by a count"},
      {"Et*", "character 3 '*'", "not followed by a count"},
      {"E|((t|)*2)*2|L", "character 4 '('", "cannot be nested"},
      {"E|()*2|L", "character 3 '('", "empty"},
      {"E|(tt|)|L", "character 8 '|'", "no count"},
      {"E|tx|L", "character 4 'x'", "'x' is not a letter"},
      {"E|t T|L", "character 4 ' '", "space"},
      {"e|t|L", "character 1 'e'", "case-sensitive"},
      {"*3E", "character 1 '*'", "does not follow"},
      {"E|t*2*3|L", "character 6 '*'", "repeated again"},
      {"E|(t|)*2*3L", "character 9 '*'", "repeated again"},
      {"E|3t|L", "character 3 '3'", "without '*'"},
      {"E|t)|L", "character 4 ')'", "no '('"},
      {"", "the whole text", "empty"},
      {"E|t*99999999|L", "character 5 '9'", "larger than"},
      {"(E|t*999|)*9999", "character 1 '('", "expands to more than"},
  };
  for (const Bad& b : bad) {
    INFO("layout \"" << b.text << "\"");
    const std::string m = message_of([&] { (void)fw::parse_megatron_layout(b.text); });
    INFO(m);
    CHECK(m.find("Megatron layout") != std::string::npos);
    CHECK(m.find(b.where) != std::string::npos);
    CHECK(m.find(b.problem) != std::string::npos);
  }
  const std::string ranks = message_of([] { (void)fw::parse_megatron_layout("E|t|L", 2); });
  CHECK(ranks.find("3 stages do not divide among 2 pipeline ranks") != std::string::npos);
  CHECK_THROWS_AS(fw::parse_megatron_layout("E|t|L", -1), ppsched::error);
}

TEST_CASE("Megatron's placement rules", "[frameworks][megatron]") {
  struct Rule {
    const char* text;
    std::int32_t ranks;
    const char* problem;
  };
  const std::vector<Rule> rules = {
      {"tE|L", 2, "the first layer is 't', not the embedding E"},
      {"E|L|t", 3, "the last layer is 't', not the loss L"},
      {"E|||", 4, "the last layer is 'E'"},
      {"EE|tL", 2, "E appears 2 times"},
      {"E|tLL", 2, "L appears 2 times"},
      {"E|m|t|L", 4, "a transformer layer t comes after an MTP layer m"},
      {"Et|m||L", 2, "MTP layers sit in virtual stage 0 of rank 1"},
  };
  for (const Rule& r : rules) {
    INFO(r.text);
    const std::string m = message_of([&] { fw::check_megatron_layout(fw::parse_megatron_layout(r.text, r.ranks)); });
    INFO(m);
    CHECK(m.find(r.problem) != std::string::npos);
  }
  const auto a = fw::parse_megatron_layout("Et*3|(tt|)*29,m|L", 16);
  CHECK(message_of([&] { fw::check_megatron_layout(a, 60, 1); }).find("but --num-layers is 60") != std::string::npos);
  CHECK(message_of([&] { fw::check_megatron_layout(a, 61, 2); }).find("but --mtp-num-layers is 2") !=
        std::string::npos);
  CHECK(message_of([] { fw::check_megatron_layout(fw::parse_megatron_layout("||")); }).find("no layer") !=
        std::string::npos);
}

TEST_CASE("a partition becomes a Megatron layout and comes back", "[frameworks][megatron]") {
  const LayerGraph g = llm_graph(6);  // tok_embeddings, layers.0-5, norm, output
  const auto kinds = fw::layer_kinds(g);
  REQUIRE(kinds.size() == 9);
  CHECK(kinds.front() == LayerKind::embedding);
  CHECK(kinds[3] == LayerKind::transformer);
  CHECK(kinds[7] == LayerKind::loss);
  CHECK(kinds[8] == LayerKind::loss);

  const std::vector<std::size_t> cuts{0, 3, 6, 9};
  const Partition p = evaluate_partition(g, cuts);
  const fw::StageLayout layout = fw::stage_layout(p, kinds, 3);
  CHECK(fw::to_megatron_layout(layout) == "Ett|t*3|tL");  // norm and output are one L
  CHECK_NOTHROW(fw::check_megatron_layout(layout, 6, 0));
  CHECK(fw::megatron_boundaries(fw::parse_megatron_layout("Ett|t*3|tL", 3), kinds) == cuts);

  // Virtual stages: four stages on two ranks, stage s on rank s % 2.
  const std::vector<std::size_t> four{0, 2, 4, 6, 9};
  const fw::StageLayout looped = fw::stage_layout(evaluate_partition(g, four), kinds, 2);
  CHECK(fw::to_megatron_layout(looped) == "Et|tt|tt|tL");
  CHECK(looped.virtual_stages() == 2);
  CHECK(looped.rank_of(3) == 1);
  CHECK(looped.virtual_stage_of(3) == 1);
  CHECK(fw::megatron_boundaries(looped, kinds) == four);

  // Empty stages come back as equal boundaries.
  CHECK(fw::megatron_boundaries(fw::parse_megatron_layout("Ettt||ttt|L", 2), kinds) ==
        std::vector<std::size_t>{0, 4, 4, 7, 9});
  CHECK(fw::stage_layout(std::vector<std::size_t>{0, 4, 4, 7, 9}, kinds, 2) == fw::parse_megatron_layout("Ettt||ttt|L", 2));

  // Rejections: a cut between norm and output; a letter that is not the layer there; too few
  // letters; kinds that do not match the partition.
  const std::string split =
      message_of([&] { (void)fw::stage_layout(evaluate_partition(g, std::vector<std::size_t>{0, 3, 8, 9}), kinds, 0); });
  CHECK(split.find("positions 7 and 8 are both loss layers") != std::string::npos);
  CHECK(message_of([&] { (void)fw::megatron_boundaries(fw::parse_megatron_layout("Ett|tmt|tL"), kinds); })
            .find("the letter is 'm' but the model's layer at position 4 is a transformer layer") != std::string::npos);
  CHECK(message_of([&] { (void)fw::megatron_boundaries(fw::parse_megatron_layout("Ett|ttt|t"), kinds); })
            .find("it places 7 of the model's 9 layers; the next, at position 7, is a loss layer") != std::string::npos);
  CHECK(message_of([&] { (void)fw::stage_layout(p, std::vector<LayerKind>(3, LayerKind::transformer), 3); })
            .find("got 3 kinds for a partition of 9 layers") != std::string::npos);
}

TEST_CASE("layer kinds from names, and overrides", "[frameworks]") {
  CHECK(fw::layer_kind("tok_embeddings") == LayerKind::embedding);
  CHECK(fw::layer_kind("model.embed_tokens") == LayerKind::embedding);
  CHECK(fw::layer_kind("transformer.wte") == LayerKind::embedding);
  CHECK(fw::layer_kind("layers.12") == LayerKind::transformer);
  CHECK(fw::layer_kind("model.layers.3") == LayerKind::transformer);
  CHECK(fw::layer_kind("block7") == LayerKind::transformer);
  CHECK(fw::layer_kind("mtp.0") == LayerKind::mtp);
  CHECK(fw::layer_kind("MTP_layer") == LayerKind::mtp);
  CHECK(fw::layer_kind("model.norm") == LayerKind::loss);
  CHECK(fw::layer_kind("transformer.ln_f") == LayerKind::loss);
  CHECK(fw::layer_kind("lm_head") == LayerKind::loss);
  CHECK(fw::layer_kind("output_layer") == LayerKind::loss);
  CHECK(fw::layer_kind("CrossEntropyLoss") == LayerKind::loss);

  const LayerGraph g = LayerGraph::chain({{.name = "stem"}, {.name = "block0"}, {.name = "head"}});
  const std::vector<std::pair<std::string, LayerKind>> overrides{{"stem", LayerKind::embedding}};
  CHECK(fw::layer_kinds(g, overrides) ==
        std::vector<LayerKind>{LayerKind::embedding, LayerKind::transformer, LayerKind::loss});
  const std::vector<std::pair<std::string, LayerKind>> typo{{"stme", LayerKind::embedding}};
  CHECK(message_of([&] { (void)fw::layer_kinds(g, typo); }).find("no layer is named 'stme'") != std::string::npos);
}

TEST_CASE("torchtitan's module lists from a partition and back", "[frameworks][torchtitan]") {
  const LayerGraph g = llm_graph(6);
  const std::vector<std::size_t> cuts{0, 3, 6, 9};
  const Partition p = evaluate_partition(g, cuts);
  const std::vector<std::vector<std::string>> expected{
      {"tok_embeddings", "layers.0", "layers.1"}, {"layers.2", "layers.3", "layers.4"}, {"layers.5", "norm", "output"}};
  const auto fqns = fw::torchtitan_module_fqns(p, g);
  CHECK(fqns == expected);
  CHECK(fw::torchtitan_boundaries(fqns, g) == cuts);
  // The same names from the Megatron letters, by torchtitan's LLM convention, and back.
  const fw::StageLayout layout = fw::stage_layout(p, fw::layer_kinds(g), 3);
  CHECK(fw::torchtitan_llm_fqns(layout) == expected);
  CHECK(fw::layout_of_torchtitan_llm_fqns(expected, 3) == layout);

  // torchtitan's own examples: generate_llm_fqn_per_model_part(2, 3, input_weight=2,
  // output_weight=2) and pipeline_module_split's docstring.
  const std::vector<std::vector<std::string>> generated{{"tok_embeddings", "layers.0", "layers.1"},
                                                        {"layers.2", "norm", "output"}};
  CHECK(fw::to_megatron_layout(fw::layout_of_torchtitan_llm_fqns(generated)) == "Ett|tL");
  const std::vector<std::vector<std::string>> docstring{
      {"tok_embeddings", "layers.0"}, {"layers.1", "layers.2"}, {"norm", "output"}};
  CHECK(fw::to_megatron_layout(fw::layout_of_torchtitan_llm_fqns(docstring)) == "Et|tt|L");
  CHECK(fw::torchtitan_llm_fqns(fw::layout_of_torchtitan_llm_fqns(docstring)) == docstring);
  CHECK(fw::torchtitan_boundaries(docstring, llm_graph(3)) == std::vector<std::size_t>{0, 2, 4, 6});

  // A layer standing for several modules, or none.
  const LayerGraph merged = LayerGraph::chain({{.name = "embed"}, {.name = "block"}, {.name = "head"}, {.name = "loss"}});
  const std::vector<std::vector<std::string>> by_layer{{"tok_embeddings"}, {"layers.0"}, {"norm", "output"}, {}};
  const Partition mp = evaluate_partition(merged, std::vector<std::size_t>{0, 2, 4});
  const auto mf = fw::torchtitan_module_fqns(mp, merged, by_layer);
  CHECK(mf == std::vector<std::vector<std::string>>{{"tok_embeddings", "layers.0"}, {"norm", "output"}});
  CHECK(fw::torchtitan_boundaries(mf, merged, by_layer) == std::vector<std::size_t>{0, 2, 4});
}

TEST_CASE("torchtitan's module lists: rejections", "[frameworks][torchtitan]") {
  const LayerGraph g = llm_graph(4);
  const auto msg = [&](std::vector<std::vector<std::string>> stages) {
    return message_of([&] { (void)fw::torchtitan_boundaries(stages, g); });
  };
  CHECK(msg({{"tok_embeddings", "layer.0", "layers.1"}, {"layers.2", "layers.3", "norm", "output"}})
            .find("did you mean 'layers.0'?") != std::string::npos);
  CHECK(msg({{"tok_embeddings", "layers.0", "layers.2"}, {"layers.1", "layers.3", "norm", "output"}})
            .find("give each stage a contiguous run") != std::string::npos);
  CHECK(msg({{"tok_embeddings", "layers.0", "layers.1"}, {"layers.2", "norm", "output"}})
            .find("no stage keeps the module 'layers.3'") != std::string::npos);
  CHECK(msg({{"tok_embeddings", "layers.0", "layers.1", "layers.2"}, {"layers.2", "layers.3", "norm", "output"}})
            .find("'layers.2' is listed in stage 0 and again in stage 1") != std::string::npos);

  const LayerGraph nested = LayerGraph::chain({{.name = "model.embed_tokens"}, {.name = "model.layers.0"}});
  const Partition np = evaluate_partition(nested, std::vector<std::size_t>{0, 1, 2});
  CHECK(message_of([&] { (void)fw::torchtitan_module_fqns(np, nested); })
            .find("'model.layers.0' is not a name torchtitan's pipeline_module_split can keep") !=
        std::string::npos);

  const std::vector<std::vector<std::string>> lone_norm{{"tok_embeddings", "layers.0"}, {"norm"}};
  CHECK(message_of([&] { (void)fw::layout_of_torchtitan_llm_fqns(lone_norm); }).find("go together") !=
        std::string::npos);
  const std::vector<std::vector<std::string>> skipped{{"tok_embeddings", "layers.1"}, {"norm", "output"}};
  CHECK(message_of([&] { (void)fw::layout_of_torchtitan_llm_fqns(skipped); })
            .find("the next transformer layer is 'layers.0'") != std::string::npos);
  CHECK(message_of([] { (void)fw::torchtitan_llm_fqns(fw::parse_megatron_layout("Et|mL")); })
            .find("no MTP module") != std::string::npos);
}

TEST_CASE("random strings: what ppsched reads, Megatron reads the same way", "[frameworks][megatron]") {
  // Every string ppsched accepts is one Megatron's regular expressions accept, with the same
  // stages; every string either parses or throws ppsched::error; a parsed one round-trips.
  std::mt19937 rng(40);
  const std::string alphabet = "EtmLt|||()**,0123";
  std::uniform_int_distribution<std::size_t> length(0, 14), pick(0, alphabet.size() - 1);
  std::size_t accepted = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string text;
    for (std::size_t n = length(rng); n > 0; --n) text += alphabet[pick(rng)];
    INFO("layout \"" << text << "\"");
    std::optional<fw::StageLayout> ours;
    try {
      ours = fw::parse_megatron_layout(text);
    } catch (const ppsched::error&) {
      continue;
    }
    ++accepted;
    const auto theirs = megatron_reference(text);
    REQUIRE(theirs.has_value());
    std::vector<std::string> got;
    for (const auto& st : ours->stages) got.push_back(letters(st));
    CHECK(got == *theirs);
    if (!(ours->stages.size() == 1 && ours->stages[0].empty())) {
      CHECK(fw::parse_megatron_layout(fw::to_megatron_layout(*ours)) == *ours);
    }
  }
  CHECK(accepted > 100);
}
