// The two views of a PlanResult that ppsched-plan prints: a readable report (partition
// table, one row per schedule, the recommendation and why) and one JSON object whose
// fields docs/cli.md documents and scripts rely on. Both read the same PlanResult, so a
// number in the report is the number in the JSON, rounded for reading.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "auto_plan.hpp"
#include "plan.hpp"
#include "ppsched/error.hpp"
#include "ppsched/plan/compare.hpp"
#include "ppsched/plan/plan_search.hpp"
#include "ppsched/plan/search/search.hpp"
#include "ppsched/trace/stats.hpp"
#include "text.hpp"

namespace ppsched::cli {
using namespace ppsched::plan;  // the planner library, which these tools only parse for and print

// The project's version as meson.build's project() states it: examples/meson.build passes it
// to every tool, so `--version` and the JSON's "version" cannot drift from the release.
#if !defined(PPSCHED_VERSION)
#error "PPSCHED_VERSION is not defined: build the tools with Meson (examples/meson.build defines it from the project version)"
#endif
inline constexpr std::string_view version_text = PPSCHED_VERSION;

// Fixed-point with decimals by magnitude, so columns of times from 0.05 to 5000 stay readable.
[[nodiscard]] inline std::string number_text(double x) {
  if (!std::isfinite(x)) return x > 0 ? "inf" : "-";
  const double a = std::abs(x);
  const int decimals = a < 10.0 ? 3 : a < 1000.0 ? 2 : 1;
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, x);
  std::string text = buffer;
  // "28.50" reads as more precise than it is; trailing zeros go, and a bare point with them.
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  return text == "-0" ? "0" : text;
}

[[nodiscard]] inline std::string pad_right(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}
[[nodiscard]] inline std::string pad_left(std::string s, std::size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

// A table with a header row; every column sized to its widest cell, numbers right-aligned.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header, std::vector<bool> right_aligned)
      : right_(std::move(right_aligned)) {
    rows_.push_back(std::move(header));
  }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  [[nodiscard]] std::string str() const {
    std::vector<std::size_t> width(rows_.front().size(), 0);
    for (const auto& row : rows_)
      for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    std::string out;
    for (const auto& row : rows_) {
      std::string line;
      for (std::size_t c = 0; c < row.size(); ++c) {
        if (c != 0) line += "  ";
        line += right_[c] ? pad_left(row[c], width[c]) : pad_right(row[c], width[c]);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + '\n';
    }
    return out;
  }

 private:
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

[[nodiscard]] inline std::string per_rank_text(const std::vector<double>& values) {
  std::string out;
  for (const double v : values) {
    if (!out.empty()) out += ' ';
    out += number_text(v);
  }
  return out;
}

[[nodiscard]] inline std::string throughput_text(double per_unit, const TimeUnit& unit) {
  if (const auto seconds = unit.seconds()) return number_text(per_unit / *seconds) + " mb/s";
  return number_text(per_unit) + " mb/" + unit.text();
}

[[nodiscard]] inline std::string partition_table(const Partition& p, const std::string& unit, bool has_bytes) {
  std::vector<std::string> header{"stage", "rank", "layers", "", "F", "BI", "BW", "compute", "comm"};
  std::vector<bool> right{true, true, true, false, true, true, true, true, true};
  if (has_bytes) {
    header.insert(header.end(), {"params+state", "act/mb"});
    right.insert(right.end(), {true, true});
  }
  TextTable table(header, right);
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const PartitionStage& st = p.stages[s];
    std::string names = st.first_layer_name == st.last_layer_name ? st.first_layer_name
                                                                  : st.first_layer_name + " .. " + st.last_layer_name;
    std::vector<std::string> row{std::to_string(s),
                                 std::to_string(st.rank),
                                 concat(st.begin, "-", st.end - 1),
                                 names,
                                 number_text(st.forward),
                                 number_text(st.backward_input),
                                 number_text(st.backward_weight),
                                 number_text(st.compute_time),
                                 number_text(st.send_time)};
    if (has_bytes) {
      row.push_back(bytes_text(st.static_bytes));
      row.push_back(bytes_text(st.activation_bytes));
    }
    table.add(std::move(row));
  }
  return concat("Partition (", p.method, "): bottleneck ", number_text(p.bottleneck), ' ', unit,
                                 " on stage ", p.bottleneck_stage, " (times in ", unit, ", per micro-batch)\n",
                                 table.str());
}

// JSON has no infinity: a free link's bandwidth is null.
[[nodiscard]] inline nlohmann::ordered_json finite_or_null(double x) {
  return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr);
}

