// A cut written the way other frameworks take it, and read back: Megatron-LM's
// `--pipeline-model-parallel-layout` string and torchtitan's per-stage module lists
// (`module_fqns_per_model_part`). The planner decides where the cuts go; these functions only
// translate, so that a Megatron or torchtitan user can run ppsched's split without writing it
// out by hand, and a split they already have can be priced with `evaluate_partition`.
//
// Megatron (docs/partition.md, "Megatron and torchtitan"): a layout lists every (virtual)
// stage in order, `|` between stages, one letter per layer: E embedding, t transformer
// (decoder) layer, m multi-token-prediction layer, L output and loss; `X*n` repeats a letter,
// `(...)*n` a group, commas are ignored. Stage s of the v*p stages runs on pipeline rank s % p
// as its virtual stage s / p (Megatron's looped placement, ppsched's `looped`). ppsched's layers
// become letters by a kind per layer, given by the caller or guessed from the layer's name
// (`layer_kind`); a run of embedding layers within a stage is one E and a run of loss layers
// one L, every transformer and MTP layer is one t or m.
//
//   namespace fw = ppsched::frameworks;
//   const auto kinds = fw::layer_kinds(graph);                    // E, t.., L from the names
//   const fw::StageLayout layout = fw::stage_layout(part, kinds, 4);  // 8 stages on 4 ranks
//   fw::check_megatron_layout(layout);                            // Megatron's own rules
//   std::string arg = fw::to_megatron_layout(layout);             // "Et*3|(tt|)*5,t|tL"
//   auto back = fw::megatron_boundaries(fw::parse_megatron_layout(arg, 4), kinds);
//
// torchtitan: the module names (fully qualified: "tok_embeddings", "layers.3", "norm") each
// stage keeps, in stage order; torchtitan places the stages on ranks itself (looped, or V for
// its V schedules). A layer's name is its module's name unless the caller says otherwise.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/partition/partition.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace frameworks {

// What a layer is to Megatron; the value is the layout's letter.
enum class LayerKind : char { embedding = 'E', transformer = 't', mtp = 'm', loss = 'L' };

[[nodiscard]] constexpr char megatron_letter(LayerKind k) noexcept { return static_cast<char>(k); }

// A model cut into stages, each the kinds of its layers in order, with the stages in global
// order (Megatron's string order, torchtitan's stage index). Stage s runs on rank s % ranks as
// its virtual stage s / ranks; the stage count is a multiple of `ranks`. Stages may be empty, as
// in Megatron (ppsched's own partitions never have an empty stage).
struct StageLayout {
  std::vector<std::vector<LayerKind>> stages;
  std::int32_t ranks = 1;  // Megatron's --pipeline-model-parallel-size

  [[nodiscard]] std::int32_t stage_count() const noexcept { return static_cast<std::int32_t>(stages.size()); }
  // Stages per rank (Megatron's virtual pipeline size); 0 for an empty layout or ranks <= 0.
  [[nodiscard]] std::int32_t virtual_stages() const noexcept { return ranks > 0 ? stage_count() / ranks : 0; }
  [[nodiscard]] std::int32_t rank_of(std::int32_t stage) const noexcept { return ranks > 0 ? stage % ranks : 0; }
  [[nodiscard]] std::int32_t virtual_stage_of(std::int32_t stage) const noexcept {
    return ranks > 0 ? stage / ranks : 0;
  }
  // The stage that pipeline rank `rank` holds as its virtual stage `virtual_stage`.
  [[nodiscard]] std::int32_t stage_at(std::int32_t rank, std::int32_t virtual_stage) const noexcept {
    return virtual_stage * ranks + rank;
  }
  // Layers of kind k in one stage: Megatron's get_num_layers_to_build(k, vp_stage, pp_rank) for
  // stage_at(pp_rank, vp_stage).
  [[nodiscard]] std::size_t count(std::int32_t stage, LayerKind k) const {
    const auto& st = stages.at(static_cast<std::size_t>(stage));
    return static_cast<std::size_t>(std::count(st.begin(), st.end(), k));
  }
  // Layers of kind k in the whole layout.
  [[nodiscard]] std::size_t count(LayerKind k) const noexcept {
    std::size_t n = 0;
    for (const auto& st : stages) n += static_cast<std::size_t>(std::count(st.begin(), st.end(), k));
    return n;
  }
  // Layers of kind k in the stages before `stage`: Megatron's get_layer_offset, the index of the
  // stage's first layer of that kind (its first decoder layer is layers.<offset>).
  [[nodiscard]] std::size_t offset(std::int32_t stage, LayerKind k) const {
    std::size_t n = 0;
    for (std::int32_t s = 0; s < stage; ++s) n += count(s, k);
    return n;
  }

  friend bool operator==(const StageLayout&, const StageLayout&) = default;
};

namespace detail {

[[nodiscard]] inline std::string quoted_layout(std::string_view text) {
  // A message quotes the layout; a huge one is cut so that the message stays one line to read.
  constexpr std::size_t shown = 80;
  if (text.size() <= shown) return ppsched::detail::concat("Megatron layout \"", text, "\"");
  return ppsched::detail::concat("Megatron layout \"", text.substr(0, shown), "...\" (", text.size(), " characters)");
}

// The most layers and separators a parsed layout may expand to: a count such as t*99999999 is
// a typo, and would otherwise end in std::bad_alloc instead of a message.
inline constexpr std::size_t max_layout_tokens = 1'000'000;

// Recursive descent over the text as typed, so that every message names the character where
// the text went wrong. Megatron strips commas and expands groups and repeats with two regular
// expressions; this reads the same language, and refuses (with a reason) the strings on which
// those expressions give an accidental meaning: a nested group, a repeat of a repeat.
class LayoutParser {
 public:
  explicit LayoutParser(std::string_view text) : text_(text) {}

