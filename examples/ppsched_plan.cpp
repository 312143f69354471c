// ppsched-plan: the planner on the command line. It cuts a model into pipeline stages,
// builds every schedule family (or the ones asked for), proves each deadlock-free, simulates
// it, and recommends the fastest that fits the memory cap — or, with --schedule auto, lets
// the schedule search find one; with --json it prints the same as one JSON object for
// scripts. docs/cli.md documents every flag and field.
//
// With --devices N it splits N devices into data x pipeline parallelism instead
// (plan/devices.hpp): d replicas of a p-stage pipeline, micro-batches and schedule, with the
// gradient all-reduce in each step time.
//
// Exit status: 0 done; 1 --validate found problems in the schedule; 2 bad input (an unknown
// flag or schedule, an unreadable or malformed file, a request no schedule accepts, a
// --devices plan that nothing fits).
#include <cstdio>
#include <exception>
#include <new>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/auto_plan.hpp"
#include "cli/devices.hpp"
#include "cli/models.hpp"
#include "cli/output_file.hpp"
#include "cli/plan.hpp"
#include "cli/plan_options.hpp"
#include "cli/plan_report.hpp"
#include "cli/text.hpp"
#include "cli/varlen.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/csv.hpp"
#include "ppsched/trace/chrome_trace.hpp"
#include "ppsched/trace/svg.hpp"

namespace {

namespace cli = ppsched::cli;

std::string usage() {
  return "usage: ppsched-plan [--profile FILE | --layers N | --stage-cost F,B,W] [--stages P] [--microbatches M]\n"
         "                    [--schedule all|auto|NAME[,NAME...]] [--json] [--trace FILE] [--svg FILE] [--csv FILE]\n"
         "                    [--validate FILE.csv] [more flags below]\n"
         "       ppsched-plan --devices N [--global-batch B] [--memory-cap-bytes BYTES] [model flags]\n"
         "       ppsched-plan --lengths FILE --profile A.json,B.json --profile-lengths LA,LB [--token-budget N]\n"
         "                    [--split balanced|packed|bucketed|padded|all] [--json]\n"
         "With no flags: a GPT-style model (embedding, 32 transformer blocks, LM head) on 8 ranks, 32 micro-batches.\n\n" +
         cli::flag_help(cli::plan_flags) +
         "\nschedules: " + cli::schedule_choices() +
         "\nexit status: 0 done, 1 --validate found problems, 2 bad input. See docs/cli.md.\n";
}

// Renders every requested file, then writes them all or none (output_file.hpp).
void write_outputs(const ppsched::plan::ScheduleResult& r, const cli::OutputPaths& outputs) {
  if (!r.valid) {
    cli::fail({"ppsched-plan", cli::concat("schedule '", r.name, "' is not valid, so it has no timeline"),
                   "", "fix the problems listed in the report"});
  }
  std::vector<cli::OutputFile> files;
  if (!outputs.trace.empty()) {
    ppsched::ChromeTraceOptions o;
    o.title = "ppsched-plan: " + r.name;
    files.push_back({outputs.trace, ppsched::to_chrome_trace(r.timeline, o)});
  }
  if (!outputs.svg.empty()) {
    ppsched::SvgOptions o;
    o.title = "ppsched-plan: " + r.name;
    files.push_back({outputs.svg, ppsched::to_svg(r.timeline, o)});
  }
  if (!outputs.csv.empty()) files.push_back({outputs.csv, ppsched::to_pytorch_csv(r.schedule)});
  cli::write_files_atomically(files);
}

int run(std::span<const char* const> argv) {
  cli::PlanOptions options = cli::parse_plan_options(argv);
  if (options.help) {
    std::cout << usage();
    return 0;
  }
  if (options.version) {
    std::cout << "ppsched-plan " << cli::version_text << '\n';
    return 0;
  }
  if (!options.lengths_path.empty()) {
    const cli::LengthsPlan plan = cli::make_lengths_plan(options);
    if (options.json) {
      std::cout << cli::lengths_plan_json(plan).dump(2) << '\n';
    } else {
      std::cout << cli::render_lengths_plan(plan);
    }
    return 0;
  }
  if (!options.calibrate_paths.empty()) {
    const ppsched::plan::Recalibration r = cli::make_recalibration(options);
    std::cout << cli::recalibration_report(r);
    return r.after.chosen ? 0 : 2;
  }
  if (options.devices > 0) {
    const ppsched::plan::DevicePlan plan = cli::make_device_plan(options);
    if (options.json) {
      std::cout << cli::device_plan_json(plan, cli::version_text).dump(2) << '\n';
    } else {
      std::cout << to_string(plan);
    }
    if (!plan.chosen) {
      std::cerr << "ppsched-plan: error: no split of " << plan.devices << " devices fits: " << plan.reason
                << "\n(raise --memory-cap-bytes, add devices, or lower --optimizer-state-factor)\n";
      return 2;
    }
    return 0;
  }
  const ppsched::plan::PlanModel model = cli::make_model(options);
  const cli::OutputPaths outputs{options.trace_path, options.svg_path, options.csv_path};

  if (!options.validate_path.empty()) {
    const cli::FileCheck check = cli::check_schedule_file(options, model);
    if (check.result.valid) write_outputs(check.result, outputs);
    if (options.json) {
      std::cout << cli::file_check_json(check, model, outputs).dump(2) << '\n';
    } else {
      std::cout << cli::render_file_check(check, model.has_bytes);
    }
    return check.result.valid ? 0 : 1;
  }

  cli::check_plan_memory(cli::plan_request(options), options.schedule_auto,
                         cli::concat("--stages ", options.stages, " --microbatches ", options.microbatches));
  ppsched::plan::SearchSummary search;
  const ppsched::plan::PlanResult plan =
      options.schedule_auto ? cli::make_auto_plan(options, model, search) : cli::make_plan(options, model);
  const ppsched::plan::SearchSummary* searched = options.schedule_auto ? &search : nullptr;
  if (!outputs.trace.empty() || !outputs.svg.empty() || !outputs.csv.empty()) {
    // The files describe one schedule: the only one asked for, or the recommended one.
    const std::optional<std::size_t> chosen =
        plan.schedules.size() == 1 ? std::optional<std::size_t>(0) : plan.recommended.index;
    if (!chosen) {
      cli::fail({"ppsched-plan", "no schedule was recommended, so there is nothing to write to --trace, --svg or --csv",
                     "", "name one schedule with --schedule, or relax the memory cap"});
    }
    write_outputs(plan.schedules[*chosen], outputs);
  }
  if (options.json) {
    std::cout << cli::plan_json(plan, model, options, outputs, searched).dump(2) << '\n';
  } else {
    std::cout << cli::render_report(plan, model.has_bytes, searched);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::span<const char* const>(argv, static_cast<std::size_t>(argc)));
  } catch (const ppsched::error& e) {
    std::cerr << "ppsched-plan: error: " << e.what() << "\n(run ppsched-plan --help for the flags)\n";
    return 2;
  } catch (const std::bad_alloc&) {
    // What check_plan_memory's estimate let through and the machine could not hold: the
    // request is too large for it, as bad input is (exit 1 is --validate's).
    std::cerr << "ppsched-plan: error: ran out of memory (std::bad_alloc)\n(give fewer --stages or --microbatches, "
                 "or compare fewer schedules with --schedule NAME)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ppsched-plan: internal error: " << e.what() << '\n';
    return 1;
  }
}
