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

// One cell: "1W0", "2SEND_F3", or "2SEND_F3#7" for a grouped action when write_group is set.
[[nodiscard]] inline std::string csv_cell(const Action& a, bool write_group = true) {
  std::string cell = std::to_string(a.stage);
  cell += pytorch_op_name(a.op);
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
    "SEND_B, RECV_B, e.g. 0F1, 1I0, 1W0, 2SEND_F3; a cell may end in #<group>; an overlapped pair is "
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
      {"BI", Op::BI},
      {"BW", Op::BW},
      {"F", Op::F},
      {"B", Op::B},
      {"I", Op::BI},
      {"W", Op::BW},
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
[[nodiscard]] PPSCHED_OUTLINE Schedule from_pytorch_csv(std::string_view text, const CsvReadOptions& options = {})
#if PPSCHED_OUTLINE_BODY
{
  const std::string subject = detail::concat("schedule CSV '", options.source, "'");
  const auto rows = detail::split_csv(text, options.source);
  if (rows.empty())
    fail({subject, "the CSV has no rows", "", "write one row per rank, row i holding rank i's actions"});
  std::size_t cell_count = 0;  // actions the text can hold: an OVERLAP_F_B cell holds several
  for (const auto& row : rows)
    for (const auto& cell : row)
      cell_count += 1 + static_cast<std::size_t>(std::count(cell.text.begin(), cell.text.end(), ';'));

  Schedule s;
  s.name = options.name;
  s.ranks = static_cast<std::int32_t>(rows.size());
  s.programs.resize(rows.size());
  std::vector<std::int32_t> seen_on;  // inferred placement, -1 where not seen
  std::vector<detail::CsvPlace> first_seen;
  std::int64_t max_microbatch = -1;

  const auto place = [&](const Action& a, std::size_t rank, const detail::CsvPlace& at) {
    const std::string where = detail::describe(at);
    if (!options.placement.empty()) {
      if (static_cast<std::size_t>(a.stage) >= options.placement.size())
        fail({subject,
              detail::concat("action ", to_string(a), " names stage ", a.stage,
                             ", which the placement (stages 0..", options.placement.size() - 1,
                             ") does not cover"),
              where, "give a placement with an entry for every stage, or fix the stage number"});
      if (options.placement[static_cast<std::size_t>(a.stage)] != static_cast<std::int32_t>(rank))
        fail({subject,
              detail::concat("action ", to_string(a), " is on rank ", rank, " but the placement puts stage ",
                             a.stage, " on rank ", options.placement[static_cast<std::size_t>(a.stage)]),
              where, "move the cell to its stage's row, or fix the placement"});
    } else {
      const auto stage = static_cast<std::size_t>(a.stage);
      // Every stage below this one must appear somewhere too, so a stage number above the
      // number of cells cannot be right; checking here also bounds the table below.
      if (stage >= cell_count)
        fail({subject,
              detail::concat("action ", to_string(a), " names stage ", a.stage, ", but the file holds only ",
                             cell_count, " actions, so stages 0..", a.stage, " cannot all appear"),
              where, "fix the stage number, or pass CsvReadOptions::placement explicitly"});
      if (stage >= seen_on.size()) {
        seen_on.resize(stage + 1, -1);
        first_seen.resize(stage + 1);
      }
      if (seen_on[stage] < 0) {
        seen_on[stage] = static_cast<std::int32_t>(rank);
        first_seen[stage] = at;
      } else if (seen_on[stage] != static_cast<std::int32_t>(rank)) {
        fail({subject,
              detail::concat("stage ", a.stage, " appears on rank ", seen_on[stage], " (",
                             detail::describe(first_seen[stage]), ") and on rank ", rank,
                             ", so its rank is ambiguous"),
              where,
              "a stage runs on one rank: move the cell, or pass CsvReadOptions::placement explicitly"});
      }
    }
    max_microbatch = std::max<std::int64_t>(max_microbatch, a.microbatch);
  };

  for (std::size_t r = 0; r < rows.size(); ++r) {
    auto& program = s.programs[r];
    std::uint32_t largest_group = 0;   // named by a cell of this row
    std::uint32_t pairs = 0;           // OVERLAP_F_B pairs of this row so far
    std::vector<std::size_t> pair_at;  // where the pairs numbered by count start
    for (const auto& cell : rows[r]) {
      const std::string_view text_cell = detail::trimmed(cell.text);
      if (text_cell.empty()) continue;
      const std::string where = detail::describe(cell.at);
      const auto take = [&](const detail::ParsedCell& parsed, std::string_view shown) {
        if (parsed.kind == detail::CellOp::pytorch_only) {
          if (!options.skip_pytorch_only_actions)
            fail({subject,
                  detail::concat("cell '", shown, "' is PyTorch's ", parsed.pytorch_name,
                                 ", which ppsched does not model"),
                  where, "remove the cell, or read with CsvReadOptions::skip_pytorch_only_actions = true"});
          return;
        }
        place(parsed.action, r, cell.at);
        program.push_back(parsed.action);
        largest_group = std::max(largest_group, parsed.action.group);
      };
      if (text_cell.starts_with('(')) {
        // PyTorch's OVERLAP_F_B: "(a;b;...)OVERLAP_F_B" runs its sub-actions in order.
        const std::size_t close = text_cell.find(')');
        constexpr std::string_view overlap = "OVERLAP_F_B";
        if (close == std::string_view::npos || !text_cell.substr(close + 1).starts_with(overlap))
          fail({subject, detail::concat("cannot read cell '", text_cell, "'"), where,
                "a parenthesised cell must be PyTorch's (<action>;<action>...)OVERLAP_F_B"});
        // ppsched's "#<group>" after OVERLAP_F_B: the pair's id where it is not the row's count.
        std::optional<std::uint32_t> explicit_group;
        if (std::string_view suffix = text_cell.substr(close + 1 + overlap.size()); !suffix.empty()) {
          std::int64_t group = 0;
          const auto digits = suffix.starts_with('#') ? detail::leading_number(suffix.substr(1), 4294967295, group,
                                                                               subject, where, "group")
                                                      : std::nullopt;
          if (!digits || *digits + 1 != suffix.size() || group == 0)
            fail({subject, detail::concat("cannot read cell '", text_cell, "'"), where,
                  "after OVERLAP_F_B only #<group> may follow, with a group number of 1 or more"});
          explicit_group = static_cast<std::uint32_t>(group);
        }
        std::string_view inner = text_cell.substr(1, close - 1);
        const std::size_t before = program.size();
        while (!inner.empty()) {
          const std::size_t semi = inner.find(';');
          const std::string_view part = detail::trimmed(inner.substr(0, semi));
          if (!part.empty()) take(detail::parse_simple_cell(part, subject, where), text_cell);
          if (semi == std::string_view::npos) break;
          inner.remove_prefix(semi + 1);
        }
        const bool pair =
            program.size() == before + 2 && is_compute(program[before].op) && is_compute(program[before + 1].op);
        if (explicit_group && !pair)
          fail({subject, detail::concat("cell '", text_cell, "' gives a group to what is not a pair"), where,
                "#<group> after OVERLAP_F_B needs exactly two compute sub-actions"});
        if (pair) {
          ++pairs;
          std::uint32_t g = pairs;
          if (explicit_group) {
            g = *explicit_group;
            largest_group = std::max(largest_group, g);
          } else {
            pair_at.push_back(before);
          }
          program[before].group = program[before + 1].group = g;
        }
        continue;
      }
      take(detail::parse_simple_cell(text_cell, subject, where), text_cell);
    }
    // A pair's id must not name another run of the row: move any that does above them all.
    // The pairs numbered by count hold the ids 1..pairs, each once, so an id is shared when
    // more than its own two actions carry it; one count per id keeps this linear in the row
    // (it scanned the row once per pair: 80k pairs took 16 s, issue 24). Moving a pair gives
    // it an id above every other, so it changes no other pair's count.
    largest_group = std::max(largest_group, pairs);
    std::vector<std::uint32_t> carrying(static_cast<std::size_t>(pairs) + 1, 0);
    for (const Action& a : program) {
      if (a.group != 0 && a.group <= pairs) ++carrying[a.group];
    }
    for (const std::size_t at : pair_at) {
      const bool shared = carrying[program[at].group] > 2;
      if (shared && largest_group < 4294967295u) program[at].group = program[at + 1].group = ++largest_group;
    }
  }

  if (!options.placement.empty()) {
    s.placement = options.placement;
    for (std::size_t st = 0; st < s.placement.size(); ++st)
      if (s.placement[st] < 0)
        fail({subject, detail::concat("the placement puts stage ", st, " on rank ", s.placement[st]),
              "CsvReadOptions::placement", "ranks count from 0"});
    const std::int32_t highest = *std::max_element(s.placement.begin(), s.placement.end());
    if (highest >= s.ranks) {
      s.ranks = highest + 1;  // ranks with no row have an empty program
      s.programs.resize(static_cast<std::size_t>(s.ranks));
    }
  } else {
    for (std::size_t st = 0; st < seen_on.size(); ++st)
      if (seen_on[st] < 0)
        fail({subject,
              detail::concat("stage ", st, " appears on no row, so its rank cannot be inferred (stages 0..",
                             seen_on.size() - 1, " are named)"),
              "", "pass CsvReadOptions::placement explicitly"});
    s.placement = std::move(seen_on);
  }

  if (options.microbatches < 0)
    fail({subject, detail::concat("CsvReadOptions::microbatches is ", options.microbatches), "",
          "give 0 to infer it, or the number of micro-batches"});
  if (options.microbatches > 0) {
    if (max_microbatch >= options.microbatches)
      fail({subject,
            detail::concat("an action names micro-batch ", max_microbatch, " but the schedule has ",
                           options.microbatches, " micro-batches"),
            "", "fix the cell, or give the right CsvReadOptions::microbatches"});
    s.microbatches = options.microbatches;
  } else {
    if (max_microbatch < 0)
      fail({subject, "no row holds an action, so the number of micro-batches cannot be inferred", "",
            "write the schedule's actions, or give CsvReadOptions::microbatches and "
            "CsvReadOptions::placement"});
    s.microbatches = static_cast<std::int32_t>(max_microbatch + 1);
  }
  for (const auto& program : s.programs)
    for (const Action& a : program)
      if (a.op == Op::BI || a.op == Op::BW) s.split_backward = true;
  return s;
}
#else
;
#endif

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