  [[nodiscard]] std::vector<char> parse() {
    if (text_.empty()) {
      ppsched::detail::fail({quoted_layout(text_), "the layout is empty", "the whole text",
                     "write at least one stage, such as \"Et|tL\""});
    }
    std::vector<char> out = sequence(false, 0);
    return out;
  }

 private:
  [[noreturn]] void fail_at(std::size_t at, const std::string& problem, const std::string& fix) const {
    std::string where = at < text_.size() ? ppsched::detail::concat("character ", at + 1, " '", text_[at], "'")
                                          : ppsched::detail::concat("the end of the text (after character ", text_.size(), ")");
    ppsched::detail::fail({quoted_layout(text_), problem, where, fix});
  }

  void skip_commas() {
    while (pos_ < text_.size() && text_[pos_] == ',') ++pos_;
  }

  static bool is_letter(char c) { return c == 'E' || c == 't' || c == 'm' || c == 'L'; }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  // The count after a '*' at star_at (pos_ is past the '*'): digits, commas ignored between them.
  std::size_t count_after_star(std::size_t star_at) {
    skip_commas();
    if (pos_ >= text_.size() || !is_digit(text_[pos_])) {
      fail_at(pos_ < text_.size() ? pos_ : star_at, "'*' is not followed by a count",
              "write the number of repeats after '*', as in t*3 or (tt|)*2");
    }
    const std::size_t first = pos_;
    std::size_t n = 0;
    while (pos_ < text_.size() && is_digit(text_[pos_])) {
      n = n * 10 + static_cast<std::size_t>(text_[pos_] - '0');
      if (n > max_layout_tokens) {
        fail_at(first, ppsched::detail::concat("the count is larger than ", max_layout_tokens),
                "give the layers per stage and the stages actually meant");
      }
      ++pos_;
      skip_commas();
    }
    return n;
  }

  void check_size(std::size_t size, std::size_t at) const {
    if (size > max_layout_tokens) {
      fail_at(at, ppsched::detail::concat("the layout expands to more than ", max_layout_tokens, " layers and '|'"),
              "check the counts after '*'");
    }
  }

