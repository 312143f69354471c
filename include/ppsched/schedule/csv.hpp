// Schedules as CSV in the format of PyTorch's torch.distributed.pipelining (the files its
// _dump_csv writes and _load_csv reads), so a schedule moves between PyTorch and ppsched in
// both directions, compute-only or with communication.
//
// The format: one row per rank, row i is rank i's program in issue order, one action per
// cell. A cell is <stage><op><micro-batch>, e.g. 0F1, 1I0, 1W0, 2B3, 2SEND_F3, 3RECV_B0.
// PyTorch spells backward-for-input I and backward-for-weights W; ppsched's own spelling BI
// and BW is accepted on reading too (1BI0, 1BW0), but written as I and W, because PyTorch's
// parser would read "1BW0" as a full backward of stage 1 with no micro-batch. Empty cells
// (PyTorch's idle steps) are skipped. Quoting and \n, \r\n or \r line ends are read as
// Python's csv module writes them; rows are written with \r\n as Python's csv.writer does.
//
// Placement: PyTorch's CSV has no placement row. On reading, a stage's rank is the row its
// actions appear on (a communication action is named after the stage that owns it, which
// lives on that row's rank); a stage seen on two rows, or on none, is an error unless the
// caller passes the placement explicitly, in which case every action is checked against it.
//
// Communication groups (Action::group) have no PyTorch spelling. They are written as a
// ppsched suffix, "2SEND_F3#7", which PyTorch's parser ignores (its pattern matches a prefix
// of the cell), and read back exactly; CsvWriteOptions::write_groups = false drops them.
//
// Overlapped F&B pairs (two adjacent compute actions sharing a group) have PyTorch's
// spelling, its OVERLAP_F_B action with the two as sub-actions: "(0F1;1B0)OVERLAP_F_B", the
// sub-actions in program order. Reading such cells of two compute actions numbers the pairs
// of a row 1, 2, ... (as make_dualpipev() does and lower() keeps, so their schedules read
// back exactly), a pair moved above every id of the row when another cell names its id; an
// OVERLAP_F_B cell of anything else is read as its sub-actions in order, and
// a compute cell may carry "#<group>" too (a malformed pair, written so that validate() can
// name it). A pair whose id is not the one counting would give (a user's own numbering, or an
// id another action of the row shares) is written "(0F1;1B0)OVERLAP_F_B#5", so that every
// schedule reads back exactly; schedules of ppsched's generators and lower() never need it.
//
// Memory actions (recompute R, OFFLOAD, RELOAD) have no PyTorch spelling: PyTorch's action set
// has no recomputation, and its offload is not an action. They are written with ppsched's
// names, "1R0", "1OFFLOAD0", "1RELOAD0" (R is recompute; receives are always RECV_F / RECV_B),
// and read back exactly; PyTorch's _load_csv rejects such a file, so strip them
// (strip_memory_actions in schedule/schedule.hpp) before handing a schedule to PyTorch.
//
// Actions PyTorch has and ppsched does not: UNSHARD, RESHARD and REDUCE_GRAD (FSDP and
// gradient-reduction bookkeeping with no micro-batch and no data between stages) are
// skipped on reading, or rejected with CsvReadOptions::skip_pytorch_only_actions = false.
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

struct CsvWriteOptions {
  bool write_groups = true;            // append "#group" to grouped communication cells
  std::string_view line_end = "\r\n";  // Python's csv.writer writes \r\n
};

struct CsvReadOptions {
  std::string source = "<text>";          // names the input in error messages, e.g. the file name
  std::string name = "csv";               // Schedule::name of the result
  std::int32_t microbatches = 0;          // 0: one more than the largest micro-batch seen
  std::vector<std::int32_t> placement{};  // empty: inferred from the rows
  bool skip_pytorch_only_actions = true;  // UNSHARD, RESHARD, REDUCE_GRAD: skip, or reject
  std::size_t max_bytes = max_csv_bytes;  // read_pytorch_csv and load_pytorch_csv read no more
};

namespace detail {

// PyTorch's spelling of an operation in a cell.
[[nodiscard]] constexpr std::string_view pytorch_op_name(Op op) noexcept {
  switch (op) {
    case Op::BI:
      return "I";
    case Op::BW:
      return "W";
    default:
      return op_name(op);
  }
}

}  // namespace detail

// One cell: "1W0", "2SEND_F3", or "2SEND_F3#7" for a grouped action when write_group is set.
[[nodiscard]] inline std::string csv_cell(const Action& a, bool write_group = true) {
  std::string cell = std::to_string(a.stage);
  cell += detail::pytorch_op_name(a.op);
  cell += std::to_string(a.microbatch);
  if (write_group && a.group != 0) {
    cell += '#';
    cell += std::to_string(a.group);
  }
  return cell;
}

