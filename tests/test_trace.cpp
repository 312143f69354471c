// Tests for ppsched/trace: statistics, measured-vs-predicted comparison and the three
// writers. Timelines are built by hand (or by the small list scheduler below, which follows
// the execution model's dependencies for unit-cost GPipe and 1F1B), and every expected
// number is worked out here from the schedule, not read from the code under test. The
// Chrome trace and the SVG are parsed back with strict little readers defined in this file.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/trace/ascii.hpp"
#include "ppsched/trace/chrome_trace.hpp"
#include "ppsched/trace/compare.hpp"
#include "ppsched/trace/csv.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/svg.hpp"
#include "ppsched/trace/timeline.hpp"

using namespace ppsched;

namespace {

// ------------------------------------------------------------------ building timelines

Span span(std::int32_t rank, Op op, std::int32_t stage, std::int32_t microbatch, double start, double end,
          Lane lane = Lane::compute) {
  Span s;
  s.rank = rank;
  s.action = Action{op, stage, microbatch};
  s.lane = lane;
  s.start = start;
  s.end = end;
  return s;
}

// Times a per-rank program (one stage per rank, compute only, communication free) by the
// execution model's dependencies: F(s, mb) after F(s-1, mb); B(s, mb) after F(s, mb) and
// B(s+1, mb). Each rank runs its program in order, each action as early as allowed.
Timeline run_programs(const std::vector<std::vector<Action>>& programs, double forward, double backward,
                      const std::string& unit = "step") {
  const auto ranks = static_cast<std::int32_t>(programs.size());
  Timeline t;
  t.ranks = ranks;
  t.unit = unit;
  std::map<std::tuple<Op, std::int32_t, std::int32_t>, double> done;  // (op, stage, mb) -> end
  std::vector<std::size_t> next(programs.size(), 0);
  std::vector<double> free_at(programs.size(), 0.0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::int32_t r = 0; r < ranks; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      while (next[ru] < programs[ru].size()) {
        const Action a = programs[ru][next[ru]];
        std::vector<std::tuple<Op, std::int32_t, std::int32_t>> needs;
        if (a.op == Op::F && a.stage > 0) needs.emplace_back(Op::F, a.stage - 1, a.microbatch);
        if (a.op == Op::B) {
          needs.emplace_back(Op::F, a.stage, a.microbatch);
          if (a.stage + 1 < ranks) needs.emplace_back(Op::B, a.stage + 1, a.microbatch);
        }
        double ready = free_at[ru];
        bool blocked = false;
        for (const auto& n : needs) {
          const auto it = done.find(n);
          if (it == done.end()) {
            blocked = true;
            break;
          }
          ready = std::max(ready, it->second);
        }
        if (blocked) break;
        const double end = ready + (a.op == Op::F ? forward : backward);
        t.spans.push_back(span(r, a.op, a.stage, a.microbatch, ready, end));
        done[{a.op, a.stage, a.microbatch}] = end;
        free_at[ru] = end;
        ++next[ru];
        progress = true;
      }
    }
  }
  for (std::size_t r = 0; r < programs.size(); ++r) REQUIRE(next[r] == programs[r].size());
  return t;
}

std::vector<std::vector<Action>> gpipe_programs(std::int32_t ranks, std::int32_t microbatches) {
  std::vector<std::vector<Action>> programs(static_cast<std::size_t>(ranks));
  for (std::int32_t r = 0; r < ranks; ++r) {
    for (std::int32_t mb = 0; mb < microbatches; ++mb)
      programs[static_cast<std::size_t>(r)].push_back({Op::F, r, mb});
    for (std::int32_t mb = 0; mb < microbatches; ++mb)
      programs[static_cast<std::size_t>(r)].push_back({Op::B, r, mb});
  }
  return programs;
}

// 1F1B: rank r runs ranks-1-r warm-up forwards, then alternates forward and backward.
std::vector<std::vector<Action>> one_f_one_b_programs(std::int32_t ranks, std::int32_t microbatches) {
  std::vector<std::vector<Action>> programs(static_cast<std::size_t>(ranks));
  for (std::int32_t r = 0; r < ranks; ++r) {
    auto& p = programs[static_cast<std::size_t>(r)];
    const std::int32_t warmup = std::min(ranks - 1 - r, microbatches);
    std::int32_t f = 0;
    std::int32_t b = 0;
    while (f < warmup) p.push_back({Op::F, r, f++});
    while (f < microbatches) {
      p.push_back({Op::F, r, f++});
      p.push_back({Op::B, r, b++});
    }
    while (b < microbatches) p.push_back({Op::B, r, b++});
  }
  return programs;
}

// The 3-rank, 4-micro-batch 1F1B step with F = 1 and B = 2, written out by hand:
//   rank 0: F0 0-1  F1 1-2  F2 2-3  B0 7-9  F3 9-10  B1 10-12 B2 13-15 B3 16-18
//   rank 1: F0 1-2  F1 2-3  B0 5-7  F2 7-8  B1 8-10  F3 10-11 B2 11-13 B3 14-16
//   rank 2: F0 2-3  B0 3-5  F1 5-6  B1 6-8  F2 8-9   B2 9-11  F3 11-12 B3 12-14
Timeline hand_1f1b() {
  Timeline t;
  t.ranks = 3;
  t.unit = "step";
  const auto add = [&t](std::int32_t r, Op op, std::int32_t mb, double start, double end) {
    t.spans.push_back(span(r, op, r, mb, start, end));
  };
  add(0, Op::F, 0, 0, 1), add(0, Op::F, 1, 1, 2), add(0, Op::F, 2, 2, 3), add(0, Op::B, 0, 7, 9);
  add(0, Op::F, 3, 9, 10), add(0, Op::B, 1, 10, 12), add(0, Op::B, 2, 13, 15), add(0, Op::B, 3, 16, 18);
  add(1, Op::F, 0, 1, 2), add(1, Op::F, 1, 2, 3), add(1, Op::B, 0, 5, 7), add(1, Op::F, 2, 7, 8);
  add(1, Op::B, 1, 8, 10), add(1, Op::F, 3, 10, 11), add(1, Op::B, 2, 11, 13), add(1, Op::B, 3, 14, 16);
  add(2, Op::F, 0, 2, 3), add(2, Op::B, 0, 3, 5), add(2, Op::F, 1, 5, 6), add(2, Op::B, 1, 6, 8);
  add(2, Op::F, 2, 8, 9), add(2, Op::B, 2, 9, 11), add(2, Op::F, 3, 11, 12), add(2, Op::B, 3, 12, 14);
  return t;
}