// The search's fastest candidates that keep to the cap, best first.
[[nodiscard]] inline std::string search_table(const SearchSummary& search, const std::string& unit) {
  std::vector<const Candidate*> ranked;
  for (const Candidate& c : search.candidates) {
    if (c.built && c.fits) ranked.push_back(&c);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Candidate* a, const Candidate* b) { return a->makespan < b->makespan; });
  const std::size_t shown = std::min<std::size_t>(ranked.size(), 8);
  TextTable table({"candidate", "kind", "placement", "v", "makespan", "timing", "peak M_B"},
                  {false, false, false, true, true, false, true});
  for (std::size_t i = 0; i < shown; ++i) {
    const Candidate& c = *ranked[i];
    table.add({c.name, std::string(candidate_kind_name(c.kind)), std::string(placement_kind_name(c.placement)), std::to_string(c.chunks),
               number_text(c.makespan) + (c.timing == Timing::bound ? "+" : ""), std::string(timing_name(c.timing)),
               number_text(c.peak_microbatches)});
  }
  return concat("\nSearch: ", search.candidates.size(), " candidates considered, ", ranked.size(),
                                 " keep to the cap; the fastest (times in ", unit, "; + marks a lower bound):\n",
                                 table.str());
}

[[nodiscard]] inline nlohmann::ordered_json search_json(const SearchSummary& search) {
  nlohmann::ordered_json candidates = nlohmann::ordered_json::array();
  for (const Candidate& c : search.candidates) {
    candidates.push_back({{"name", c.name},
                          {"kind", candidate_kind_name(c.kind)},
                          {"placement", std::string(placement_kind_name(c.placement))},
                          {"chunks", c.chunks},
                          {"built", c.built},
                          {"timing", timing_name(c.timing)},
                          {"makespan", finite_or_null(c.makespan)},
                          {"span", finite_or_null(c.span)},
                          {"bubble_fraction", c.built ? nlohmann::ordered_json(c.bubble_fraction) : nullptr},
                          {"peak_microbatches", c.peak_microbatches},
                          {"fits", c.fits},
                          {"note", c.note}});
  }
  return {{"why", search.why}, {"candidates", std::move(candidates)}};
}

// The readable report; with a search summary (--schedule auto), the fastest candidates too.
// What each schedule priced with memory policies does per stage, and what that costs: the
// step time and the fullest rank's memory beside the plain schedule's, then one row per stage
// with a policy. Empty when no schedule has any (--memory-policy none).
[[nodiscard]] inline std::string memory_policy_report(const PlanResult& plan) {
  std::string out;
  for (const ScheduleResult& r : plan.schedules) {
    if (!r.memory) continue;
    const MemoryPolicyUse& m = *r.memory;
    if (out.empty()) {
      out = concat("\nMemory policies (", m.chosen ? "chosen where a schedule does not fit plainly" : "as given",
                   "; mb = micro-batches it applies to, saves = activation bytes per micro-batch not held from F to B, "
                   "recompute and copies = time per step on the compute stream and the copy lane)\n");
    }
    const double peak = *std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end());
    out += concat("  ", r.name, ": makespan ", number_text(r.makespan), " (plain ", number_text(m.plain_makespan), ", ",
                  m.plain_makespan > 0.0 ? concat(r.makespan >= m.plain_makespan ? "+" : "",
                                                  percent_of(r.makespan / m.plain_makespan - 1.0))
                                         : std::string("-"),
                  "), peak ", bytes_text(peak), " (plain ", bytes_text(m.plain_peak_bytes),
                  m.plain_fit_problem.empty() ? "" : ": " + m.plain_fit_problem, ")\n");
    if (m.partition) {
      std::string cut;
      for (const PartitionStage& st : m.partition->stages) cut += concat(cut.empty() ? "" : ", ", st.begin, "-", st.end - 1);
      out += concat("    cut again under the cap (no policy fit the family's cut), layers per stage: ", cut, "\n");
    }
    TextTable table({"    stage", "policy", "mb", "saves", "recompute", "copies"},
                    {true, false, true, true, true, true});
    bool any = false;
    for (std::size_t s = 0; s < m.stages.size(); ++s) {
      const StageMemoryCost& c = m.stages[s];
      if (c.policy.kind == MemoryPolicyKind::none) continue;
      any = true;
      table.add({concat("    ", s), to_string(c.policy), std::to_string(c.microbatches), bytes_text(c.saved_bytes),
                 c.policy.recomputes() ? number_text(c.recompute_time) : "-",
                 c.policy.offloads() ? number_text(c.copy_time) : "-"});
    }
    out += any ? table.str() : "    no stage needs a policy\n";
  }
  return out;
}

