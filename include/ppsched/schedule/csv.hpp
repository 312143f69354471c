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
// Actions PyTorch has and ppsched does not: UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD,
// WAIT_SEND_F and WAIT_SEND_B (FSDP, gradient-reduction and send-completion bookkeeping, with
// no data between stages) are skipped on reading, or rejected with
// CsvReadOptions::skip_pytorch_only_actions = false. A schedule with communication is written
// with the WAIT_SEND and REDUCE_GRAD cells PyTorch's runtime requires of a compute_comms file
// (CsvWriteOptions::pytorch_bookkeeping), so that it runs there as written.
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
#include "ppsched/schedule/detail/csv.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct CsvWriteOptions {
  bool write_groups = true;            // append "#group" to grouped communication cells
  std::string_view line_end = "\r\n";  // Python's csv.writer writes \r\n
  // For a schedule with communication (PyTorch's compute_comms format): the bookkeeping cells
  // PyTorch's runtime requires of such a file (torch 2.15, tested), which its own lowering adds
  // to compute-only input. One WAIT_SEND_F / WAIT_SEND_B per send — a forward send's wait after
  // the same stage's backward (B or I) of that micro-batch, the rest at the end of the row — and
  // per stage REDUCE_GRAD then WAIT_REDUCE_GRAD right after its last B or W: that is where
  // PyTorch divides the gradients by the micro-batch count, so a file without it runs and gives
  // gradients m times too large. ppsched's reader skips these cells. False: for a PyTorch whose
  // parser lacks these actions. Compute-only schedules never get them.
  bool pytorch_bookkeeping = true;
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
  const bool bookkeeping =
      options.pytorch_bookkeeping &&
      std::any_of(s.programs.begin(), s.programs.end(),
                  [](const auto& p) { return std::any_of(p.begin(), p.end(), [](const Action& a) { return is_comm(a.op); }); });
  std::vector<Action> pending_sends;                             // this row's sends without a wait, in send order
  std::unordered_map<std::int32_t, std::int32_t> grads_of_stage;  // B and W cells so far, per stage
  for (std::size_t r = 0; r < s.programs.size(); ++r) {
    const auto& program = s.programs[r];
    actions_in_group.clear();
    pending_sends.clear();
    grads_of_stage.clear();
    if (options.write_groups)
      for (const Action& a : program)
        if (a.group != 0) ++actions_in_group[a.group];
    bool first_cell = true;
    const auto start_cell = [&] {
      if (!first_cell) out << ',';
      first_cell = false;
    };
    // What PyTorch's runtime wants after a cell's action (CsvWriteOptions::pytorch_bookkeeping).
    const auto bookkeeping_after = [&](const Action& a) {
      if (is_send(a.op)) pending_sends.push_back(a);
      if (a.op == Op::B || a.op == Op::BI) {
        const auto sent = std::find_if(pending_sends.begin(), pending_sends.end(), [&](const Action& p) {
          return p.op == Op::SEND_F && p.stage == a.stage && p.microbatch == a.microbatch;
        });
        if (sent != pending_sends.end()) {
          start_cell();
          out << a.stage << "WAIT_SEND_F" << a.microbatch;
          pending_sends.erase(sent);
        }
      }
      if ((a.op == Op::B || a.op == Op::BW) && ++grads_of_stage[a.stage] == s.microbatches) {
        start_cell();
        out << a.stage << "REDUCE_GRAD";
        start_cell();
        out << a.stage << "WAIT_REDUCE_GRAD";
      }
    };
    std::uint32_t pairs = 0;
    for (std::size_t i = 0; i < program.size(); ++i) {
      for (std::size_t k = i; k < std::min(i + 2, program.size()); ++k) {
        if (program[k].stage < 0 || program[k].microbatch < 0)
          detail::fail({detail::concat("schedule '", s.name, "'"),
                detail::concat("action ", to_string(program[k]), " has a negative stage or micro-batch"),
                detail::concat("rank ", r, ", action ", k), "stages and micro-batches count from 0"});
      }
      start_cell();
      const Action& a = program[i];
      if (is_compute(a.op) && a.group != 0 && i + 1 < program.size() && is_compute(program[i + 1].op) &&
          program[i + 1].group == a.group) {
        ++pairs;
        out << '(' << csv_cell(a, false) << ';' << csv_cell(program[i + 1], false) << ")OVERLAP_F_B";
        // A reader numbers the row's pairs 1, 2, ...; an id it would not give is written out.
        if (options.write_groups && (a.group != pairs || actions_in_group[a.group] > 2)) out << '#' << a.group;
        ++i;
        if (bookkeeping) {
          bookkeeping_after(a);
          bookkeeping_after(program[i]);
        }
        continue;
      }
      out << csv_cell(a, options.write_groups);
      if (bookkeeping) bookkeeping_after(a);
    }
    for (const Action& p : pending_sends) {
      start_cell();
      out << p.stage << (p.op == Op::SEND_F ? "WAIT_SEND_F" : "WAIT_SEND_B") << p.microbatch;
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
    detail::fail({detail::concat("schedule CSV '", path.string(), "'"), "cannot open the file for writing", "",
          "check that the directory exists and is writable"});
  write_pytorch_csv(out, s, options);
  out.flush();
  if (!out)
    detail::fail({detail::concat("schedule CSV '", path.string(), "'"), "writing the file failed", "",
          "check the free space and permissions of the directory"});
}

// One PyTorch action string, as PyTorch's _Action.from_str reads one: "0F3", "1I2", "2SEND_F3"
// (with ppsched's "#group" allowed) give one action; "(0F7;7B3)OVERLAP_F_B" gives its sub-actions
// in order, a pair of compute actions sharing group 1 or the "#group" written after it, as the
// CSV reader reads the cell alone in its row. Throws ppsched::error naming the string for anything
// else, PyTorch's bookkeeping and FSDP actions (WAIT_SEND_F, REDUCE_GRAD, UNSHARD, ...) included:
// they have no ppsched action. Reads the text alone, so it allocates nothing for large numbers.
[[nodiscard]] inline std::vector<Action> parse_pytorch_action(std::string_view text) {
  const std::string subject = detail::concat("action string '", text, "'");
  const std::string_view cell = detail::trimmed(text);
  if (cell.empty()) detail::fail({subject, "is empty", "", "write an action such as 0F3"});
  if (cell.find_first_of(",\"\r\n") != std::string_view::npos)
    detail::fail({subject, "holds a comma, a quote or a line break", "",
          "give one action string, as PyTorch's _Action prints it, e.g. 0F3 or (0F7;7B3)OVERLAP_F_B"});
  const auto one = [&subject](std::string_view part) {
    const detail::ParsedCell parsed = detail::parse_simple_cell(part, subject, "");
    if (parsed.kind != detail::CellOp::action)
      detail::fail({subject, detail::concat("is PyTorch's ", parsed.pytorch_name, ", which ppsched does not model"), "",
            "PyTorch's bookkeeping and FSDP actions have no ppsched action; leave them out"});
    return parsed.action;
  };
  if (!cell.starts_with('(')) return {one(cell)};
  constexpr std::string_view overlap = "OVERLAP_F_B";
  const std::size_t close = cell.find(')');
  if (close == std::string_view::npos || !cell.substr(close + 1).starts_with(overlap))
    detail::fail({subject, "cannot be read", "", "a parenthesised action must be PyTorch's (<action>;<action>...)OVERLAP_F_B"});
  std::optional<std::uint32_t> explicit_group;
  if (const std::string_view suffix = cell.substr(close + 1 + overlap.size()); !suffix.empty()) {
    std::int64_t group = 0;
    const auto digits =
        suffix.starts_with('#') ? detail::leading_number(suffix.substr(1), 4294967295, group, subject, "", "group")
                                : std::nullopt;
    if (!digits || *digits + 1 != suffix.size() || group == 0)
      detail::fail({subject, "cannot be read", "", "after OVERLAP_F_B only #<group> may follow, with a group number of 1 or more"});
    explicit_group = static_cast<std::uint32_t>(group);
  }
  std::vector<Action> out;
  for (std::string_view inner = cell.substr(1, close - 1); !inner.empty();) {
    const std::size_t semi = inner.find(';');
    const std::string_view part = detail::trimmed(inner.substr(0, semi));
    if (!part.empty()) out.push_back(one(part));
    if (semi == std::string_view::npos) break;
    inner.remove_prefix(semi + 1);
  }
  if (out.empty()) detail::fail({subject, "holds no action", "", "write its sub-actions, as in (0F7;7B3)OVERLAP_F_B"});
  const bool pair = out.size() == 2 && is_compute(out[0].op) && is_compute(out[1].op);
  if (explicit_group && !pair)
    detail::fail({subject, "gives a group to what is not a pair", "", "#<group> after OVERLAP_F_B needs exactly two compute sub-actions"});
  if (pair) out[0].group = out[1].group = explicit_group.value_or(1);
  return out;
}

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
    detail::fail({detail::concat("schedule CSV '", path.string(), "'"), "cannot open the file", "",
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