// hand_1f1b with the communication a lowered schedule adds, on the comm lane: each
// activation and gradient transfer takes 0.25 step right after its producer.
Timeline hand_1f1b_with_comm() {
  Timeline t = hand_1f1b();
  const std::vector<Span> compute = t.spans;
  for (const Span& s : compute) {
    if (s.action.op == Op::F && s.rank + 1 < t.ranks) {
      t.spans.push_back(
          span(s.rank, Op::SEND_F, s.rank, s.action.microbatch, s.end, s.end + 0.25, Lane::comm));
      t.spans.push_back(
          span(s.rank + 1, Op::RECV_F, s.rank + 1, s.action.microbatch, s.end, s.end + 0.25, Lane::comm));
    }
    if (s.action.op == Op::B && s.rank > 0) {
      t.spans.push_back(
          span(s.rank, Op::SEND_B, s.rank, s.action.microbatch, s.end, s.end + 0.25, Lane::comm));
      t.spans.push_back(
          span(s.rank - 1, Op::RECV_B, s.rank - 1, s.action.microbatch, s.end, s.end + 0.25, Lane::comm));
    }
  }
  return t;
}

template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const ppsched::error& e) {
    return e.what();
  }
  return "(no error thrown)";
}

// ------------------------------------------------------------------ a strict JSON reader

struct Json {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<Json> items;        // array elements, or object values
  std::vector<std::string> keys;  // object keys, parallel to items

  [[nodiscard]] bool has(std::string_view key) const {
    return kind == Kind::object && std::find(keys.begin(), keys.end(), key) != keys.end();
  }
  [[nodiscard]] const Json& operator[](std::string_view key) const {
    if (kind != Kind::object) throw std::runtime_error("not an object");
    const auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) throw std::runtime_error("no key " + std::string{key});
    return items[static_cast<std::size_t>(it - keys.begin())];
  }
};

