// Every schedule family behind one entry point: make_schedule("1f1b", {.ranks = 4,
// .microbatches = 8}) builds the same value as make_1f1b(...), and family_names() lists the
// canonical names a command line can offer. The families themselves live in fill_drain.hpp
// (gpipe, looped-bfs, forward-only), one_f_one_b.hpp (1f1b, interleaved-1f1b), zero_bubble.hpp
// (zb-h1, zb-h2, zb-v), controllable_memory.hpp (v-half, v-min) and dualpipev.hpp (dualpipev). A
// generated schedule holds compute actions only (DualPipeV's overlapped pairs are compute groups);
// lower() adds the communication.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ppsched/error.hpp"
#include "ppsched/schedule/controllable_memory.hpp"
#include "ppsched/schedule/dualpipev.hpp"
#include "ppsched/schedule/fill_drain.hpp"
#include "ppsched/schedule/one_f_one_b.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/schedule/zero_bubble.hpp"

namespace ppsched {

// What a command line or a report needs to know about a family.
struct FamilyInfo {
  std::string_view name;     // canonical, e.g. "interleaved-1f1b"
  std::string_view rule;     // the request it accepts, one line
  std::string_view summary;  // what it does, one line
  Schedule (*make)(const ScheduleRequest&);
};

inline constexpr std::array<FamilyInfo, 11> schedule_families{{
    {gpipe_name, "any p, m; v = 1", "all forwards, then all backwards (fill-drain); m activations per stage",
     &make_gpipe},
    {one_f_one_b_name, "any p, m; v = 1",
     "warm-up, one forward one backward, drain; p-s activations on stage s", &make_1f1b},
    {interleaved_1f1b_name, "any p, v; m a multiple of p when v > 1",
     "Megatron's virtual pipeline: v looped chunks per rank, bubble divided by v", &make_interleaved_1f1b},
    {looped_bfs_name, "any p, m, v",
     "v looped chunks per rank, breadth-first: each chunk runs all micro-batches", &make_looped_bfs},
    {zb_h1_name, "any p, m; v = 1",
     "zero bubble H1: split backward, delayed BW fills the bubble; 1F1B's memory", &make_zb_h1},
    {zb_h2_name, "any p, m; v = 1",
     "zero bubble H2: 2p-1 warm-up forwards on stage 0, no bubble in each rank's span", &make_zb_h2},
    {zb_v_name, "any p, m; v = 2", "zero bubble V: two chunks per rank in a V shape, split backward",
     &make_zb_v},
    {v_half_name, "any p, m; v = 2",
     "controllable memory V-Half: repeated V building block, about half of 1F1B's activation memory", &make_v_half},
    {v_min_name, "any p, m; v = 2",
     "controllable memory V-Min: repeated V building block, about a third of 1F1B's activation memory", &make_v_min},
    {dualpipev_name, "any p; v = 2; m >= 2p",
     "DeepSeek's DualPipeV: a V of two chunks per rank, steady state of overlapped F&B pairs (compute groups)",
     &make_dualpipev},
    {forward_only_name, "any p, m; v = 1", "inference: forwards only", &make_forward_only},
}};

namespace detail {

inline constexpr std::array<std::string_view, schedule_families.size()> family_name_list = [] {
  std::array<std::string_view, schedule_families.size()> names{};
  for (std::size_t i = 0; i < schedule_families.size(); ++i) names[i] = schedule_families[i].name;
  return names;
}();

// Lower case without '-' and '_', so that "ZB-H1", "zb_h1" and PyTorch's class-name spelling
// ("Interleaved1F1B", "LoopedBFS", "GPipe") all find their family.
[[nodiscard]] inline std::string normalised_family(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == '-' || c == '_' || c == ' ') continue;
    out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  return out;
}

[[nodiscard]] inline const FamilyInfo* find_family(std::string_view name) {
  std::string key = normalised_family(name);
  if (key == "zbvzerobubble") key = normalised_family(zb_v_name);  // PyTorch's ScheduleZBVZeroBubble
  for (const FamilyInfo& f : schedule_families)
    if (normalised_family(f.name) == key) return &f;
  return nullptr;
}

[[nodiscard]] inline std::string joined_family_names() {
  std::string out;
  for (std::string_view n : family_name_list) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace detail

// The canonical family names, in the order of schedule_families.
[[nodiscard]] constexpr std::span<const std::string_view> family_names() noexcept {
  return detail::family_name_list;
}

// The family registered under `name` (canonical, any case, '-' or '_' optional, or PyTorch's
// class name without "Schedule"); throws ppsched::error listing the valid names otherwise.
[[nodiscard]] inline const FamilyInfo& family_info(std::string_view name) {
  if (const FamilyInfo* f = detail::find_family(name)) return *f;
  fail({"schedule family", detail::concat("unknown family '", name, "'"), "",
        detail::concat("use one of: ", detail::joined_family_names())});
}

// Whether make_schedule(family, r) would succeed, without building or throwing: the sizes
// every family checks and the family's own rule on p, m and v. False for unknown families.
[[nodiscard]] inline bool accepts(std::string_view family, const ScheduleRequest& r) {
  const FamilyInfo* f = detail::find_family(family);
  if (f == nullptr || r.ranks < 1 || r.microbatches < 1 || r.chunks < 1) return false;
  if (3 * std::int64_t{r.ranks} * r.chunks * r.microbatches > detail::max_generated_actions) return false;
  if (f->name == looped_bfs_name) return true;
  if (f->name == interleaved_1f1b_name) return interleaved_1f1b_accepts(r);
  if (f->name == zb_v_name || f->name == v_half_name || f->name == v_min_name) return r.chunks == 2;
  if (f->name == dualpipev_name) return dualpipev_accepts(r);
  return r.chunks == 1;
}

// Builds the named family's schedule; throws ppsched::error for an unknown family or a request
// the family's rule rejects (the message states the rule and the nearest valid values).
[[nodiscard]] inline Schedule make_schedule(std::string_view family, const ScheduleRequest& r) {
  return family_info(family).make(r);
}

}  // namespace ppsched
