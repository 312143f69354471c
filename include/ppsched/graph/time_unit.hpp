// TimeUnit: the unit a profile, a cost model, a plan or a timeline gives its times in, one
// type for all of them with one converter (TimeUnit::factor_to). A unit is either a known
// scale of time, "s", "ms", "us" (also spelled "µs") or "ns", or a unit of the model's own
// ("unit", "cycles", whatever the user named it): a cost with no fixed relation to time,
// kept as its text and convertible only to itself. A scale converts to every other scale, so
// a timeline measured in "ns" compares with, and calibrates, a model in "ms".
//
// A unit keeps the text it was given and prints it back unchanged ("µs" stays "µs"), so
// every report, CSV and JSON file reads as it did when units were strings; two spellings of
// one scale are still one unit (== and factor_to agree on that). The constructors from text
// are implicit on purpose: `timeline.unit = "ms"` and `uniform_costs(1, 2, 1, "us")` read as
// they always did.
#pragma once

#include "ppsched/config.hpp"

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

class TimeUnit {
 public:
  // No unit named (a timeline built by hand, a profile without "unit"): prints as nothing and
  // converts to no unit, not even to itself, since two unnamed units need not be the same.
  TimeUnit() = default;
  TimeUnit(std::string text) : text_(std::move(text)), exponent_(exponent_of(text_)) {}  // NOLINT: implicit on purpose
  TimeUnit(std::string_view text) : TimeUnit(std::string(text)) {}                       // NOLINT
  TimeUnit(const char* text) : TimeUnit(std::string(text)) {}                            // NOLINT

  // The text the unit was given, as every writer prints it.
  [[nodiscard]] const std::string& text() const noexcept { return text_; }
  [[nodiscard]] bool empty() const noexcept { return text_.empty(); }
  // Seconds per one unit for a known scale; nothing for a unit of the model's own.
  [[nodiscard]] std::optional<double> seconds() const noexcept {
    if (exponent_ == model_own) return std::nullopt;
    return power_of_ten(exponent_);
  }

  // The converter: the factor that turns a time in this unit into one in `to` (t × factor).
  // Scales convert to each other, by the power of ten between them (ms to us is exactly
  // 1000); a named unit converts to itself with 1; nothing else converts (a named unit
  // against a scale or another name, and a unit without a name).
  [[nodiscard]] std::optional<double> try_factor_to(const TimeUnit& to) const noexcept {
    if (exponent_ != model_own && to.exponent_ != model_own) return power_of_ten(exponent_ - to.exponent_);
    if (exponent_ == model_own && to.exponent_ == model_own && !empty() && text_ == to.text_) return 1.0;
    return std::nullopt;
  }
  // The same, throwing ppsched::error naming both units when they do not convert. `subject`,
  // `where` and `fix` are the caller's parts of the message (error_context); an empty `fix`
  // gives the general one.
  [[nodiscard]] double factor_to(const TimeUnit& to, std::string_view subject = "time unit", std::string_view where = {},
                                 std::string_view fix = {}) const {
    if (const std::optional<double> f = try_factor_to(to)) return *f;
    detail::fail({std::string(subject),
                  detail::concat("cannot convert ", quoted_or_none(), " to ", to.quoted_or_none(), ": ", why_not(to)),
                  std::string(where),
                  fix.empty() ? std::string("give both times in s, ms, us (\xC2\xB5s) or ns, or both in one unit of the model's own")
                              : std::string(fix)});
  }

  // One unit: the same scale however spelled ("us", "µs"), or the same name.
  friend bool operator==(const TimeUnit& a, const TimeUnit& b) noexcept {
    return a.exponent_ == b.exponent_ && (a.exponent_ != model_own || a.text_ == b.text_);
  }
  friend std::ostream& operator<<(std::ostream& out, const TimeUnit& u) { return out << u.text_; }

 private:
  static constexpr int model_own = 1;  // exponent_ of a unit that is not a scale

  // The one table of scales: the power of ten of a second each one is.
  [[nodiscard]] static int exponent_of(std::string_view text) noexcept {
    if (text == "s") return 0;
    if (text == "ms") return -3;
    if (text == "us" || text == "\xC2\xB5s") return -6;  // "µs" in UTF-8
    if (text == "ns") return -9;
    return model_own;
  }
  // 10^e for |e| <= 9, the double nearest it (a negative power is 1 / an exact one).
  [[nodiscard]] static double power_of_ten(int e) noexcept {
    double p = 1.0;
    for (int i = 0; i < (e < 0 ? -e : e); ++i) p *= 10.0;
    return e < 0 ? 1.0 / p : p;
  }
  [[nodiscard]] std::string quoted_or_none() const { return empty() ? std::string("times without a unit") : "\"" + text_ + "\""; }
  [[nodiscard]] std::string why_not(const TimeUnit& to) const {
    if (empty() || to.empty()) return "a time without a unit has no known relation to another";
    if (exponent_ != model_own || to.exponent_ != model_own) return "a unit of the model's own has no fixed relation to time";
    return "two different units of the model's own";
  }

  std::string text_;
  int exponent_ = model_own;  // seconds per unit = 10^exponent_, or model_own
};

}  // namespace ppsched
