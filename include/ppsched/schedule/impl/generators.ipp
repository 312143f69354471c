// The bodies of <ppsched/schedule/generators.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE::detail {

[[nodiscard]] PPSCHED_OUTLINE const FamilyInfo* find_family(std::string_view name) {
  std::string key = normalised_family(name);
  if (key == "zbvzerobubble") key = normalised_family(detail::zb_v_name);  // PyTorch's ScheduleZBVZeroBubble
  if (key == "interleavedzerobubble") key = normalised_family(detail::interleaved_zero_bubble_name);
  for (const FamilyInfo& f : schedule_families)
    if (normalised_family(f.name) == key) return &f;
  return nullptr;
}

}  // namespace ppsched::PPSCHED_MODE::detail

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE const FamilyInfo& family_info(std::string_view name) {
  if (const FamilyInfo* f = detail::find_family(name)) return *f;
  detail::fail({"schedule family", detail::concat("unknown family '", name, "'"), "",
        detail::concat("use one of: ", detail::joined_family_names())});
}

[[nodiscard]] PPSCHED_OUTLINE bool accepts(std::string_view family, const ScheduleRequest& r) {
  const FamilyInfo* f = detail::find_family(family);
  return f != nullptr && f->accepts(r);
}

[[nodiscard]] PPSCHED_OUTLINE Schedule make_schedule(std::string_view family, const ScheduleRequest& r) {
  return family_info(family).make(r);
}

}  // namespace ppsched::PPSCHED_MODE

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::string normalised_family(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == '-' || c == '_' || c == ' ') continue;
    out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  return out;
}

[[nodiscard]] PPSCHED_OUTLINE std::string joined_family_names() {
  std::string out;
  for (std::string_view n : family_name_list) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace detail
}  // namespace ppsched