// RFC 8259, strictly: no trailing commas, no leading zeros, no raw control characters in
// strings, valid escapes only (\u surrogate pairs decoded), valid UTF-8, nothing after
// the value but whitespace, no duplicate keys.
class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}

  Json parse_document() {
    check_utf8();
    Json value = parse_value();
    skip_space();
    if (pos_ != text_.size()) fail("text after the value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(pos_));
  }
  void check_utf8() const {
    std::size_t i = 0;
    while (i < text_.size()) {
      const auto c = static_cast<unsigned char>(text_[i]);
      std::size_t n = c < 0x80             ? 1
                      : (c & 0xE0) == 0xC0 ? 2
                      : (c & 0xF0) == 0xE0 ? 3
                      : (c & 0xF8) == 0xF0 ? 4
                                           : 0;
      if (n == 0 || i + n > text_.size() || (n == 2 && c < 0xC2)) throw std::runtime_error("JSON: bad UTF-8");
      for (std::size_t k = 1; k < n; ++k) {
        if ((static_cast<unsigned char>(text_[i + k]) & 0xC0) != 0x80)
          throw std::runtime_error("JSON: bad UTF-8");
      }
      i += n;
    }
  }
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  char peek() {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end");
    return text_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("bad literal");
    pos_ += word.size();
  }
  Json parse_value() {
    const char c = peek();
    Json v;
    if (c == '{') {
      v.kind = Json::Kind::object;
      ++pos_;
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      while (true) {
        if (peek() != '"') fail("expected a key");
        std::string key = parse_string();
        if (v.has(key)) fail("duplicate key " + key);
        expect(':');
        v.keys.push_back(std::move(key));
        v.items.push_back(parse_value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::array;
      ++pos_;
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      while (true) {
        v.items.push_back(parse_value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::string;
      v.string = parse_string();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.kind = Json::Kind::boolean;
      v.boolean = c == 't';
      literal(c == 't' ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    v.kind = Json::Kind::number;
    v.number = parse_number();
    return v;
  }
  double parse_number() {
    const std::size_t begin = pos_;
    const auto digit = [this] { return pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; };
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    if (!digit()) fail("bad number");
    if (text_[pos_] == '0') {
      ++pos_;
      if (digit()) fail("leading zero");
    } else {
      while (digit()) ++pos_;
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digit()) fail("bad fraction");
      while (digit()) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digit()) fail("bad exponent");
      while (digit()) ++pos_;
    }
    return std::stod(std::string(text_.substr(begin, pos_ - begin)));
  }
  unsigned hex4() {
    if (pos_ + 4 > text_.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = text_[pos_++];
      v <<= 4U;
      if (h >= '0' && h <= '9') {
        v |= static_cast<unsigned>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<unsigned>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<unsigned>(h - 'A' + 10);
      } else {
        fail("bad hex digit");
      }
    }
    return v;
  }
  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") fail("lone high surrogate");
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("lone low surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

Json parse_json(std::string_view text) { return JsonReader(text).parse_document(); }

// ------------------------------------------------------------------ a strict XML reader

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::string text;  // character data directly inside, entities decoded
  std::vector<XmlElement> children;
};

// Enough of XML 1.0 for SVG output: a prolog, elements, attributes in double or single
// quotes, character data and the predefined and numeric entities. Throws on unbalanced or
// mismatched tags, duplicate attributes, raw '<' or '&' in text or values, or bad names.
class XmlReader {
 public:
  explicit XmlReader(std::string_view text) : text_(text) {}

  XmlElement parse_document() {
    skip_space();
    if (text_.substr(pos_, 5) == "<?xml") {
      const auto end = text_.find("?>", pos_);
      if (end == std::string_view::npos) fail("unterminated prolog");
      pos_ = end + 2;
    }
    skip_space();
    XmlElement root = parse_element();
    skip_space();
    if (pos_ != text_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("XML: " + what + " at offset " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::string_view(" \t\r\n").find(text_[pos_]) != std::string_view::npos)
      ++pos_;
  }
  static bool name_char(char c, bool first) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    return first ? letter : letter || (c >= '0' && c <= '9') || c == '-' || c == '.';
  }
  std::string parse_name() {
    const std::size_t begin = pos_;
    if (pos_ >= text_.size() || !name_char(text_[pos_], true)) fail("bad name");
    while (pos_ < text_.size() && name_char(text_[pos_], false)) ++pos_;
    return std::string(text_.substr(begin, pos_ - begin));
  }
  std::string decode(std::string_view raw) const {
    std::string out;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '<') fail("raw '<'");
      if (raw[i] != '&') {
        out += raw[i];
        continue;
      }
      const auto semi = raw.find(';', i);
      if (semi == std::string_view::npos) fail("unterminated entity");
      const std::string_view entity = raw.substr(i + 1, semi - i - 1);
      if (entity == "amp") {
        out += '&';
      } else if (entity == "lt") {
        out += '<';
      } else if (entity == "gt") {
        out += '>';
      } else if (entity == "quot") {
        out += '"';
      } else if (entity == "apos") {
        out += '\'';
      } else if (entity.size() > 1 && entity[0] == '#') {
        out += "&" + std::string(entity) + ";";  // kept as written; the writer uses none
      } else {
        fail("unknown entity &" + std::string(entity) + ";");
      }
      i = semi;
    }
    return out;
  }
  XmlElement parse_element() {
    if (pos_ >= text_.size() || text_[pos_] != '<') fail("expected '<'");
    ++pos_;
    XmlElement e;
    e.name = parse_name();
    while (true) {
      skip_space();
      if (pos_ >= text_.size()) fail("unterminated tag");
      if (text_.substr(pos_, 2) == "/>") {
        pos_ += 2;
        return e;
      }
      if (text_[pos_] == '>') {
        ++pos_;
        break;
      }
      std::string attribute = parse_name();
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '=') fail("expected '=' after " + attribute);
      ++pos_;
      skip_space();
      if (pos_ >= text_.size() || (text_[pos_] != '"' && text_[pos_] != '\''))
        fail("unquoted attribute value");
      const char quote = text_[pos_++];
      const auto close = text_.find(quote, pos_);
      if (close == std::string_view::npos) fail("unterminated attribute value");
      if (e.attributes.count(attribute) != 0) fail("duplicate attribute " + attribute);
      e.attributes[attribute] = decode(text_.substr(pos_, close - pos_));
      pos_ = close + 1;
    }
    while (true) {
      const auto lt = text_.find('<', pos_);
      if (lt == std::string_view::npos) fail("missing </" + e.name + ">");
      e.text += decode(text_.substr(pos_, lt - pos_));
      pos_ = lt;
      if (text_.substr(pos_, 2) == "</") {
        pos_ += 2;
        if (parse_name() != e.name) fail("mismatched end tag for <" + e.name + ">");
        skip_space();
        if (pos_ >= text_.size() || text_[pos_] != '>') fail("bad end tag");
        ++pos_;
        return e;
      }
      e.children.push_back(parse_element());
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

XmlElement parse_xml(std::string_view text) { return XmlReader(text).parse_document(); }

void collect(const XmlElement& e, const std::string& name, std::vector<const XmlElement*>& out) {
  if (e.name == name) out.push_back(&e);
  for (const XmlElement& c : e.children) collect(c, name, out);
}
std::vector<const XmlElement*> all(const XmlElement& root, const std::string& name) {
  std::vector<const XmlElement*> out;
  collect(root, name, out);
  return out;
}
std::multiset<std::string> texts(const XmlElement& root) {
  std::multiset<std::string> out;
  for (const XmlElement* t : all(root, "text")) out.insert(t->text);
  return out;
}

}  // namespace

// ====================================================================== statistics

TEST_CASE("summarize: hand-written 1F1B step", "[trace][stats]") {
  const Timeline t = hand_1f1b();
  const TimelineStats s = summarize(t);
  // 4 F of 1 and 4 B of 2 per rank: busy 12 of a makespan of 18.
  CHECK(s.ranks == 3);
  CHECK(s.unit == "step");
  CHECK(s.spans == 24);
  CHECK(s.origin == 0.0);
  CHECK(s.finish == 18.0);
  CHECK(s.makespan == 18.0);
  const double first[] = {0, 1, 2};
  const double last[] = {18, 16, 14};
  for (std::size_t r = 0; r < 3; ++r) {
    const RankStats& rank = s.per_rank[r];
    CHECK(rank.rank == static_cast<std::int32_t>(r));
    CHECK(rank.actions == 8);
    CHECK(rank.first_start == first[r]);
    CHECK(rank.last_end == last[r]);
    CHECK(rank.span == last[r] - first[r]);
    CHECK(rank.busy == 12.0);
    CHECK(rank.comm_wait == 0.0);
    CHECK(rank.idle == 6.0);
    CHECK(rank.bubble_fraction == Approx(6.0 / 18.0));
    CHECK(rank.span_bubble_fraction == Approx((last[r] - first[r] - 12.0) / (last[r] - first[r])));
  }
  CHECK(s.total_busy == 36.0);
  CHECK(s.total_idle == 18.0);
  // (p - 1) / (m + p - 1) and (p - 1) / m for p = 3, m = 4.
  CHECK(s.bubble_fraction == Approx(2.0 / 6.0));
  CHECK(s.ideal_time == 12.0);
  CHECK(s.bubble_vs_ideal == Approx(2.0 / 4.0));
  CHECK(s.count(Op::F) == 12);
  CHECK(s.count(Op::B) == 12);
  CHECK(s.count(Op::BI) == 0);
  CHECK(s.count(Op::SEND_F) == 0);
}

TEST_CASE("summarize: GPipe and 1F1B bubbles follow (p-1)/(m+p-1) and (p-1)/m", "[trace][stats]") {
  for (std::int32_t p = 1; p <= 8; ++p) {
    for (std::int32_t m = 1; m <= 16; ++m) {
      for (const bool one_f_one_b : {false, true}) {
        CAPTURE(p, m, one_f_one_b);
        const auto programs = one_f_one_b ? one_f_one_b_programs(p, m) : gpipe_programs(p, m);
        const TimelineStats s = summarize(run_programs(programs, 1.0, 2.0));
        CHECK(s.makespan == Approx(3.0 * (m + p - 1)));
        CHECK(s.ideal_time == Approx(3.0 * m));
        CHECK(s.bubble_fraction == Approx(static_cast<double>(p - 1) / (m + p - 1)));
        CHECK(s.bubble_vs_ideal == Approx(static_cast<double>(p - 1) / m));
        CHECK(s.count(Op::F) == p * m);
        CHECK(s.count(Op::B) == p * m);
      }
    }
  }
}

TEST_CASE("summarize: overlapping spans count once; comm wait is comm not under compute", "[trace][stats]") {
  Timeline t;
  t.ranks = 2;
  t.unit = "us";
  // Rank 0: compute [0,4] and [2,6] overlap (union 6); comm [5,8] and [7,9] overlap (union
  // [5,9], of which [5,6] is under compute, so 3 waits).
  t.spans = {span(0, Op::F, 0, 0, 0, 4), span(0, Op::F, 0, 1, 2, 6),
             span(0, Op::SEND_F, 0, 0, 5, 8, Lane::comm), span(0, Op::RECV_B, 0, 0, 7, 9, Lane::comm),
             // Rank 1 runs communication on its compute stream: RECV_F [0,3] then F [3,4]
             // then a nested BW [3.5,4] inside it; RECV is not busy time.
             span(1, Op::RECV_F, 1, 0, 0, 3, Lane::compute), span(1, Op::F, 1, 0, 3, 4),
             span(1, Op::BW, 1, 0, 3.5, 4)};
  const TimelineStats s = summarize(t);
  CHECK(s.makespan == 9.0);
  CHECK(s.per_rank[0].busy == 6.0);
  CHECK(s.per_rank[0].comm_wait == 3.0);
  CHECK(s.per_rank[0].idle == 3.0);
  CHECK(s.per_rank[0].span == 9.0);
  CHECK(s.per_rank[1].busy == 1.0);
  CHECK(s.per_rank[1].comm_wait == 3.0);
  CHECK(s.per_rank[1].idle == 8.0);
  CHECK(s.per_rank[1].span == 4.0);
  CHECK(s.per_rank[1].span_bubble_fraction == Approx(3.0 / 4.0));
  CHECK(s.total_comm_wait == 6.0);
  CHECK(s.bubble_fraction == Approx(11.0 / 18.0));
  CHECK(s.ideal_time == 6.0);
  CHECK(s.bubble_vs_ideal == Approx(3.0 / 6.0));
}

TEST_CASE("summarize: origin, idle ranks, zero-length spans and empty timelines", "[trace][stats]") {
  SECTION("a measured clock that does not start at zero") {
    Timeline t;
    t.ranks = 3;  // rank 2 ran nothing
    t.unit = "us";
    t.spans = {span(0, Op::F, 0, 0, 1000, 1010), span(1, Op::F, 1, 0, 1010, 1040),
               span(1, Op::B, 1, 0, 1040, 1040)};
    const TimelineStats s = summarize(t);
    CHECK(s.origin == 1000.0);
    CHECK(s.makespan == 40.0);
    CHECK(s.per_rank[0].idle == 30.0);
    CHECK(s.per_rank[1].busy == 30.0);
    CHECK(s.per_rank[2].actions == 0);
    CHECK(s.per_rank[2].span == 0.0);
    CHECK(s.per_rank[2].first_start == 1000.0);
    CHECK(s.per_rank[2].idle == 40.0);
    CHECK(s.per_rank[2].bubble_fraction == 1.0);
    CHECK(s.per_rank[2].span_bubble_fraction == 0.0);
    CHECK(s.bubble_fraction == Approx((30.0 + 10.0 + 40.0) / 120.0));
  }
  SECTION("no spans at all") {
    Timeline t;
    t.ranks = 2;
    const TimelineStats s = summarize(t);
    CHECK(s.makespan == 0.0);
    CHECK(s.bubble_fraction == 0.0);
    CHECK(s.bubble_vs_ideal == 0.0);
    CHECK(s.per_rank.size() == 2);
    CHECK(summarize(Timeline{}).per_rank.empty());
  }
}

TEST_CASE("summarize: a readable report", "[trace][stats]") {
  const std::string report = to_string(summarize(hand_1f1b()));
  CHECK_THAT(report, Catch::Contains("3 ranks, 24 spans"));
  CHECK_THAT(report, Catch::Contains("makespan 18 step"));
  CHECK_THAT(report, Catch::Contains("bubble 33.3%"));
  CHECK_THAT(report, Catch::Contains("50.0% above the ideal 12 step"));
  CHECK_THAT(report, Catch::Contains("F=12 B=12"));
}

TEST_CASE("validate_timeline: every bad span is named", "[trace][stats][errors]") {
  const auto with = [](const Span& bad) {
    Timeline t;
    t.ranks = 2;
    t.unit = "us";
    t.spans = {span(0, Op::F, 0, 0, 0, 1), bad};
    return t;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  std::string m = error_message([&] { (void)summarize(with(span(1, Op::F, 1, 3, 5, 4))); });
  CHECK_THAT(m, Catch::Contains("span 1 (F3@s1 on rank 1)") && Catch::Contains("ends before it starts"));
  m = error_message([&] { (void)summarize(with(span(1, Op::B, 1, 2, nan, 4))); });
  CHECK_THAT(m, Catch::Contains("span 1 (B2@s1 on rank 1)") && Catch::Contains("not a finite number"));
  m = error_message([&] { (void)summarize(with(span(1, Op::B, 1, 2, 0, inf))); });
  CHECK_THAT(m, Catch::Contains("span 1") && Catch::Contains("not a finite number"));
  m = error_message([&] { (void)summarize(with(span(2, Op::F, 2, 0, 0, 1))); });
  CHECK_THAT(
      m, Catch::Contains("span 1 (F0@s2 on rank 2)") && Catch::Contains("outside the timeline's 2 ranks"));
  m = error_message([&] { (void)summarize(with(span(-1, Op::F, 0, 0, 0, 1))); });
  CHECK_THAT(m, Catch::Contains("rank -1 is outside"));
  m = error_message([&] { (void)summarize(with(span(1, Op::F, 1, -1, 0, 1))); });
  CHECK_THAT(m, Catch::Contains("negative") && Catch::Contains("span 1"));
  m = error_message([&] { (void)summarize(with(span(1, Op::F, 1, 0, 0, 1, Lane::comm))); });
  CHECK_THAT(m, Catch::Contains("compute action is on the comm lane") && Catch::Contains("Lane::compute"));
  Timeline negative;
  negative.ranks = -1;
  m = error_message([&] { (void)summarize(negative); });
  CHECK_THAT(m, Catch::Contains("rank count is negative"));
  // Every writer validates before writing anything.
  std::ostringstream json;
  CHECK_THROWS_AS(write_chrome_trace(json, with(span(1, Op::F, 1, 0, nan, 1))), ppsched::error);
  CHECK(json.str().empty());
  std::ostringstream svg;
  CHECK_THROWS_AS(write_svg(svg, with(span(1, Op::F, 1, 0, 2, 1))), ppsched::error);
  CHECK(svg.str().empty());
  CHECK_THROWS_AS(to_ascii(with(span(5, Op::F, 1, 0, 0, 1))), ppsched::error);
}

// ====================================================================== compare

TEST_CASE("compare: a timeline against itself", "[trace][compare]") {
  const Timeline t = hand_1f1b_with_comm();
  const TimelineComparison c = compare(t, t);
  CHECK(c.scale == 1.0);
  CHECK(c.deviation_unit == "step");
  REQUIRE(c.makespan_ratio.has_value());
  CHECK(*c.makespan_ratio == 1.0);
  CHECK(c.bubble_difference_pp == 0.0);
  CHECK(c.matched == t.spans.size());
  CHECK(c.only_in_measured.empty());
  CHECK(c.only_in_predicted.empty());
  CHECK(c.start.max_abs == 0.0);
  CHECK(c.end.rms == 0.0);
  REQUIRE(c.per_rank.size() == 3);
  for (const RankComparison& r : c.per_rank) CHECK(r.difference_pp == 0.0);
}

TEST_CASE("compare: measured in us, predicted in ms, one action late", "[trace][compare]") {
  const Timeline predicted = [] {
    Timeline t = hand_1f1b();
    t.unit = "ms";
    return t;
  }();
  Timeline measured = predicted;
  measured.unit = "us";
  for (Span& s : measured.spans) {
    // The run's clock started 50 us before the step; the last backward on rank 0 ran
    // 500 us (0.5 ms) longer than predicted.
    s.start = s.start * 1000.0 + 50.0;
    s.end = s.end * 1000.0 + 50.0;
    if (s.rank == 0 && s.action.op == Op::B && s.action.microbatch == 3) s.end += 500.0;
  }
  const TimelineComparison c = compare(measured, predicted);
  REQUIRE(c.scale.has_value());
  CHECK(*c.scale == Approx(1e-3));
  CHECK(c.deviation_unit == "ms");
  CHECK(c.measured.makespan == Approx(18500.0));
  REQUIRE(c.makespan_ratio.has_value());
  CHECK(*c.makespan_ratio == Approx(18.5 / 18.0));
  CHECK(c.matched == 24);
  CHECK(c.start.max_abs == Approx(0.0).margin(1e-9));
  CHECK(c.end.count == 24);
  CHECK(c.end.max_abs == Approx(0.5));
  CHECK(c.end.mean == Approx(0.5 / 24.0));
  CHECK(c.end.mean_abs == Approx(0.5 / 24.0));
  CHECK(c.end.rms == Approx(std::sqrt(0.25 / 24.0)));
  CHECK(c.end.worst_rank == 0);
  CHECK(c.end.worst_action == Action{Op::B, 0, 3});
  CHECK(c.duration.max_abs == Approx(0.5));
  // Measured: rank 0 busy 12.5 of 18.5, ranks 1 and 2 busy 12 of 18.5.
  const double measured_bubble = (3 * 18.5 - 36.5) / (3 * 18.5);
  CHECK(c.measured.bubble_fraction == Approx(measured_bubble));
  CHECK(c.bubble_difference_pp == Approx((measured_bubble - 1.0 / 3.0) * 100.0));
  CHECK(c.per_rank[0].measured_bubble == Approx(6.0 / 18.5));
  CHECK(c.per_rank[0].difference_pp == Approx((6.0 / 18.5 - 6.0 / 18.0) * 100.0));
  CHECK(c.per_rank[1].difference_pp == Approx((6.5 / 18.5 - 6.0 / 18.0) * 100.0));

  const std::string text = to_string(c);
  CHECK_THAT(text, Catch::Contains("measured 18500 us, predicted 18 ms"));
  CHECK_THAT(text, Catch::Contains("ratio 1.028"));
  CHECK_THAT(text, Catch::Contains("B3@s0 on rank 0"));
  CHECK_THAT(text, Catch::Contains("only in measured: 0"));
}

TEST_CASE("compare: units that cannot be related compare shapes only", "[trace][compare]") {
  Timeline predicted = hand_1f1b();  // unit "step"
  Timeline measured = predicted;
  measured.unit = "us";
  for (Span& s : measured.spans) {
    s.start *= 7.0;
    s.end *= 7.0;
  }
  TimelineComparison c = compare(measured, predicted);
  CHECK_FALSE(c.scale.has_value());
  CHECK_FALSE(c.makespan_ratio.has_value());
  CHECK(c.deviation_unit == "makespan");
  CHECK(c.measured.makespan == 126.0);
  CHECK(c.start.max_abs == Approx(0.0).margin(1e-12));
  CHECK(c.bubble_difference_pp == Approx(0.0).margin(1e-9));
  CHECK_THAT(to_string(c), Catch::Contains("no ratio"));

  // With a scale from the caller the same pair compares in absolute time.
  c = compare(measured, predicted, CompareOptions{1.0 / 7.0});
  REQUIRE(c.makespan_ratio.has_value());
  CHECK(*c.makespan_ratio == Approx(1.0));
  CHECK(c.deviation_unit == "step");
  CHECK(c.end.max_abs == Approx(0.0).margin(1e-9));
}

TEST_CASE("compare: every time unit against every other, both ways; a model's own unit only against itself",
          "[trace][compare][units]") {
  // One step written in each scale (the same one in seconds), compared with itself in every
  // other: TimeUnit's converter gives the scale, so the makespans agree and no action deviates.
  const std::vector<std::pair<std::string, double>> units = {
      {"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"\xC2\xB5s", 1e-6}, {"ns", 1e-9}};
  const auto in = [](const std::string& unit, double seconds) {
    Timeline t = hand_1f1b();
    t.unit = unit;
    for (Span& s : t.spans) {
      s.start *= 1e-3 / seconds;  // one "step" of hand_1f1b is 1 ms
      s.end *= 1e-3 / seconds;
    }
    return t;
  };
  for (const auto& [measured_unit, measured_seconds] : units) {
    for (const auto& [predicted_unit, predicted_seconds] : units) {
      INFO("measured in " << measured_unit << ", predicted in " << predicted_unit);
      const TimelineComparison c = compare(in(measured_unit, measured_seconds), in(predicted_unit, predicted_seconds));
      REQUIRE(c.scale.has_value());
      CHECK(*c.scale == Approx(measured_seconds / predicted_seconds).epsilon(1e-12));
      CHECK(c.deviation_unit == predicted_unit);
      CHECK(c.deviation_unit.text() == predicted_unit);  // printed as the prediction spells it
      REQUIRE(c.makespan_ratio.has_value());
      CHECK(*c.makespan_ratio == Approx(1.0).epsilon(1e-12));
      CHECK(c.end.max_abs == Approx(0.0).margin(1e-9 * c.predicted.makespan));
    }
    // A unit of the model's own against a scale, either way: shapes only.
    Timeline own = hand_1f1b();
    own.unit = "cycles";
    for (const bool own_measured : {true, false}) {
      const Timeline scaled = in(measured_unit, measured_seconds);
      const TimelineComparison c = own_measured ? compare(own, scaled) : compare(scaled, own);
      CHECK_FALSE(c.scale.has_value());
      CHECK(c.deviation_unit == "makespan");
      CHECK(c.start.max_abs == Approx(0.0).margin(1e-12));
    }
  }
  // Two different model units, or two timelines without a unit: shapes only too; one name is one unit.
  Timeline a = hand_1f1b(), b = hand_1f1b();
  a.unit = "cycles";
  CHECK_FALSE(compare(a, b).scale.has_value());  // "cycles" against "step"
  a.unit = b.unit = TimeUnit{};
  CHECK_FALSE(compare(a, b).scale.has_value());
  a.unit = b.unit = "cycles";
  CHECK(compare(a, b).scale == 1.0);
}

TEST_CASE("compare: actions present in only one timeline, repeated actions", "[trace][compare]") {
  Timeline predicted;
  predicted.ranks = 2;
  predicted.unit = "us";
  predicted.spans = {span(0, Op::F, 0, 0, 0, 1), span(0, Op::F, 0, 1, 1, 2), span(1, Op::F, 1, 0, 1, 2),
                     span(1, Op::SEND_B, 1, 0, 2, 3, Lane::comm)};
  Timeline measured;
  measured.ranks = 2;
  measured.unit = "us";
  // F1 on rank 0 is missing; F0 on rank 1 appears twice (the second one unmatched);
  // a BW nobody predicted appears on rank 1.
  measured.spans = {span(1, Op::F, 1, 0, 1, 2), span(0, Op::F, 0, 0, 0, 1), span(1, Op::F, 1, 0, 4, 5),
                    span(1, Op::BW, 1, 0, 5, 6), span(1, Op::SEND_B, 1, 0, 2, 3, Lane::comm)};
  const TimelineComparison c = compare(measured, predicted);
  CHECK(c.matched == 3);
  CHECK(c.start.max_abs == 0.0);  // the earlier F0 on rank 1 is the one matched
  REQUIRE(c.only_in_predicted.size() == 1);
  CHECK(c.only_in_predicted[0] == predicted.spans[1]);
  REQUIRE(c.only_in_measured.size() == 2);
  CHECK(c.only_in_measured[0] == measured.spans[2]);
  CHECK(c.only_in_measured[1] == measured.spans[3]);
  const std::string text = to_string(c);
  CHECK_THAT(text, Catch::Contains("only in measured: 2: F0@s1 on rank 1, BW0@s1 on rank 1"));
  CHECK_THAT(text, Catch::Contains("only in predicted: 1: F1@s0 on rank 0"));
}

TEST_CASE("compare: errors", "[trace][compare][errors]") {
  Timeline a = hand_1f1b();
  Timeline b = a;
  b.ranks = 4;
  CHECK_THAT(error_message([&] { (void)compare(a, b); }),
             Catch::Contains("3 ranks but the predicted one has 4") && Catch::Contains("same schedule"));
  CHECK_THAT(error_message([&] { (void)compare(a, a, CompareOptions{-2.0}); }),
             Catch::Contains("measured_to_predicted"));
  CHECK_THAT(error_message([&] { (void)compare(a, a, CompareOptions{std::nan("")}); }),
             Catch::Contains("measured_to_predicted"));
  a.spans[3].end = -1.0;
  CHECK_THAT(error_message([&] { (void)compare(a, b); }), Catch::Contains("span 3 (B0@s0 on rank 0)"));
}

// ====================================================================== Chrome trace

TEST_CASE("chrome trace: valid JSON with one process per rank and compute/comm threads", "[trace][chrome]") {
  const Timeline t = hand_1f1b_with_comm();
  const Json doc = parse_json(to_chrome_trace(t, {0.0, "rank", "1f1b p=3 m=4"}));
  const Json& events = doc["traceEvents"];
  REQUIRE(events.kind == Json::Kind::array);

  std::size_t complete = 0;
  std::map<std::pair<double, double>, std::string> thread_names;  // (pid, tid) -> name
  std::map<double, std::string> process_names;
  std::map<double, double> process_order;
  std::multiset<std::string> seen;  // "rank:tid:name:ts:dur:stage:mb"
  for (const Json& e : events.items) {
    const std::string ph = e["ph"].string;
    if (ph == "M") {
      const std::string name = e["name"].string;
      if (name == "process_name") process_names[e["pid"].number] = e["args"]["name"].string;
      if (name == "process_sort_index") process_order[e["pid"].number] = e["args"]["sort_index"].number;
      if (name == "thread_name") thread_names[{e["pid"].number, e["tid"].number}] = e["args"]["name"].string;
      continue;
    }
    REQUIRE(ph == "X");
    ++complete;
    const Json& args = e["args"];
    const auto rank = static_cast<std::int32_t>(args["rank"].number);
    CHECK(e["pid"].number == rank + 1);
    const bool compute = e["cat"].string == "compute";
    CHECK(e["tid"].number == (compute ? 1.0 : 2.0));
    CHECK(e["name"].string ==
          args["op"].string + std::to_string(static_cast<int>(args["microbatch"].number)));
    seen.insert(std::to_string(rank) + ":" + args["op"].string + ":" + std::to_string(args["stage"].number) +
                ":" + std::to_string(args["microbatch"].number) + ":" + std::to_string(e["ts"].number) + ":" +
                std::to_string(e["dur"].number));
  }
  CHECK(complete == t.spans.size());
  // "step" is not a time unit: one step is one microsecond, so ts and dur are the times.
  std::multiset<std::string> expected;
  for (const Span& s : t.spans) {
    expected.insert(std::to_string(s.rank) + ":" + std::string{op_name(s.action.op)} + ":" +
                    std::to_string(static_cast<double>(s.action.stage)) + ":" +
                    std::to_string(static_cast<double>(s.action.microbatch)) + ":" + std::to_string(s.start) +
                    ":" + std::to_string(s.end - s.start));
  }
  CHECK(seen == expected);
  for (std::int32_t r = 0; r < 3; ++r) {
    const double pid = r + 1;
    CHECK(process_names[pid] == "rank " + std::to_string(r));
    CHECK(process_order[pid] == r);
    CHECK(thread_names[{pid, 1.0}] == "compute");
    CHECK(thread_names[{pid, 2.0}] == "comm");
  }
  CHECK(doc["otherData"]["unit"].string == "step");
  CHECK(doc["otherData"]["title"].string == "1f1b p=3 m=4");
  CHECK(doc["otherData"]["microseconds_per_unit"].number == 1.0);
}

TEST_CASE("chrome trace: times in microseconds from the origin", "[trace][chrome]") {
  Timeline t;
  t.ranks = 1;
  t.unit = "ms";
  t.spans = {span(0, Op::F, 0, 2, 10.0, 10.5), span(0, Op::B, 0, 2, 11.0, 12.25)};
  Json doc = parse_json(to_chrome_trace(t));
  std::vector<std::pair<double, double>> times;
  for (const Json& e : doc["traceEvents"].items) {
    if (e["ph"].string == "X") times.emplace_back(e["ts"].number, e["dur"].number);
  }
  CHECK(times == std::vector<std::pair<double, double>>{{0.0, 500.0}, {1000.0, 1250.0}});
  CHECK(doc["otherData"]["origin"].number == 10.0);
  // No comm lane in the timeline: no comm thread.
  for (const Json& e : doc["traceEvents"].items) CHECK(e["tid"].number != 2.0);

  ChromeTraceOptions options;
  options.microseconds_per_unit = 2.0;
  doc = parse_json(to_chrome_trace(t, options));
  CHECK(doc["traceEvents"].items.back()["dur"].number == 2.5);
  options.microseconds_per_unit = -1.0;
  CHECK_THAT(error_message([&] { (void)to_chrome_trace(t, options); }),
             Catch::Contains("microseconds_per_unit"));
}

TEST_CASE("chrome trace: user strings are escaped", "[trace][chrome]") {
  Timeline t;
  t.ranks = 1;
  t.unit = "odd \"unit\" \\ with\nnewline\ttab \x01 and a bad byte \xff";
  t.spans = {span(0, Op::F, 0, 0, 0, 1)};
  ChromeTraceOptions options;
  options.process_label = "gpu \"</script>\"";
  options.title = "caf\xC3\xA9 \xF0\x9F\x9A\x80";  // é and a 4-byte code point, kept as they are
  const std::string text = to_chrome_trace(t, options);
  const Json doc = parse_json(text);
  CHECK(doc["otherData"]["unit"].string ==
        "odd \"unit\" \\ with\nnewline\ttab \x01 and a bad byte \xEF\xBF\xBD");
  CHECK(doc["otherData"]["title"].string == options.title);
  bool named = false;
  for (const Json& e : doc["traceEvents"].items) {
    if (e["name"].string == "process_name") named = e["args"]["name"].string == "gpu \"</script>\" 0";
  }
  CHECK(named);
}

TEST_CASE("chrome trace: empty timelines are valid too", "[trace][chrome]") {
  Timeline t;
  const Json doc = parse_json(to_chrome_trace(t));
  CHECK(doc["traceEvents"].items.empty());
  t.ranks = 2;
  CHECK(parse_json(to_chrome_trace(t))["traceEvents"].items.size() == 8);  // 4 metadata per rank
}

// ====================================================================== SVG

TEST_CASE("svg: well-formed, a box and a legend entry per operation present", "[trace][svg]") {
  const Timeline t = hand_1f1b_with_comm();
  const std::string text = to_svg(t);
  const XmlElement root = parse_xml(text);
  CHECK(root.name == "svg");
  CHECK(root.attributes.at("xmlns") == "http://www.w3.org/2000/svg");

  // A box is a rect with a tooltip; one per span, coloured by its operation.
  std::map<std::string, std::size_t> boxes_by_fill;
  std::size_t boxes = 0;
  for (const XmlElement* rect : all(root, "rect")) {
    if (rect->children.empty()) continue;
    ++boxes;
    ++boxes_by_fill[rect->attributes.at("fill")];
    REQUIRE(rect->children[0].name == "title");
  }
  CHECK(boxes == t.spans.size());
  const TimelineStats s = summarize(t);
  for (int op = 0; op < op_count; ++op) {
    CHECK(boxes_by_fill[std::string{detail::svg_fill(static_cast<Op>(op))}] ==
          static_cast<std::size_t>(s.count(static_cast<Op>(op))));
  }

  const std::multiset<std::string> labels = texts(root);
  for (const Op op : {Op::F, Op::B, Op::SEND_F, Op::RECV_F, Op::SEND_B, Op::RECV_B}) {
    CHECK(labels.count(std::string{op_name(op)} + " " + std::string{op_description(op)}) == 1);
  }
  CHECK(labels.count("BI backward for input") == 0);  // absent ops have no legend entry
  CHECK(labels.count("idle") == 1);
  CHECK(labels.count("rank 2") == 1);
  CHECK(labels.count("comm") == 3);
  CHECK(labels.count("time from the first start (step)") == 1);
  // The hatched idle pattern exists and the rank rows use it.
  CHECK(all(root, "pattern").size() == 1);
  CHECK(text.find("url(#ppsched-idle)") != std::string::npos);
}

TEST_CASE("svg: readable at 8 ranks x 32 micro-batches, every micro-batch labelled", "[trace][svg]") {
  const Timeline t = run_programs(one_f_one_b_programs(8, 32), 1.0, 2.0);
  const XmlElement root = parse_xml(to_svg(t));
  // Labels are text elements whose content is a micro-batch number inside a box group.
  std::size_t labelled = 0;
  for (const XmlElement* g : all(root, "g")) {
    for (const XmlElement& child : g->children) {
      const bool number =
          !child.text.empty() && child.text.find_first_not_of("0123456789") == std::string::npos;
      if (child.name == "text" && child.attributes.count("fill") != 0 && number) {
        ++labelled;
        CHECK(std::stod(child.attributes.at("font-size")) >= 7.0);
      }
    }
  }
  CHECK(labelled == t.spans.size());
  // Time axis: ticks from 0 past the makespan (117) in steps of 1, 2 or 5 x 10^k.
  const std::multiset<std::string> labels = texts(root);
  CHECK(labels.count("0") >= 1);
  CHECK(labels.count("100") >= 1);
}

TEST_CASE("svg: overlapping actions on one lane are stacked, titles escaped", "[trace][svg]") {
  Timeline t;
  t.ranks = 1;
  t.unit = "us & <more>";
  t.spans = {span(0, Op::F, 0, 0, 0, 4), span(0, Op::SEND_F, 0, 0, 4, 6, Lane::comm),
             span(0, Op::RECV_B, 0, 0, 5, 7, Lane::comm)};
  SvgOptions options;
  options.title = "<script>alert('x')</script> & \"quotes\"";
  options.comm_row_height = 12.0;
  const XmlElement root = parse_xml(to_svg(t, options));
  CHECK(texts(root).count(options.title) == 1);
  std::vector<double> comm_heights;
  for (const XmlElement* rect : all(root, "rect")) {
    if (!rect->children.empty() && rect->attributes.at("fill") == detail::svg_fill(Op::SEND_F)) {
      comm_heights.push_back(std::stod(rect->attributes.at("height")));
    }
    if (!rect->children.empty() && rect->attributes.at("fill") == detail::svg_fill(Op::RECV_B)) {
      comm_heights.push_back(std::stod(rect->attributes.at("height")));
      CHECK(rect->children[0].text == "RECV_B0@s0 on rank 0: 5 to 7 us & <more>");
    }
  }
  CHECK(comm_heights == std::vector<double>{6.0, 6.0});

  options.width = 10.0;
  CHECK_THAT(error_message([&] { (void)to_svg(t, options); }), Catch::Contains("width"));
}

// ====================================================================== ASCII

TEST_CASE("ascii: unit-cost 1F1B is drawn exactly, one column per step", "[trace][ascii]") {
  // Worked out from the spans listed above hand_1f1b.
  const std::string expected =
      "        0         10\n"
      "rank 0 |FFF....BBFBB.BB.BB|\n"
      "rank 1 |.FF..BBFBBFBB.BB..|\n"
      "rank 2 |..FBBFBBFBBFBB....|\n"
      "F forward, B backward, . idle; 1 column = 1 step\n";
  CHECK(to_ascii(hand_1f1b()) == expected);
  // The list scheduler's 1F1B is the same picture.
  CHECK(to_ascii(run_programs(one_f_one_b_programs(3, 4), 1.0, 2.0)) == expected);
}

TEST_CASE("ascii: micro-batch digits", "[trace][ascii]") {
  AsciiOptions options;
  options.microbatch_digits = true;
  options.legend = false;
  const std::string expected =
      "        0              5              10             15\n"
      "rank 0 |F0 F1 F2 .. .. .. .. B0 B0 F3 B1 B1 .. B2 B2 .. B3 B3|\n"
      "rank 1 |.. F0 F1 .. .. B0 B0 F2 B1 B1 F3 B2 B2 .. B3 B3 .. ..|\n"
      "rank 2 |.. .. F0 B0 B0 F1 B1 B1 F2 B2 B2 F3 B3 B3 .. .. .. ..|\n";
  CHECK(to_ascii(hand_1f1b(), options) == expected);
}

TEST_CASE("ascii: coarse cells show the action covering most of them", "[trace][ascii]") {
  Timeline t;
  t.ranks = 2;
  t.unit = "ms";
  // Cells of 1 ms over a 6 ms makespan (6 columns forced). Rank 0: BI covers cell 0 and
  // 0.1 of cell 1, which is therefore idle; BW fills cells 2-3 and half of cell 4, a tie with
  // idle that the action wins; cell 5 is idle. On rank 1's comm lane RECV_F ties in cell 0
  // and SEND_F covers too little of cell 5.
  t.spans = {span(0, Op::BI, 0, 0, 0.0, 1.1), span(0, Op::BW, 0, 0, 2.0, 4.5), span(1, Op::F, 1, 0, 0.0, 6.0),
             span(1, Op::RECV_F, 1, 0, 0.0, 0.5, Lane::comm),
             span(1, Op::SEND_F, 1, 0, 5.8, 6.0, Lane::comm)};
  AsciiOptions options;
  options.columns = 6;
  options.ruler = false;
  options.comm_rows = true;
  const std::string expected =
      "rank 0 |I.WWW.|\n"
      "  comm |......|\n"
      "rank 1 |FFFFFF|\n"
      "  comm |r.....|\n"
      "F forward, I backward for input, W backward for weights, r receive activation, . idle; 1 column = 1 "
      "ms\n";
  CHECK(to_ascii(t, options) == expected);
  // Not whole-unit: automatic mode uses max_columns cells.
  options.columns = 0;
  options.max_columns = 12;
  options.comm_rows = false;
  options.legend = false;
  CHECK(to_ascii(t, options) == "rank 0 |II..WWWWW...|\nrank 1 |FFFFFFFFFFFF|\n");
  options.max_columns = 0;
  CHECK_THAT(error_message([&] { (void)to_ascii(t, options); }), Catch::Contains("max_columns"));
}

// ====================================================================== CSV

TEST_CASE("csv: one row per span, sorted by rank and start, times exact", "[trace][csv]") {
  Timeline t = hand_1f1b_with_comm();
  t.unit = "ms\nsecond line";
  t.spans[0].start = 0.1;  // not exactly representable: must still read back identically
  t.spans.back().action.group = 7;
  const std::string text = to_timeline_csv(t);
  std::istringstream in(text);
  std::string line;
  REQUIRE(std::getline(in, line));
  CHECK(line == "# ppsched timeline: ranks 3, unit ms\xEF\xBF\xBDsecond line");
  REQUIRE(std::getline(in, line));
  CHECK(line == "rank,lane,op,stage,microbatch,group,start,end");
  std::multiset<std::tuple<std::int32_t, std::string, std::string, std::int32_t, std::int32_t, std::uint32_t,
                           double, double>>
      rows;
  std::pair<std::int32_t, double> previous{-1, 0.0};
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    std::string field;
    while (std::getline(fields, field, ',')) f.push_back(field);
    REQUIRE(f.size() == 8);
    const std::pair<std::int32_t, double> key{std::stoi(f[0]), std::stod(f[6])};
    CHECK(previous <= key);
    previous = key;
    rows.emplace(std::stoi(f[0]), f[1], f[2], std::stoi(f[3]), std::stoi(f[4]),
                 static_cast<std::uint32_t>(std::stoul(f[5])), std::stod(f[6]), std::stod(f[7]));
  }
  decltype(rows) expected;
  for (const Span& s : t.spans) {
    expected.emplace(s.rank, s.lane == Lane::compute ? "compute" : "comm", std::string{op_name(s.action.op)},
                     s.action.stage, s.action.microbatch, s.action.group, s.start, s.end);
  }
  CHECK(rows == expected);
}

TEST_CASE("parse_timeline_csv reads back what write_timeline_csv writes, and names a bad cell", "[trace][csv]") {
  Timeline t;
  t.ranks = 2;
  t.unit = "ms";
  t.spans = {Span{0, Action{Op::F, 0, 0, 0}, Lane::compute, 0.0, 1.25},
             Span{0, Action{Op::SEND_F, 0, 0, 3}, Lane::comm, 1.25, 1.5},
             Span{1, Action{Op::RECV_F, 1, 0, 3}, Lane::comm, 0.0, 1.5},
             Span{1, Action{Op::F, 1, 0, 0}, Lane::compute, 1.5, 2.0 / 3.0 + 2.0}};
  const Timeline back = parse_timeline_csv(to_timeline_csv(t), "t.csv");
  CHECK(back.ranks == 2);
  CHECK(back.unit == "ms");
  CHECK(to_timeline_csv(back) == to_timeline_csv(t));
  CHECK_THROWS_WITH(parse_timeline_csv("rank,lane\n"), Catch::Contains("ppsched timeline: ranks N"));
  const std::string bad = "# ppsched timeline: ranks 1, unit ms\nrank,lane,op,stage,microbatch,group,start,end\n0,compute,G,0,0,0,0,1\n";
  CHECK_THROWS_WITH(parse_timeline_csv(bad, "t.csv"), Catch::Contains("line 3, column 3"));
}

TEST_CASE("load_timeline_csv reads a file, names a missing one, and stops at the bound", "[trace][csv]") {
  Timeline t;
  t.ranks = 1;
  t.unit = "us";
  t.spans = {Span{0, Action{Op::F, 0, 0, 0}, Lane::compute, 0.0, 0.75}};
  const auto path = std::filesystem::temp_directory_path() / "ppsched_test_trace_timeline.csv";
  {
    std::ofstream out(path);
    write_timeline_csv(out, t);
  }
  CHECK(to_timeline_csv(load_timeline_csv(path)) == to_timeline_csv(t));
  // Past the bound the error names the file, as it does a file that is not there.
  const std::string csv = to_timeline_csv(t);
  CHECK_THROWS_WITH(load_timeline_csv(path, csv.size() - 1),
                    Catch::Contains("timeline '" + path.string() + "'") && Catch::Contains("is larger than"));
  std::filesystem::remove(path);
  CHECK_THROWS_WITH(load_timeline_csv(path), Catch::Contains("timeline '" + path.string() + "'") &&
                                                 Catch::Contains("cannot be opened"));
}
