// Internals of <ppsched/schedule/csv.hpp>, which includes this file: the cell grammar of the
// PyTorch-format CSV and its reader's steps. They are in ppsched::detail and not part of the API:
// no example or page uses them, and they may change in any release (docs/architecture.md).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <iterator>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/text_input.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

inline constexpr std::string_view csv_cell_grammar =
    "write each cell as <stage><op><micro-batch> with op one of F, B, I (or BI), W (or BW), SEND_F, RECV_F, "
    "SEND_B, RECV_B, R, OFFLOAD, RELOAD, e.g. 0F1, 1I0, 1W0, 2SEND_F3, 1R0; a cell may end in #<group>; an overlapped pair is "
    "(<action>;<action>)OVERLAP_F_B; leave a cell empty for an idle step";

// One cell's position, for messages: rows and columns count from 1 as a spreadsheet shows
// them; the rank is the row's index from 0.
struct CsvPlace {
  std::size_t row = 0;
  std::size_t column = 0;
};

[[nodiscard]] inline std::string describe(const CsvPlace& at) {
  return detail::concat("row ", at.row, " (rank ", at.row - 1, "), column ", at.column);
}

// Splits CSV text into rows of cells as Python's csv.reader does with the default dialect:
// ',' separates, '"' quotes ('""' inside quotes is a quote), a line ends at \n, \r\n or \r,
// and a blank line is a row with no cells.
struct CsvCell {
  std::string text;
  CsvPlace at;
};

[[nodiscard]] inline std::vector<std::vector<CsvCell>> split_csv(std::string_view text,
                                                                 const std::string& source) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a byte-order mark some editors write
  std::vector<std::vector<CsvCell>> rows;
  std::vector<CsvCell> row;
  CsvCell cell;
  bool quoted = false;
  bool cell_started = false;  // distinguishes the empty row of a blank line from one empty cell
  std::size_t line = 1, column = 1;
  const auto end_cell = [&] {
    cell.at = {line, column};
    row.push_back(std::move(cell));
    cell = CsvCell{};
    ++column;
  };
  const auto end_row = [&] {
    if (cell_started || !row.empty()) end_cell();
    rows.push_back(std::move(row));
    row.clear();
    cell_started = false;
    ++line;
    column = 1;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          cell.text += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cell.text += c;
      }
      continue;
    }
    if (c == '"') {
      quoted = true;
      cell_started = true;
    } else if (c == ',') {
      cell_started = true;
      end_cell();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_row();
    } else {
      cell.text += c;
      cell_started = true;
    }
  }
  if (quoted)
    detail::fail({detail::concat("schedule CSV '", source, "'"), "a quoted cell is never closed", describe({line, column}),
          "close the cell with a '\"'"});
  if (cell_started || !row.empty()) end_row();
  return rows;
}

[[nodiscard]] inline std::string_view trimmed(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Reads the leading decimal digits of `s` into `value`; nullopt when there are none,
// the number of digits read otherwise. Throws when the number does not fit.
[[nodiscard]] inline std::optional<std::size_t> leading_number(std::string_view s, std::int64_t limit,
                                                               std::int64_t& value,
                                                               const std::string& subject,
                                                               const std::string& where,
                                                               std::string_view what) {
  std::size_t n = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0) return std::nullopt;
  std::int64_t parsed = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + n, parsed);
  if (ec != std::errc{} || ptr != s.data() + n || parsed > limit)
    detail::fail({subject, detail::concat("the ", what, " '", s.substr(0, n), "' is too large"), where,
          detail::concat("a ", what, " is at most ", limit)});
  value = parsed;
  return n;
}

enum class CellOp : std::uint8_t { action, pytorch_only };

struct ParsedCell {
  Action action{};
  CellOp kind = CellOp::action;
  std::string_view pytorch_name{};  // for pytorch_only cells
};

// Parses one simple cell (no OVERLAP_F_B): <stage><op><micro-batch>[#group].
[[nodiscard]] inline ParsedCell parse_simple_cell(std::string_view cell, const std::string& subject,
                                                  const std::string& where) {
  const auto bad = [&](std::string_view problem) -> ParsedCell {
    detail::fail({subject, detail::concat("cannot read cell '", cell, "': ", problem), where, std::string(csv_cell_grammar)});
  };
  constexpr std::int64_t index_limit = 2147483647;
  std::int64_t stage = 0;
  const auto stage_digits = leading_number(cell, index_limit, stage, subject, where, "stage");
  if (!stage_digits) return bad("it does not start with a stage number");
  std::string_view rest = cell.substr(*stage_digits);

  // Longest spellings first, so that SEND_F is not read as S..., and BI/BW not as B.
  struct Spelling {
    std::string_view text;
    std::optional<Op> op;  // nullopt: a PyTorch-only action
  };
  static constexpr Spelling spellings[] = {
      {"WAIT_REDUCE_GRAD", std::nullopt},  // before W, which starts them
      {"WAIT_SEND_F", std::nullopt},
      {"WAIT_SEND_B", std::nullopt},
      {"REDUCE_GRAD", std::nullopt},
      {"UNSHARD", std::nullopt},
      {"RESHARD", std::nullopt},
      {"SEND_F", Op::SEND_F},
      {"RECV_F", Op::RECV_F},
      {"SEND_B", Op::SEND_B},
      {"RECV_B", Op::RECV_B},
      {"OFFLOAD", Op::OFFLOAD},
      {"RELOAD", Op::RELOAD},
      {"BI", Op::BI},
      {"BW", Op::BW},
      {"F", Op::F},
      {"B", Op::B},
      {"I", Op::BI},
      {"W", Op::BW},
      {"R", Op::R},  // after every longer spelling that starts with R
  };
  const Spelling* found = nullptr;
  for (const Spelling& sp : spellings)
    if (rest.starts_with(sp.text)) {
      found = &sp;
      break;
    }
  if (found == nullptr) return bad(detail::concat("'", rest, "' does not start with an operation"));
  rest.remove_prefix(found->text.size());

  ParsedCell parsed;
  parsed.action.stage = static_cast<std::int32_t>(stage);
  if (!found->op) {
    // PyTorch writes these without a micro-batch; tolerate one rather than guess at intent.
    std::int64_t ignored = 0;
    if (const auto digits = leading_number(rest, index_limit, ignored, subject, where, "micro-batch"))
      rest.remove_prefix(*digits);
    if (!rest.empty()) return bad(detail::concat("unexpected '", rest, "' after the operation"));
    parsed.kind = CellOp::pytorch_only;
    parsed.pytorch_name = found->text;
    return parsed;
  }
  parsed.action.op = *found->op;
  std::int64_t microbatch = 0;
  // One below the int32 limit, so that the inferred count (largest + 1) still fits.
  const auto mb_digits = leading_number(rest, index_limit - 1, microbatch, subject, where, "micro-batch");
  if (!mb_digits) return bad(detail::concat("the operation ", found->text, " needs a micro-batch number after it"));
  rest.remove_prefix(*mb_digits);
  parsed.action.microbatch = static_cast<std::int32_t>(microbatch);
  if (rest.starts_with('#')) {
    rest.remove_prefix(1);
    std::int64_t group = 0;
    const auto group_digits = leading_number(rest, 4294967295, group, subject, where, "group");
    if (!group_digits) return bad("'#' must be followed by a group number");
    rest.remove_prefix(*group_digits);
    parsed.action.group = static_cast<std::uint32_t>(group);
  }
  if (!rest.empty()) return bad(detail::concat("unexpected '", rest, "' after the micro-batch"));
  return parsed;
}

}  // namespace detail

}  // namespace ppsched
