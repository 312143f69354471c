// ppsched-plan --lengths: one step of variable-length sequences (plan/varlen.hpp). The lengths
// come from a file, the per-stage costs from profiles measured at several micro-batch sizes at
// two sequence lengths or more (fit_length_costs needs both to tell attention from the
// per-token work), and each split the user asks for is planned with plan_step. Errors about
// the file name the file, its line and the value, since the library can only name lengths[i].
#pragma once

#include <charconv>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan_options.hpp"
#include "plan_report.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/profile_json.hpp"
#include "ppsched/plan/varlen.hpp"
#include "text.hpp"

namespace ppsched::cli {
using namespace ppsched::plan;  // the planner library, which these tools only parse for and print

struct LengthsFile {
  std::string path;
  std::vector<std::int64_t> lengths;
  std::vector<std::size_t> lines;  // the line (from 1) each length was read on
};

// Integers separated by newlines, commas or spaces (tabs too); blank lines are fine.
[[nodiscard]] inline LengthsFile read_lengths(const std::string& path) {
  LengthsFile out;
  out.path = path;
  const std::string subject = concat("lengths file '", path, "'");
  std::ifstream in(path);
  if (!in) fail({subject, "cannot be read", "", "give the path of a file of sequence lengths, one integer per line"});
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    std::size_t i = 0;
    while (i < line.size()) {
      const auto separator = [](char c) { return c == ',' || c == ' ' || c == '\t' || c == '\r'; };
      while (i < line.size() && separator(line[i])) ++i;
      std::size_t end = i;
      while (end < line.size() && !separator(line[end])) ++end;
      if (end == i) break;
      const std::string_view text(line.data() + i, end - i);
      std::int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      const std::string place = concat("line ", number);
      if (ec != std::errc{} || ptr != text.data() + text.size()) {
        fail({subject, concat("'", text, "' is not a whole number"), place,
              "write each sequence's token count as an integer, separated by newlines, commas or spaces"});
      }
      if (value < 0) fail({subject, concat("length ", value, " is negative"), place, "a sequence holds at least one token"});
      if (value == 0) fail({subject, "length 0: a sequence holds at least one token", place, "drop the empty sequence"});
      out.lengths.push_back(value);
      out.lines.push_back(number);
      i = end;
    }
  }
  if (out.lengths.empty()) fail({subject, "holds no lengths", "", "write one integer per sequence of the batch"});
  return out;
}