// Throws ppsched::error for an action with a negative stage or micro-batch, which no reader
// could take back.
inline void write_pytorch_csv(std::ostream& out, const Schedule& s, const CsvWriteOptions& options = {}) {
  std::unordered_map<std::uint32_t, std::size_t> actions_in_group;
  for (std::size_t r = 0; r < s.programs.size(); ++r) {
    const auto& program = s.programs[r];
    actions_in_group.clear();
    if (options.write_groups)
      for (const Action& a : program)
        if (a.group != 0) ++actions_in_group[a.group];
    std::uint32_t pairs = 0;
    for (std::size_t i = 0; i < program.size(); ++i) {
      for (std::size_t k = i; k < std::min(i + 2, program.size()); ++k) {
        if (program[k].stage < 0 || program[k].microbatch < 0)
          fail({detail::concat("schedule '", s.name, "'"),
                detail::concat("action ", to_string(program[k]), " has a negative stage or micro-batch"),
                detail::concat("rank ", r, ", action ", k), "stages and micro-batches count from 0"});
      }
      if (i != 0) out << ',';
      const Action& a = program[i];
      if (is_compute(a.op) && a.group != 0 && i + 1 < program.size() && is_compute(program[i + 1].op) &&
          program[i + 1].group == a.group) {
        ++pairs;
        out << '(' << csv_cell(a, false) << ';' << csv_cell(program[i + 1], false) << ")OVERLAP_F_B";
        // A reader numbers the row's pairs 1, 2, ...; an id it would not give is written out.
        if (options.write_groups && (a.group != pairs || actions_in_group[a.group] > 2)) out << '#' << a.group;
        ++i;
        continue;
      }
      out << csv_cell(a, options.write_groups);
    }
    out << options.line_end;
  }
}

[[nodiscard]] inline std::string to_pytorch_csv(const Schedule& s, const CsvWriteOptions& options = {}) {
  std::ostringstream out;
  write_pytorch_csv(out, s, options);
  return out.str();
}

inline void save_pytorch_csv(const std::filesystem::path& path, const Schedule& s,
                             const CsvWriteOptions& options = {}) {
  std::ofstream out(path, std::ios::binary);
  if (!out)
    fail({detail::concat("schedule CSV '", path.string(), "'"), "cannot open the file for writing", "",
          "check that the directory exists and is writable"});
  write_pytorch_csv(out, s, options);
  out.flush();
  if (!out)
    fail({detail::concat("schedule CSV '", path.string(), "'"), "writing the file failed", "",
          "check the free space and permissions of the directory"});
}

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
  return concat("row ", at.row, " (rank ", at.row - 1, "), column ", at.column);
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
    fail({concat("schedule CSV '", source, "'"), "a quoted cell is never closed", describe({line, column}),
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
    fail({subject, concat("the ", what, " '", s.substr(0, n), "' is too large"), where,
          concat("a ", what, " is at most ", limit)});
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
    fail({subject, concat("cannot read cell '", cell, "': ", problem), where, std::string(csv_cell_grammar)});
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
  if (found == nullptr) return bad(concat("'", rest, "' does not start with an operation"));
  rest.remove_prefix(found->text.size());

  ParsedCell parsed;
  parsed.action.stage = static_cast<std::int32_t>(stage);
  if (!found->op) {
    // PyTorch writes these without a micro-batch; tolerate one rather than guess at intent.
    std::int64_t ignored = 0;
    if (const auto digits = leading_number(rest, index_limit, ignored, subject, where, "micro-batch"))
      rest.remove_prefix(*digits);
    if (!rest.empty()) return bad(concat("unexpected '", rest, "' after the operation"));
    parsed.kind = CellOp::pytorch_only;
    parsed.pytorch_name = found->text;
    return parsed;
  }
  parsed.action.op = *found->op;
  std::int64_t microbatch = 0;
  // One below the int32 limit, so that the inferred count (largest + 1) still fits.
  const auto mb_digits = leading_number(rest, index_limit - 1, microbatch, subject, where, "micro-batch");
  if (!mb_digits) return bad(concat("the operation ", found->text, " needs a micro-batch number after it"));
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
  if (!rest.empty()) return bad(concat("unexpected '", rest, "' after the micro-batch"));
  return parsed;
}

}  // namespace detail

// Parses PyTorch-format CSV text into a Schedule (see the top of this header for the rules).
[[nodiscard]] PPSCHED_OUTLINE Schedule from_pytorch_csv(std::string_view text, const CsvReadOptions& options = {});

[[nodiscard]] inline Schedule read_pytorch_csv(std::istream& in, const CsvReadOptions& options = {}) {
  const std::string text =
      detail::read_bounded(in, options.max_bytes, detail::concat("schedule CSV '", options.source, "'"), options.source);
  return from_pytorch_csv(text, options);
}

// Reads a file; the file name becomes the source in messages, and the name of the schedule
// when options.name is left at its default.
[[nodiscard]] inline Schedule load_pytorch_csv(const std::filesystem::path& path,
                                               CsvReadOptions options = {}) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail({detail::concat("schedule CSV '", path.string(), "'"), "cannot open the file", "",
          "check the path and its permissions"});
  if (options.source == CsvReadOptions{}.source) options.source = path.string();
  if (options.name == CsvReadOptions{}.name) options.name = path.stem().string();
  return read_pytorch_csv(in, options);  // at most options.max_bytes: a FIFO or device may never end
}

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/csv.ipp"
#endif