[[nodiscard]] inline nlohmann::ordered_json memory_policy_json(const MemoryPolicyUse& m) {
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s < m.stages.size(); ++s) {
    const StageMemoryCost& c = m.stages[s];
    stages.push_back({{"stage", s},
                      {"policy", memory_policy_kind_name(c.policy.kind)},
                      {"fraction", c.policy.kind == MemoryPolicyKind::selective_recompute || c.policy.kind == MemoryPolicyKind::offload
                                       ? nlohmann::ordered_json(c.policy.fraction)
                                       : nlohmann::ordered_json(nullptr)},
                      {"microbatches", c.microbatches},
                      {"saved_bytes_per_microbatch", c.saved_bytes},
                      {"recompute_time", c.recompute_time},
                      {"copy_time", c.copy_time}});
  }
  nlohmann::ordered_json j = {{"chosen", m.chosen},
                               {"plain_makespan", m.plain_makespan},
                               {"plain_peak_memory_bytes", m.plain_peak_bytes},
                               {"plain_fit_problem", m.plain_fit_problem.empty() ? nlohmann::ordered_json(nullptr)
                                                                                 : nlohmann::ordered_json(m.plain_fit_problem)},
                               {"stages", std::move(stages)}};
  if (m.partition) {  // the planner's own cut under the cap (first and last layer per stage)
    nlohmann::ordered_json cut = nlohmann::ordered_json::array();
    for (const PartitionStage& st : m.partition->stages) cut.push_back({st.begin, st.end - 1});
    j["partition"] = std::move(cut);
  }
  return j;
}

[[nodiscard]] inline std::string render_report(const PlanResult& plan, bool has_bytes,
                                               const SearchSummary* search = nullptr) {
  std::string out = concat("ppsched-plan: ", plan.model, "\n", plan.ranks, " ranks, ", plan.microbatches,
                           " micro-batches per step, times in ", plan.unit.text(), "\n\n");
  out += partition_table(plan.partition, plan.unit.text(), has_bytes);
  out += '\n';
  std::vector<std::string> header{"schedule", "v", "makespan", "max span", "bubble", "throughput",
                                  "peak act/rank (M_B)"};
  std::vector<bool> right{false, true, true, true, true, true, false};
  if (has_bytes) {
    header.push_back("peak mem");
    right.push_back(true);
  }
  header.push_back("fits");
  right.push_back(false);
  TextTable table(header, right);
  for (std::size_t i = 0; i < plan.schedules.size(); ++i) {
    const ScheduleResult& r = plan.schedules[i];
    std::vector<std::string> row{r.name + (r.training ? "" : " (inference)"), std::to_string(r.chunks)};
    if (!r.valid) {
      row.insert(row.end(), {"-", "-", "-", "-", "invalid"});
      if (has_bytes) row.push_back("-");
      row.push_back("no");
    } else {
      row.insert(row.end(), {number_text(r.makespan), number_text(r.max_rank_span), percent_of(r.bubble_fraction),
                             throughput_text(r.throughput, plan.unit), per_rank_text(r.peak_activations)});
      if (has_bytes) {
        row.push_back(bytes_text(*std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end())));
      }
      row.push_back(r.fits ? "yes" : "no: " + r.fit_problem);
    }
    table.add(std::move(row));
  }
  out += concat("Schedules (simulated; bubble = idle / (ranks x makespan); mb = micro-batches)\n", table.str());
  for (const SkippedSchedule& s : plan.skipped) out += concat("  skipped ", s.name, ": ", s.reason, '\n');
  for (const ScheduleResult& r : plan.schedules) {
    for (const std::string& p : r.problems) out += concat("  ", r.name, ": ", p, '\n');
  }
  out += memory_policy_report(plan);
  if (search != nullptr) out += search_table(*search, plan.unit.text());
  out += '\n';
  if (plan.recommended.index) {
    const ScheduleResult& best = plan.schedules[*plan.recommended.index];
    out += concat("Recommended: ", best.name, best.memory ? " with the memory policies above" : "", " (",
                  plan.recommended.reason, ")\n");
  } else {
    out += concat("Recommended: none (", plan.recommended.reason, ")\n");
  }
  return out;
}