  // Items up to the end (top level) or up to the ')' closing the group opened at open_at.
  std::vector<char> sequence(bool in_group, std::size_t open_at) {
    std::vector<char> out;
    // Where the last item starts in `out`, and whether a '*' may follow it: a letter or a '|'
    // just read may be repeated once; a group is repeated by its own count.
    bool may_repeat = false;
    bool just_repeated = false;
    for (;;) {
      skip_commas();
      if (pos_ >= text_.size()) {
        if (in_group) fail_at(open_at, "this '(' is never closed", "close the group and give its count: (...)*n");
        return out;
      }
      const std::size_t at = pos_;
      const char c = text_[pos_];
      if (is_letter(c) || c == '|') {
        out.push_back(c);
        ++pos_;
        may_repeat = true;
        just_repeated = false;
      } else if (c == '*') {
        if (!may_repeat) {
          fail_at(at, just_repeated ? "a repeat is repeated again" : "'*' does not follow a layer letter, '|' or a group",
                  just_repeated ? "write one count, such as t*6 instead of t*2*3"
                                : "put '*' right after what it repeats, as in t*3 or (tt|)*2");
        }
        ++pos_;
        const std::size_t n = count_after_star(at);
        const char item = out.back();
        out.pop_back();
        check_size(out.size() + n, at);
        out.insert(out.end(), n, item);
        may_repeat = false;
        just_repeated = true;
      } else if (c == '(') {
        if (in_group) {
          fail_at(at, "groups cannot be nested (Megatron reads no group inside a group)",
                  "write the inner group out, or repeat the outer one with a larger count");
        }
        ++pos_;
        const std::vector<char> inner = sequence(true, at);
        if (inner.empty()) fail_at(at, "the group is empty", "put layers or '|' inside the parentheses");
        skip_commas();
        if (pos_ >= text_.size() || text_[pos_] != '*') {
          fail_at(pos_ < text_.size() ? pos_ : at, "a group has no count after it",
                  "give the group its repeat count: (...)*n");
        }
        const std::size_t star = pos_;
        ++pos_;
        const std::size_t n = count_after_star(star);
        if (n > 0) check_size(out.size() + inner.size() * n, at);  // inner.size() <= the cap: no overflow
        for (std::size_t k = 0; k < n; ++k) out.insert(out.end(), inner.begin(), inner.end());
        may_repeat = false;
        just_repeated = true;
      } else if (c == ')') {
        if (!in_group) fail_at(at, "')' has no '(' before it", "open the group with '(' or remove the ')'");
        ++pos_;
        return out;
      } else if (is_digit(c)) {
        fail_at(at, "a count stands without '*' before it", "write the count after '*', as in t*3");
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        fail_at(at, "the layout has a space (Megatron refuses spaces)", "remove the spaces; commas may separate for reading");
      } else {
        fail_at(at, ppsched::detail::concat("'", c, "' is not a letter of the layout"),
                "use E (embedding), t (transformer layer), m (MTP layer), L (loss), '|' between stages, "
                "x*n and (...)*n to repeat, ',' to separate for reading; the letters are case-sensitive");
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

inline void check_layout_shape(const StageLayout& layout, std::string_view subject) {
  if (layout.ranks <= 0) {
    ppsched::detail::fail({std::string(subject), ppsched::detail::concat("ranks is ", layout.ranks), "ranks",
                   "give the pipeline ranks (Megatron's --pipeline-model-parallel-size), at least 1"});
  }
  if (layout.stages.empty()) {
    ppsched::detail::fail({std::string(subject), "the layout has no stage", "stages", "give at least one stage"});
  }
  if (layout.stages.size() % static_cast<std::size_t>(layout.ranks) != 0) {
    ppsched::detail::fail({std::string(subject),
                   ppsched::detail::concat(layout.stages.size(), " stages do not divide among ", layout.ranks, " ranks"),
                   "ranks",
                   ppsched::detail::concat("give a multiple of ", layout.ranks,
                                   " stages (v per rank, stage s on rank s % ranks), or a rank count that divides ",
                                   layout.stages.size())});
  }
}

// One stage's letters, runs of three or more written x*n (as Megatron's own example, "Et*3").
inline void append_stage(std::string& out, const std::vector<LayerKind>& stage) {
  for (std::size_t i = 0; i < stage.size();) {
    std::size_t j = i;
    while (j < stage.size() && stage[j] == stage[i]) ++j;
    const std::size_t run = j - i;
    if (run >= 3) {
      out += megatron_letter(stage[i]);
      out += '*';
      out += std::to_string(run);
    } else {
      out.append(run, megatron_letter(stage[i]));
    }
    i = j;
  }
}

inline bool valid_fqn(std::string_view name) {
  // torchtitan's pipeline_module_split keeps top-level children by name and, inside a
  // ModuleList or ModuleDict child, entries by key: "norm" or "layers.3", nothing deeper.
  if (name.empty()) return false;
  for (char c : name) {
    if (std::isspace(static_cast<unsigned char>(c))) return false;
  }
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos) return true;
  return dot > 0 && dot + 1 < name.size() && name.find('.', dot + 1) == std::string_view::npos;
}

}  // namespace detail

// Megatron's layout string for a layout, in a canonical form: x*n for a run of three or more
// equal letters, (S|)*k for k equal consecutive stages where that is shorter, ',' after a group
// before a letter. Parsing it with parse_megatron_layout(text, layout.ranks) gives the layout back.
// Megatron's example, 32 stages on 16 ranks, is written "Et*3|(tt|)*29,m|L" exactly.
[[nodiscard]] inline std::string to_megatron_layout(const StageLayout& layout) {
  detail::check_layout_shape(layout, "Megatron layout");
  if (layout.stages.size() == 1 && layout.stages.front().empty()) {
    ppsched::detail::fail({"Megatron layout", "its one stage is empty: the text would be empty, which Megatron cannot read", "stages",
          "give the stage its layers"});
  }
  std::vector<std::string> texts;
  texts.reserve(layout.stages.size());
  for (const auto& st : layout.stages) {
    std::string s;
    detail::append_stage(s, st);
    texts.push_back(std::move(s));
  }
  std::string out;
  const std::size_t n = texts.size();
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && texts[j] == texts[i]) ++j;
    const std::size_t k = j - i;  // equal stages i .. j-1
    const bool at_end = j == n;
    // At the end, the last of the run is written alone: a group ends with '|', which would add
    // an empty stage after it.
    const std::size_t grouped = at_end ? k - 1 : k;
    const std::size_t plain_len = grouped * (texts[i].size() + 1);
    const std::size_t group_len = texts[i].size() + 4 + std::to_string(grouped).size();
    if (grouped >= 2 && group_len < plain_len) {
      out += '(';
      out += texts[i];
      out += "|)*";
      out += std::to_string(grouped);
      // What follows starts with a letter: a comma keeps the count readable, as Megatron's "*29,m".
      const std::string& next = at_end ? texts[i] : texts[j];
      if (!next.empty()) out += ',';
      if (at_end) out += texts[i];
    } else {
      for (std::size_t s = 0; s < k; ++s) {
        out += texts[i];
        if (i + s + 1 < n) out += '|';
      }
    }
    i = j;
  }
  return out;
}

// Reads a Megatron layout string: letters E t m L, '|' between stages, x*n and (...)*n repeats,
// commas ignored; empty stages allowed. `ranks` is Megatron's --pipeline-model-parallel-size: the
// stage count must be a multiple of it (0: one stage per rank). Throws ppsched::error naming the
// character where the text is wrong, and what would be right. Syntax only: Megatron's rules on
// where E, t, m and L may go are check_megatron_layout's.
[[nodiscard]] inline StageLayout parse_megatron_layout(std::string_view text, std::int32_t ranks = 0) {
  if (ranks < 0) {
    ppsched::detail::fail({detail::quoted_layout(text), ppsched::detail::concat("ranks is ", ranks), "ranks",
          "give Megatron's --pipeline-model-parallel-size, or 0 for one stage per rank"});
  }
  const std::vector<char> tokens = detail::LayoutParser(text).parse();
  StageLayout layout;
  layout.stages.emplace_back();
  for (char c : tokens) {
    if (c == '|') {
      layout.stages.emplace_back();
    } else {
      layout.stages.back().push_back(static_cast<LayerKind>(c));
    }
  }
  layout.ranks = ranks == 0 ? layout.stage_count() : ranks;
  if (layout.stages.size() % static_cast<std::size_t>(layout.ranks) != 0) {
    ppsched::detail::fail({detail::quoted_layout(text),
          ppsched::detail::concat("its ", layout.stages.size(), " stages do not divide among ", layout.ranks, " pipeline ranks"), "ranks",
          ppsched::detail::concat("Megatron needs a multiple of --pipeline-model-parallel-size stages (", layout.ranks,
                 " x the virtual stages per rank): add or remove stages, or change the rank count")});
  }
  return layout;
}

// Megatron's own rules for a layout it will build (validate_layer_layout, Megatron-LM main as of
// 2026): the first layer is E and the only E; the last is L, and L appears once (or, with MTP's
// loss split, 1 + the MTP layer count times); every t comes before every m; m only in the last
// virtual stage of its rank. Given, the counts of t (--num-layers) and m (--mtp-num-layers) must
// match. Throws ppsched::error naming the rule and the stage. Older Megatron releases also
// required every m in one stage and exactly one L; a layout that splits them may need a newer one.
inline void check_megatron_layout(const StageLayout& layout, std::optional<std::size_t> transformer_layers = {},
                                  std::optional<std::size_t> mtp_layers = {}) {
  detail::check_layout_shape(layout, "Megatron layout");
  // The layers in Megatron's order, with their stages.
  std::vector<std::pair<LayerKind, std::int32_t>> flat;
  for (std::int32_t s = 0; s < layout.stage_count(); ++s) {
    for (LayerKind k : layout.stages[static_cast<std::size_t>(s)]) flat.emplace_back(k, s);
  }
  if (flat.empty()) {
    ppsched::detail::fail({ppsched::detail::concat("Megatron layout of ", layout.stage_count(), " empty stages"), "the layout has no layer", "",
          "give at least E and L"});
  }
  const std::string subject = ppsched::detail::concat("Megatron layout \"", to_megatron_layout(layout), "\" on ", layout.ranks,
                                     " ranks");
  if (flat.front().first != LayerKind::embedding) {
    ppsched::detail::fail({subject, ppsched::detail::concat("the first layer is '", megatron_letter(flat.front().first), "', not the embedding E"),
          ppsched::detail::concat("stage ", flat.front().second), "start the first non-empty stage with E"});
  }
  if (flat.back().first != LayerKind::loss) {
    ppsched::detail::fail({subject, ppsched::detail::concat("the last layer is '", megatron_letter(flat.back().first), "', not the loss L"),
          ppsched::detail::concat("stage ", flat.back().second), "end the last non-empty stage with L"});
  }
  const std::size_t embeddings = layout.count(LayerKind::embedding);
  if (embeddings != 1) {
    ppsched::detail::fail({subject, ppsched::detail::concat("E appears ", embeddings, " times; Megatron builds one embedding"), "", "keep one E"});
  }
  const std::size_t mtps = layout.count(LayerKind::mtp);
  const std::size_t losses = layout.count(LayerKind::loss);
  if (losses != 1 && losses != 1 + mtps) {
    ppsched::detail::fail({subject,
          ppsched::detail::concat("L appears ", losses, " times; Megatron takes one, or 1 + the MTP layers (", 1 + mtps,
                 ") when the loss is split over stages"),
          "", "keep one L"});
  }
  if (transformer_layers && layout.count(LayerKind::transformer) != *transformer_layers) {
    ppsched::detail::fail({subject,
          ppsched::detail::concat("it has ", layout.count(LayerKind::transformer), " transformer layers t, but --num-layers is ",
                 *transformer_layers),
          "", "make the count of t equal --num-layers"});
  }
  if (mtp_layers && mtps != *mtp_layers) {
    ppsched::detail::fail({subject, ppsched::detail::concat("it has ", mtps, " MTP layers m, but --mtp-num-layers is ", *mtp_layers), "",
          "make the count of m equal --mtp-num-layers"});
  }
  const auto first_mtp = std::find_if(flat.begin(), flat.end(), [](const auto& x) { return x.first == LayerKind::mtp; });
  const auto late_t = std::find_if(first_mtp, flat.end(), [](const auto& x) { return x.first == LayerKind::transformer; });
  if (late_t != flat.end()) {
    ppsched::detail::fail({subject, "a transformer layer t comes after an MTP layer m", ppsched::detail::concat("stage ", late_t->second),
          "put every t before the first m"});
  }
  const std::int32_t last_virtual = layout.virtual_stages() - 1;
  for (std::int32_t s = 0; s < layout.stage_count(); ++s) {
    if (layout.count(s, LayerKind::mtp) > 0 && layout.virtual_stage_of(s) != last_virtual) {
      ppsched::detail::fail({subject,
            ppsched::detail::concat("MTP layers sit in virtual stage ", layout.virtual_stage_of(s), " of rank ", layout.rank_of(s),
                   "; Megatron builds them only in a rank's last virtual stage (", last_virtual, ")"),
            ppsched::detail::concat("stage ", s),
            ppsched::detail::concat("move the m layers into stages ", last_virtual * layout.ranks, " .. ", layout.stage_count() - 1,
                   " (each rank's last virtual stage)")});
    }
  }
}

// How a layer's name maps to a kind, by the conventions of the common model code (Megatron,
// torchtitan, Hugging Face), on the name's last dotted part (the one before it when the last is an
// index, as in "mtp.0"), case ignored:
//   m  the part contains "mtp";
//   E  it contains "embed" (tok_embeddings, embed_tokens, word_embeddings), or is wte or wpe;
//   L  it contains "loss" or "lm_head", or is output, output_layer, head, norm, final_norm, ln_f,
//      final_layernorm or final_layer_norm (the final norm goes with the output, as torchtitan
//      puts it);
//   t  anything else.
// A guess: where a name misleads it, give the kind yourself (layer_kinds' overrides).
[[nodiscard]] inline LayerKind layer_kind(std::string_view name) {
  // The last dotted part, or the one before it when the last is an index ("mtp.0", "layers.3").
  std::string_view rest = name;
  std::size_t dot = rest.rfind('.');
  std::string_view last = dot == std::string_view::npos ? rest : rest.substr(dot + 1);
  if (dot != std::string_view::npos && !last.empty() &&
      std::all_of(last.begin(), last.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    rest = rest.substr(0, dot);
    dot = rest.rfind('.');
    last = dot == std::string_view::npos ? rest : rest.substr(dot + 1);
  }
  std::string part(last);
  for (char& c : part) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto has = [&](std::string_view w) { return part.find(w) != std::string::npos; };
  const auto is = [&](std::initializer_list<std::string_view> ws) {
    return std::any_of(ws.begin(), ws.end(), [&](std::string_view w) { return part == w; });
  };
  if (has("mtp")) return LayerKind::mtp;
  if (has("embed") || is({"wte", "wpe"})) return LayerKind::embedding;
  if (has("loss") || has("lm_head") ||
      is({"output", "output_layer", "head", "norm", "final_norm", "ln_f", "final_layernorm", "final_layer_norm"})) {
    return LayerKind::loss;
  }
  return LayerKind::transformer;
}

// The kind of every layer of the graph, by index: layer_kind of its name, except the layers
// `overrides` names (exact names; a name the graph lacks is an error, as it is surely a typo).
[[nodiscard]] inline std::vector<LayerKind> layer_kinds(
    const LayerGraph& graph, std::span<const std::pair<std::string, LayerKind>> overrides = {}) {
  std::vector<LayerKind> kinds;
  kinds.reserve(graph.size());
  for (const Layer& l : graph.layers()) kinds.push_back(layer_kind(l.name));
  for (const auto& [name, kind] : overrides) {
    bool found = false;
    for (std::size_t i = 0; i < graph.size(); ++i) {
      if (graph.layer(i).name == name) {
        kinds[i] = kind;
        found = true;
      }
    }
    if (!found) {
      ppsched::detail::fail({"layer kinds", ppsched::detail::concat("no layer is named '", name, "'"), "overrides",
            "give the exact name of a layer of the graph"});
    }
  }
  return kinds;
}

// The layout of a cut: stage j holds positions boundaries[j] .. boundaries[j+1]-1, whose kinds
// are kinds[position] (equal boundaries give an empty stage). A run of embedding layers within a
// stage is one E, a run of loss layers one L; such a run split by a cut is refused (Megatron's E
// and L are one layer each, and the way back could not tell where the cut was). `ranks`:
// Megatron's pipeline size, 0 for one stage per rank.
[[nodiscard]] inline StageLayout stage_layout(std::span<const std::size_t> boundaries, std::span<const LayerKind> kinds,
                                              std::int32_t ranks) {
  const std::string subject = "stage layout";
  if (boundaries.size() < 2 || boundaries.front() != 0 || boundaries.back() != kinds.size()) {
    ppsched::detail::fail({subject,
          ppsched::detail::concat("the boundaries do not run from 0 to the ", kinds.size(), " layers the kinds describe"),
          "boundaries", "give stages + 1 boundaries, the first 0 and the last the layer count"});
  }
  for (std::size_t j = 0; j + 1 < boundaries.size(); ++j) {
    if (boundaries[j] > boundaries[j + 1]) {
      ppsched::detail::fail({subject, ppsched::detail::concat("boundary ", j + 1, " (", boundaries[j + 1], ") is before boundary ", j, " (",
                            boundaries[j], ")"),
            ppsched::detail::concat("boundaries[", j + 1, "]"), "give non-decreasing boundaries"});
    }
  }
  StageLayout layout;
  const std::int32_t stage_count = static_cast<std::int32_t>(boundaries.size() - 1);
  layout.ranks = ranks == 0 ? stage_count : ranks;
  for (std::size_t j = 0; j + 1 < boundaries.size(); ++j) {
    std::vector<LayerKind> st;
    for (std::size_t p = boundaries[j]; p < boundaries[j + 1]; ++p) {
      const LayerKind k = kinds[p];
      const bool merges = k == LayerKind::embedding || k == LayerKind::loss;
      if (merges && p > boundaries[j]) {
        if (kinds[p - 1] == k) continue;  // the same E or L as the layer before
      }
      if (merges && p == boundaries[j] && p > 0 && kinds[p - 1] == k) {
        ppsched::detail::fail({subject,
              ppsched::detail::concat("positions ", p - 1, " and ", p, " are both ", k == LayerKind::embedding ? "embedding" : "loss",
                     " layers, but the cut before stage ", j, " splits them; Megatron's ", megatron_letter(k),
                     " is one layer"),
              ppsched::detail::concat("boundaries[", j, "]"),
              "move the cut so that the run stays in one stage, or give one of the layers another kind"});
      }
      st.push_back(k);
    }
    layout.stages.push_back(std::move(st));
  }
  detail::check_layout_shape(layout, subject);
  return layout;
}

// The layout of a partition: `kinds` by layer index (layer_kinds(graph)), read in the
// partition's order. `ranks` as above: a planner's cut for v virtual stages on p ranks has
// v * p stages and ranks = p.
[[nodiscard]] inline StageLayout stage_layout(const Partition& partition, std::span<const LayerKind> kinds,
                                              std::int32_t ranks) {
  if (kinds.size() != partition.order.size()) {
    ppsched::detail::fail({"stage layout", ppsched::detail::concat("got ", kinds.size(), " kinds for a partition of ", partition.order.size(), " layers"),
          "kinds", "give one kind per layer of the graph, by layer index (layer_kinds(graph))"});
  }
  std::vector<LayerKind> in_order;
  in_order.reserve(kinds.size());
  for (std::size_t layer : partition.order) in_order.push_back(kinds[layer]);
  return stage_layout(partition.boundaries, in_order, ranks);
}

// The way back: the boundaries (positions in the order `kinds_in_order` describes) at which the
// layout cuts the model. t and m take one layer each, E and L the whole run of embedding or loss
// layers there. Throws when a letter does not match the layer there, or the counts differ.
// An empty stage gives two equal boundaries: evaluate_partition refuses those (ppsched's stages
// hold at least one layer), so give such a layout to Megatron, not to the partitioner.
[[nodiscard]] inline std::vector<std::size_t> megatron_boundaries(const StageLayout& layout,
                                                                  std::span<const LayerKind> kinds_in_order) {
  detail::check_layout_shape(layout, "Megatron layout");
  const auto name = [](LayerKind k) -> const char* {
    switch (k) {
      case LayerKind::embedding: return "embedding";
      case LayerKind::transformer: return "transformer";
      case LayerKind::mtp: return "MTP";
      case LayerKind::loss: return "loss";
    }
    return "?";
  };
  const std::string subject = ppsched::detail::concat("Megatron layout \"", to_megatron_layout(layout), "\"");
  std::vector<std::size_t> boundaries{0};
  std::size_t p = 0;
  for (std::size_t s = 0; s < layout.stages.size(); ++s) {
    for (std::size_t i = 0; i < layout.stages[s].size(); ++i) {
      const LayerKind k = layout.stages[s][i];
      const std::string where = ppsched::detail::concat("stage ", s, ", letter ", i + 1, " '", megatron_letter(k), "'");
      if (p >= kinds_in_order.size()) {
        ppsched::detail::fail({subject, ppsched::detail::concat("it has more layers than the model's ", kinds_in_order.size()), where,
              "give the layout of this model (its layer kinds in order)"});
      }
      if (kinds_in_order[p] != k) {
        ppsched::detail::fail({subject,
              ppsched::detail::concat("the letter is '", megatron_letter(k), "' but the model's layer at position ", p, " is a ",
                     name(kinds_in_order[p]), " layer ('", megatron_letter(kinds_in_order[p]), "')"),
              where, "check the layer kinds, or the layout's letters"});
      }
      ++p;
      if (k == LayerKind::embedding || k == LayerKind::loss) {
        while (p < kinds_in_order.size() && kinds_in_order[p] == k) ++p;
      }
    }
    boundaries.push_back(p);
  }
  if (p != kinds_in_order.size()) {
    ppsched::detail::fail({subject,
          ppsched::detail::concat("it places ", p, " of the model's ", kinds_in_order.size(), " layers; the next, at position ", p,
                 ", is a ", name(kinds_in_order[p]), " layer"),
          "", "give the layout of this model: one letter per layer (E and L per run)"});
  }
  return boundaries;
}

// Writes the layout as Megatron's string.
inline std::ostream& operator<<(std::ostream& out, const StageLayout& layout) {
  if (layout.ranks <= 0 || layout.stages.empty() || layout.stages.size() % static_cast<std::size_t>(layout.ranks) != 0) {
    return out << "StageLayout(" << layout.stages.size() << " stages, " << layout.ranks << " ranks)";
  }
  std::size_t layers = 0;
  for (const auto& st : layout.stages) layers += st.size();
  if (layers == 0) return out << "StageLayout(" << layout.stages.size() << " empty stages)";
  return out << '"' << to_megatron_layout(layout) << "\" on " << layout.ranks << " ranks";
}

// ---- torchtitan -----------------------------------------------------------------------------

// torchtitan's module_fqns_per_model_part for a partition: per stage, in stage order, the module
// names its layers stand for. A layer stands for its own name unless `fqns_by_layer` (one list
// per layer, by index; empty: every layer its name) says otherwise; a layer may stand for
// several modules ("norm", "output") or none (a loss computed outside any module). Each name
// must be one torchtitan's pipeline_module_split can keep: a top-level child ("norm") or one
// entry of a ModuleList/ModuleDict child ("layers.3"), never deeper; and named once.
[[nodiscard]] inline std::vector<std::vector<std::string>> torchtitan_module_fqns(
    const Partition& partition, const LayerGraph& graph,
    std::span<const std::vector<std::string>> fqns_by_layer = {}) {
  const std::string subject = "torchtitan module names";
  if (partition.order.size() != graph.size()) {
    ppsched::detail::fail({subject, ppsched::detail::concat("the partition has ", partition.order.size(), " layers, the graph ", graph.size()), "",
          "give the graph the partition was cut from"});
  }
  if (!fqns_by_layer.empty() && fqns_by_layer.size() != graph.size()) {
    ppsched::detail::fail({subject, ppsched::detail::concat("got module names for ", fqns_by_layer.size(), " layers, the graph has ", graph.size()),
          "fqns_by_layer", "give one list per layer, by layer index, or none"});
  }
  std::unordered_map<std::string, std::size_t> seen;  // name -> layer
  std::vector<std::vector<std::string>> out;
  out.reserve(partition.stages.size());
  for (std::size_t s = 0; s < partition.stages.size(); ++s) {
    std::vector<std::string> names;
    for (std::size_t layer : partition.layers_of(s)) {
      const std::vector<std::string> own{graph.layer(layer).name};
      for (const std::string& fqn : fqns_by_layer.empty() ? own : fqns_by_layer[layer]) {
        if (!detail::valid_fqn(fqn)) {
          ppsched::detail::fail({subject,
                ppsched::detail::concat("'", fqn, "' is not a name torchtitan's pipeline_module_split can keep"),
                ppsched::detail::concat("layer ", layer, " '", graph.layer(layer).name, "'"),
                "name a top-level module (\"norm\") or one entry of a ModuleList/ModuleDict child (\"layers.3\"); "
                "give the layer its module names in fqns_by_layer"});
        }
        const auto [it, fresh] = seen.emplace(fqn, layer);
        if (!fresh) {
          ppsched::detail::fail({subject, ppsched::detail::concat("'", fqn, "' is named by layer ", it->second, " and again by layer ", layer),
                ppsched::detail::concat("layer ", layer, " '", graph.layer(layer).name, "'"),
                "give each module to one layer, so that one stage keeps it"});
        }
        names.push_back(fqn);
      }
    }
    out.push_back(std::move(names));
  }
  return out;
}

// The way back: the boundaries (positions in `order`, default the graph's topological order) of
// the stages that torchtitan module lists describe, names resolved as torchtitan_module_fqns
// writes them. Every module a layer stands for must be in one stage, every such module listed
// once, and the stages must be contiguous runs of the order. A layer that stands for no module
// joins the stage of the layer before it (the first stage for a leading one). An empty list gives
// an empty stage (two equal boundaries, which evaluate_partition refuses).
[[nodiscard]] inline std::vector<std::size_t> torchtitan_boundaries(
    std::span<const std::vector<std::string>> fqns_per_stage, const LayerGraph& graph,
    std::span<const std::vector<std::string>> fqns_by_layer = {}, std::span<const std::size_t> order = {}) {
  const std::string subject = "torchtitan module lists";
  if (!fqns_by_layer.empty() && fqns_by_layer.size() != graph.size()) {
    ppsched::detail::fail({subject, ppsched::detail::concat("got module names for ", fqns_by_layer.size(), " layers, the graph has ", graph.size()),
          "fqns_by_layer", "give one list per layer, by layer index, or none"});
  }
  if (fqns_per_stage.empty()) ppsched::detail::fail({subject, "there is no stage", "", "give one list of module names per stage"});
  if (order.empty()) {
    order = graph.topological_order();
  } else {
    ppsched::detail::check_topological_order(graph, order);
  }
  std::unordered_map<std::string, std::size_t> layer_of;
  for (std::size_t i = 0; i < graph.size(); ++i) {
    const std::vector<std::string> own{graph.layer(i).name};
    for (const std::string& fqn : fqns_by_layer.empty() ? own : fqns_by_layer[i]) {
      const auto [it, fresh] = layer_of.emplace(fqn, i);
      if (!fresh) {
        ppsched::detail::fail({subject, ppsched::detail::concat("layers ", it->second, " and ", i, " both stand for the module '", fqn, "'"),
              fqns_by_layer.empty() ? "the graph's layer names" : "fqns_by_layer",
              "give each module to one layer (layer names must differ)"});
      }
    }
  }
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::vector<std::size_t> stage_of(graph.size(), none);
  std::unordered_map<std::string, std::size_t> listed;  // name -> stage
  for (std::size_t s = 0; s < fqns_per_stage.size(); ++s) {
    for (const std::string& fqn : fqns_per_stage[s]) {
      const auto found = layer_of.find(fqn);
      if (found == layer_of.end()) {
        std::string hint;
        std::size_t best = none;
        for (const auto& [known, layer] : layer_of) {
          const std::size_t d = edit_distance(fqn, known);
          if (d < best && d <= 2) {
            best = d;
            hint = known;
          }
        }
        ppsched::detail::fail({subject, ppsched::detail::concat("no layer stands for the module '", fqn, "'"), ppsched::detail::concat("stage ", s),
              hint.empty() ? std::string("name the modules the graph's layers stand for")
                           : ppsched::detail::concat("did you mean '", hint, "'?")});
      }
      const auto [it, fresh] = listed.emplace(fqn, s);
      if (!fresh) {
        ppsched::detail::fail({subject, ppsched::detail::concat("'", fqn, "' is listed in stage ", it->second, " and again in stage ", s),
              ppsched::detail::concat("stage ", s), "list each module once"});
      }
      const std::size_t layer = found->second;
      if (stage_of[layer] != none && stage_of[layer] != s) {
        ppsched::detail::fail({subject,
              ppsched::detail::concat("layer ", layer, " '", graph.layer(layer).name, "' has modules in stages ", stage_of[layer],
                     " and ", s),
              ppsched::detail::concat("stage ", s), "keep every module of one layer in one stage"});
      }
      stage_of[layer] = s;
    }
  }
  // Every module of a listed layer must be listed (a layer is not split between kept and dropped).
  for (std::size_t i = 0; i < graph.size(); ++i) {
    const std::vector<std::string> own{graph.layer(i).name};
    const auto& fqns = fqns_by_layer.empty() ? own : fqns_by_layer[i];
    for (const std::string& fqn : fqns) {
      if (!listed.contains(fqn)) {
        ppsched::detail::fail({subject, ppsched::detail::concat("no stage keeps the module '", fqn, "'"),
              ppsched::detail::concat("layer ", i, " '", graph.layer(i).name, "'"), "list every module in exactly one stage"});
      }
    }
  }
  std::vector<std::size_t> boundaries(fqns_per_stage.size() + 1, 0);
  std::size_t current = 0;
  std::size_t previous_position = none;
  for (std::size_t p = 0; p < order.size(); ++p) {
    const std::size_t layer = order[p];
    std::size_t s = stage_of[layer];
    if (s == none) s = current;  // a layer without modules stays with the one before
    if (s < current) {
      ppsched::detail::fail({subject,
            ppsched::detail::concat("stage ", s, " keeps layer ", layer, " '", graph.layer(layer).name, "', which comes after layer ",
                   order[previous_position], " '", graph.layer(order[previous_position]).name, "' of stage ", current),
            ppsched::detail::concat("stage ", s), "give each stage a contiguous run of the layers, in order"});
    }
    for (std::size_t j = current + 1; j <= s; ++j) boundaries[j] = p;
    current = s;
    previous_position = p;
  }
  for (std::size_t j = current + 1; j <= fqns_per_stage.size(); ++j) boundaries[j] = order.size();
  return boundaries;
}

// torchtitan's names for a decoder-only LLM (its llama3, qwen3, deepseek_v3 models), by the
// layout's letters: E is "tok_embeddings", the i-th t "layers.<i>", L "norm" and "output" (as
// torchtitan's generate_llm_fqn_per_model_part lists them). torchtitan's split has no MTP module,
// so an m is refused, as is more than one L.
[[nodiscard]] inline std::vector<std::vector<std::string>> torchtitan_llm_fqns(const StageLayout& layout) {
  detail::check_layout_shape(layout, "torchtitan module names");
  if (layout.count(LayerKind::loss) > 1 || layout.count(LayerKind::embedding) > 1) {
    ppsched::detail::fail({"torchtitan module names", "the layout has more than one E or L; torchtitan's model has one of each", "",
          "keep one E and one L"});
  }
  std::vector<std::vector<std::string>> out;
  std::size_t next_layer = 0;
  for (std::size_t s = 0; s < layout.stages.size(); ++s) {
    std::vector<std::string> names;
    for (LayerKind k : layout.stages[s]) {
      switch (k) {
        case LayerKind::embedding: names.emplace_back("tok_embeddings"); break;
        case LayerKind::transformer: names.push_back(ppsched::detail::concat("layers.", next_layer++)); break;
        case LayerKind::loss:
          names.emplace_back("norm");
          names.emplace_back("output");
          break;
        case LayerKind::mtp:
          ppsched::detail::fail({"torchtitan module names", "torchtitan's pipeline split has no MTP module", ppsched::detail::concat("stage ", s),
                "leave the m layers out, or name the modules yourself (torchtitan_module_fqns)"});
      }
    }
    out.push_back(std::move(names));
  }
  return out;
}

// The way back from torchtitan's LLM names: "tok_embeddings" is E, "layers.<i>" t (i counting
// 0, 1, 2, ... through the stages), "norm" then "output" in one stage L. `ranks` as in
// parse_megatron_layout. Any other name is refused, with its stage and place.
[[nodiscard]] inline StageLayout layout_of_torchtitan_llm_fqns(std::span<const std::vector<std::string>> fqns_per_stage,
                                                               std::int32_t ranks = 0) {
  const std::string subject = "torchtitan module lists";
  if (ranks < 0) ppsched::detail::fail({subject, ppsched::detail::concat("ranks is ", ranks), "ranks", "give the pipeline ranks, or 0 for one stage per rank"});
  StageLayout layout;
  std::size_t next_layer = 0;
  for (std::size_t s = 0; s < fqns_per_stage.size(); ++s) {
    std::vector<LayerKind> st;
    const auto& names = fqns_per_stage[s];
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::string& n = names[i];
      const std::string where = ppsched::detail::concat("stage ", s, ", name ", i + 1, " '", n, "'");
      if (n == "tok_embeddings") {
        st.push_back(LayerKind::embedding);
      } else if (n.starts_with("layers.")) {
        const std::string expected = ppsched::detail::concat("layers.", next_layer);
        if (n != expected) {
          ppsched::detail::fail({subject, ppsched::detail::concat("the next transformer layer is '", expected, "'"), where,
                "list layers.0, layers.1, ... in order, each once"});
        }
        ++next_layer;
        st.push_back(LayerKind::transformer);
      } else if (n == "norm" && i + 1 < names.size() && names[i + 1] == "output") {
        st.push_back(LayerKind::loss);
        ++i;
      } else if (n == "norm" || n == "output") {
        ppsched::detail::fail({subject, "\"norm\" and \"output\" go together, in that order, in one stage", where,
              "list them side by side, as torchtitan does"});
      } else {
        ppsched::detail::fail({subject, "not a module of torchtitan's LLM split (tok_embeddings, layers.<i>, norm, output)", where,
              "use torchtitan_boundaries with the graph's own names for other models"});
      }
    }
    layout.stages.push_back(std::move(st));
  }
  layout.ranks = ranks == 0 ? layout.stage_count() : ranks;
  detail::check_layout_shape(layout, subject);
  return layout;
}

}  // namespace frameworks
}  // namespace ppsched