// The length costs from --profile A,B,... measured at --profile-lengths LA,LB,...
[[nodiscard]] inline LengthCosts fit_profiles(const PlanOptions& options) {
  std::vector<std::string> paths;
  for (std::string_view rest = options.profile_path;;) {
    const std::size_t comma = rest.find(',');
    paths.emplace_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (paths.size() != options.profile_lengths.size()) {
    fail({"flags --profile and --profile-lengths",
          concat(paths.size(), " profile file(s) and ", options.profile_lengths.size(), " sequence length(s)"), "",
          "give one --profile-lengths value per --profile file, in their order"});
  }
  std::vector<LengthSample> samples;
  for (std::size_t k = 0; k < paths.size(); ++k) {
    const Profile profile = load_profile(paths[k]);
    // One measured size per profile leaves the fit no token counts to compare at that length.
    for (std::size_t l = 0; l < profile.graph.size(); ++l) {
      if (profile.graph.layer(l).points.size() < 2) {
        fail({concat("profile '", paths[k], "'"),
              concat("layer ", l, " (", profile.graph.layer(l).name, ") has ", profile.graph.layer(l).points.size(),
                     " measured point(s): the costs of other lengths need several micro-batch sizes"),
              "", "measure every layer at two micro-batch sizes or more (its \"points\", docs/profile-format.md)"});
      }
    }
    for (LengthSample& s : length_samples(profile, options.profile_lengths[k])) samples.push_back(std::move(s));
  }
  bool two_lengths = false;
  for (const std::int64_t l : options.profile_lengths) two_lengths = two_lengths || l != options.profile_lengths.front();
  if (!two_lengths) {
    fail({"flag --profile-lengths", "every profile was measured at one sequence length: the attention term (sum of squared lengths) "
                                    "cannot be told from the per-token one",
          "", "measure the model at a second sequence length and give both: --profile A.json,B.json --profile-lengths 1024,4096"});
  }
  return fit_length_costs(samples);
}

struct SplitRun {
  Split split;
  StepPlan plan;
};

struct LengthsPlan {
  LengthsFile file;
  LengthCosts fit;
  TimeUnit unit;
  std::int64_t token_budget = 0;
  std::vector<SplitRun> runs;
};

[[nodiscard]] inline LengthsPlan make_lengths_plan(const PlanOptions& options) {
  LengthsPlan out;
  out.file = read_lengths(options.lengths_path);
  out.token_budget = options.token_budget;
  for (std::size_t i = 0; i < out.file.lengths.size(); ++i) {
    if (out.file.lengths[i] > options.token_budget) {
      fail({concat("lengths file '", out.file.path, "'"),
            concat("a sequence of ", out.file.lengths[i], " tokens is longer than --token-budget ", options.token_budget),
            concat("line ", out.file.lines[i]), "raise --token-budget, or truncate the sequence"});
    }
  }
  out.fit = fit_profiles(options);
  const std::string first_profile = options.profile_path.substr(0, options.profile_path.find(','));
  out.unit = load_profile(first_profile).time_unit;
  if (out.unit.empty()) out.unit = "unit";
  std::vector<SplitMethod> methods;
  if (options.split == "all") {
    methods = {SplitMethod::padded, SplitMethod::bucketed, SplitMethod::packed, SplitMethod::balanced};
  } else {
    for (const SplitMethod m : {SplitMethod::padded, SplitMethod::bucketed, SplitMethod::packed, SplitMethod::balanced}) {
      if (split_method_name(m) == options.split) methods.push_back(m);
    }
  }
  SplitOptions split;
  split.token_budget = options.token_budget;
  for (const SplitMethod m : methods) {
    SplitRun run;
    run.split = split_batch(out.file.lengths, out.fit, m, split);
    run.plan = plan_step(out.fit, run.split.microbatches);
    out.runs.push_back(std::move(run));
  }
  return out;
}

[[nodiscard]] inline double step_time(const SplitRun& r) { return r.plan.search.simulation.makespan; }

[[nodiscard]] inline std::string render_lengths_plan(const LengthsPlan& p) {
  std::int64_t longest = 0;
  double tokens = 0.0;
  for (const std::int64_t l : p.file.lengths) {
    longest = std::max(longest, l);
    tokens += static_cast<double>(l);
  }
  std::string out = concat("ppsched-plan: ", p.file.lengths.size(), " sequences from '", p.file.path, "' (", tokens,
                           " tokens, longest ", longest, "), ", p.fit.stages.size(), " stages, times in ", p.unit.text(), "\n");
  out += concat("costs fitted to ", p.fit.samples, " measured micro-batches (largest residual ",
                percent_of(p.fit.max_relative_residual()), "); at most ", p.token_budget, " tokens per micro-batch\n\n");
  TextTable table({"split", "micro-batches", "tokens", "computed", "padding", "schedule", "step", "tokens/" + p.unit.text()},
                  {false, true, true, true, true, false, true, true});
  for (const SplitRun& r : p.runs) {
    table.add({std::string(split_method_name(r.split.method)), std::to_string(r.split.microbatches.size()),
               number_text(r.split.tokens), number_text(r.split.computed_tokens), percent_of(r.split.padding_fraction()),
               r.plan.search.schedule.name, number_text(step_time(r)), number_text(r.split.tokens / step_time(r))});
  }
  out += concat("Micro-batches and plan per split (computed = tokens with padding; step = the chosen schedule's "
                "simulated step, micro-batches in the order plan_step chose)\n",
                table.str());
  return out;
}

[[nodiscard]] inline nlohmann::ordered_json lengths_plan_json(const LengthsPlan& p) {
  nlohmann::ordered_json splits = nlohmann::ordered_json::array();
  for (const SplitRun& r : p.runs) {
    splits.push_back({{"method", split_method_name(r.split.method)},
                      {"microbatches", r.split.microbatches.size()},
                      {"tokens", r.split.tokens},
                      {"computed_tokens", r.split.computed_tokens},
                      {"padding_fraction", r.split.padding_fraction()},
                      {"schedule", r.plan.search.schedule.name},
                      {"step_time", step_time(r)},
                      {"given_order_step_time", r.plan.given_order_makespan},
                      {"tokens_per_unit", r.split.tokens / step_time(r)}});
  }
  return {{"tool", "ppsched-plan"},
          {"version", version_text},
          {"lengths", {{"file", p.file.path}, {"sequences", p.file.lengths.size()}}},
          {"fit", {{"samples", p.fit.samples}, {"stages", p.fit.stages.size()}, {"max_relative_residual", p.fit.max_relative_residual()}}},
          {"unit", p.unit.text()},
          {"token_budget", p.token_budget},
          {"splits", std::move(splits)}};
}

}  // namespace ppsched::cli
