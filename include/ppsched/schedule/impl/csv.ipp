// The bodies of <ppsched/schedule/csv.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Schedule from_pytorch_csv(std::string_view text, const CsvReadOptions& options) {
  const std::string subject = detail::concat("schedule CSV '", options.source, "'");
  const auto rows = detail::split_csv(text, options.source);
  if (rows.empty())
    detail::fail({subject, "the CSV has no rows", "", "write one row per rank, row i holding rank i's actions"});
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
        detail::fail({subject,
              detail::concat("action ", to_string(a), " names stage ", a.stage,
                             ", which the placement (stages 0..", options.placement.size() - 1,
                             ") does not cover"),
              where, "give a placement with an entry for every stage, or fix the stage number"});
      if (options.placement[static_cast<std::size_t>(a.stage)] != static_cast<std::int32_t>(rank))
        detail::fail({subject,
              detail::concat("action ", to_string(a), " is on rank ", rank, " but the placement puts stage ",
                             a.stage, " on rank ", options.placement[static_cast<std::size_t>(a.stage)]),
              where, "move the cell to its stage's row, or fix the placement"});
    } else {
      const auto stage = static_cast<std::size_t>(a.stage);
      // Every stage below this one must appear somewhere too, so a stage number above the
      // number of cells cannot be right; checking here also bounds the table below.
      if (stage >= cell_count)
        detail::fail({subject,
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
        detail::fail({subject,
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
            detail::fail({subject,
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
          detail::fail({subject, detail::concat("cannot read cell '", text_cell, "'"), where,
                "a parenthesised cell must be PyTorch's (<action>;<action>...)OVERLAP_F_B"});
        // ppsched's "#<group>" after OVERLAP_F_B: the pair's id where it is not the row's count.
        std::optional<std::uint32_t> explicit_group;
        if (std::string_view suffix = text_cell.substr(close + 1 + overlap.size()); !suffix.empty()) {
          std::int64_t group = 0;
          const auto digits = suffix.starts_with('#') ? detail::leading_number(suffix.substr(1), 4294967295, group,
                                                                               subject, where, "group")
                                                      : std::nullopt;
          if (!digits || *digits + 1 != suffix.size() || group == 0)
            detail::fail({subject, detail::concat("cannot read cell '", text_cell, "'"), where,
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
          detail::fail({subject, detail::concat("cell '", text_cell, "' gives a group to what is not a pair"), where,
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
        detail::fail({subject, detail::concat("the placement puts stage ", st, " on rank ", s.placement[st]),
              "CsvReadOptions::placement", "ranks count from 0"});
    const std::int32_t highest = *std::max_element(s.placement.begin(), s.placement.end());
    if (highest >= s.ranks) {
      s.ranks = highest + 1;  // ranks with no row have an empty program
      s.programs.resize(static_cast<std::size_t>(s.ranks));
    }
  } else {
    for (std::size_t st = 0; st < seen_on.size(); ++st)
      if (seen_on[st] < 0)
        detail::fail({subject,
              detail::concat("stage ", st, " appears on no row, so its rank cannot be inferred (stages 0..",
                             seen_on.size() - 1, " are named)"),
              "", "pass CsvReadOptions::placement explicitly"});
    s.placement = std::move(seen_on);
  }

  if (options.microbatches < 0)
    detail::fail({subject, detail::concat("CsvReadOptions::microbatches is ", options.microbatches), "",
          "give 0 to infer it, or the number of micro-batches"});
  if (options.microbatches > 0) {
    if (max_microbatch >= options.microbatches)
      detail::fail({subject,
            detail::concat("an action names micro-batch ", max_microbatch, " but the schedule has ",
                           options.microbatches, " micro-batches"),
            "", "fix the cell, or give the right CsvReadOptions::microbatches"});
    s.microbatches = options.microbatches;
  } else {
    if (max_microbatch < 0)
      detail::fail({subject, "no row holds an action, so the number of micro-batches cannot be inferred", "",
            "write the schedule's actions, or give CsvReadOptions::microbatches and "
            "CsvReadOptions::placement"});
    s.microbatches = static_cast<std::int32_t>(max_microbatch + 1);
  }
  for (const auto& program : s.programs)
    for (const Action& a : program)
      if (a.op == Op::BI || a.op == Op::BW) s.split_backward = true;
  return s;
}

}  // namespace ppsched::PPSCHED_MODE