[[nodiscard]] inline nlohmann::ordered_json partition_json(const Partition& p) {
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const PartitionStage& st = p.stages[s];
    // The keys predate PartitionStage's names and stay: comm_time is send_time, memory_bytes
    // static_bytes, output_bytes send_bytes.
    stages.push_back({{"stage", s},
                      {"rank", st.rank},
                      {"first_layer", st.begin},
                      {"last_layer", st.end - 1},
                      {"first_layer_name", st.first_layer_name},
                      {"last_layer_name", st.last_layer_name},
                      {"forward", st.forward},
                      {"backward_input", st.backward_input},
                      {"backward_weight", st.backward_weight},
                      {"compute_time", st.compute_time},
                      {"comm_time", st.send_time},
                      {"memory_bytes", st.static_bytes},
                      {"activation_bytes", st.activation_bytes},
                      {"output_bytes", st.send_bytes}});
  }
  return {{"method", p.method},
          {"stages", std::move(stages)},
          {"bottleneck_time", p.bottleneck},
          {"bottleneck_stage", p.bottleneck_stage}};
}

[[nodiscard]] inline nlohmann::ordered_json schedule_json(const ScheduleResult& r, const TimeUnit& unit) {
  nlohmann::ordered_json j{{"name", r.name},
                   {"chunks", r.chunks},
                   {"virtual_stages", r.virtual_stages},
                   {"training", r.training},
                   {"valid", r.valid},
                   {"problems", r.problems}};
  if (!r.valid) return j;
  const auto seconds = unit.seconds();
  j.update({{"makespan", r.makespan},
            {"max_rank_span", r.max_rank_span},
            {"bubble_fraction", r.bubble_fraction},
            {"ideal_time", r.ideal_time},
            {"busy", r.busy},
            {"span", r.span},
            {"peak_activations", r.peak_activations},
            {"peak_activation_bytes", r.peak_activation_bytes},
            {"peak_memory_bytes", r.peak_memory_bytes},
            {"throughput",
             {{"microbatches_per_unit", r.throughput},
              {"microbatches_per_second", seconds ? nlohmann::ordered_json(r.throughput / *seconds) : nlohmann::ordered_json(nullptr)}}},
            {"analytic", r.analytic_idle_per_rank
                             ? nlohmann::ordered_json{{"formula", r.analytic_formula}, {"idle_per_rank", *r.analytic_idle_per_rank}}
                             : nlohmann::ordered_json(nullptr)},
            {"fits", r.fits},
            {"fit_problem", r.fits ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.fit_problem)}});
  // Only with --memory-policy, so that the default output stays as it was.
  if (r.memory) j["memory_policy"] = memory_policy_json(*r.memory);
  return j;
}

struct OutputPaths {
  std::string trace;
  std::string svg;
  std::string csv;
};

[[nodiscard]] inline nlohmann::ordered_json plan_json(const PlanResult& plan, const PlanModel& model, const PlanOptions& options,
                                              const OutputPaths& outputs, const SearchSummary* search = nullptr) {
  nlohmann::ordered_json schedules = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < plan.schedules.size(); ++i) {
    schedules.push_back(schedule_json(plan.schedules[i], plan.unit));
  }
  nlohmann::ordered_json skipped = nlohmann::ordered_json::array();
  for (const SkippedSchedule& s : plan.skipped) skipped.push_back({{"name", s.name}, {"reason", s.reason}});
  const auto path_or_null = [](const std::string& p) { return p.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p); };
  return {{"tool", "ppsched-plan"},
          {"version", version_text},
          {"model", {{"description", plan.model}, {"unit", plan.unit.text()}, {"layers", model.layers}}},
          {"ranks", plan.ranks},
          {"microbatches", plan.microbatches},
          {"chunks", options.chunks},
          {"w_memory_ratio", options.w_memory_ratio},
          {"objective", to_string(options.objective)},
          {"link", {{"latency", model.link.latency}, {"bandwidth", finite_or_null(model.link.bandwidth)}}},
          {"memory_cap",
           {{"microbatches", finite_or_null(plan.cap.microbatches)},
            {"bytes", finite_or_null(plan.cap.total_bytes)},
            {"per_rank_bytes", plan.device_cap.rank_total_bytes.empty() ? nlohmann::ordered_json(nullptr)
                                                                        : nlohmann::ordered_json(plan.device_cap.rank_total_bytes)}}},
          {"partition", partition_json(plan.partition)},
          {"schedules", std::move(schedules)},
          {"skipped", std::move(skipped)},
          {"recommended", plan.recommended.index ? nlohmann::ordered_json(plan.schedules[*plan.recommended.index].name)
                                                 : nlohmann::ordered_json(nullptr)},
          {"recommendation_reason", plan.recommended.reason},
          {"search", search != nullptr ? search_json(*search) : nlohmann::ordered_json(nullptr)},
          {"outputs", {{"trace", path_or_null(outputs.trace)}, {"svg", path_or_null(outputs.svg)}, {"csv", path_or_null(outputs.csv)}}}};
}

// --validate's report: "OK" with the simulated figures, or each problem.
[[nodiscard]] inline std::string render_file_check(const FileCheck& c, bool has_bytes) {
  const ScheduleResult& r = c.result;
  const auto count = [](std::int64_t n, std::string_view one, std::string_view many) {
    return concat(n, ' ', n == 1 ? one : many);
  };
  std::string out = concat("ppsched-plan: schedule CSV '", c.path, "': ", count(r.schedule.ranks, "rank", "ranks"), ", ",
                           count(r.schedule.stages(), "stage", "stages"), ", ",
                           count(r.schedule.microbatches, "micro-batch", "micro-batches"), "\n");
  if (!r.valid) {
    out += concat(r.problems.size(), r.problems.size() == 1 ? " problem:\n" : " problems:\n");
    for (const std::string& p : r.problems) out += concat("  - ", p, '\n');
    return out;
  }
  out += concat("model: ", c.context.model, ", times in ", c.context.unit.text(), "\n\n");
  out += partition_table(c.context.partition, c.context.unit.text(), has_bytes);
  out += concat("\nOK: valid, and deadlock-free under rendezvous with communication on its own stream and on the "
                "compute stream\n",
                "  makespan ", number_text(r.makespan), ' ', c.context.unit.text(), ", max rank span ",
                number_text(r.max_rank_span), ", bubble ", percent_of(r.bubble_fraction), ", throughput ",
                throughput_text(r.throughput, c.context.unit), "\n  peak activations per rank (M_B): ",
                per_rank_text(r.peak_activations), '\n');
  if (has_bytes) {
    out += concat("  peak memory per rank:");
    for (const double b : r.peak_memory_bytes) out += concat(' ', bytes_text(b));
    out += '\n';
  }
  if (!r.fits) out += concat("  does not fit: ", r.fit_problem, '\n');
  return out;
}

[[nodiscard]] inline nlohmann::ordered_json file_check_json(const FileCheck& c, const PlanModel& model,
                                                            const OutputPaths& outputs) {
  const auto path_or_null = [](const std::string& p) {
    return p.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p);
  };
  nlohmann::ordered_json j{{"tool", "ppsched-plan"},
                           {"version", version_text},
                           {"file", c.path},
                           {"model", {{"description", c.context.model}, {"unit", c.context.unit.text()}, {"layers", model.layers}}},
                           {"ranks", c.result.schedule.ranks},
                           {"microbatches", c.result.schedule.microbatches}};
  if (c.result.valid) j["partition"] = partition_json(c.context.partition);
  const nlohmann::ordered_json stats = schedule_json(c.result, c.context.unit);
  for (const auto& [key, value] : stats.items()) j[key] = value;
  // An invalid schedule has no timeline, so nothing was written.
  const bool wrote = c.result.valid;
  j["outputs"] = {{"trace", wrote ? path_or_null(outputs.trace) : nullptr},
                  {"svg", wrote ? path_or_null(outputs.svg) : nullptr},
                  {"csv", nullptr}};
  return j;
}

}  // namespace ppsched::cli
