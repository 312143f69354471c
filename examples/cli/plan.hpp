// The planner behind ppsched-plan, in the tool's terms: the flags become a PlanRequest, the
// library (ppsched/plan/) compares the families or runs the search, and what the library
// leaves to its caller is said here with the flags' names: a family named on the command line
// that the model cannot be cut for, --chunks given where no family uses it, and --validate's
// file. The report and the JSON (plan_report.hpp) are two views of the one PlanResult.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "plan_options.hpp"
#include "ppsched/error.hpp"
#include "ppsched/plan/compare.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/schedule/csv.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/validate/validate.hpp"
#include "text.hpp"

namespace ppsched::cli {
using namespace ppsched::plan;  // the planner library, which these tools only parse for and print

// The library's request for what the flags ask.
[[nodiscard]] inline PlanRequest plan_request(const PlanOptions& options) {
  PlanRequest r;
  r.ranks = options.stages;
  r.microbatches = options.microbatches;
  r.chunks = options.chunks;
  r.families = options.schedules;
  r.weight_memory_fraction = options.w_memory_ratio;
  r.cap = memory_cap_of(options);
  r.objective = options.objective;
  r.memory_policy = options.memory_policy;
  return r;
}

// The memory this process may use: the machine's physical memory, or less where a cgroup
// (a container, a Slurm job) limits it, or PPSCHED_PLAN_MEMORY_BYTES (a whole number of bytes)
// where it is set. 0 when none of these can be read.
[[nodiscard]] inline double usable_memory_bytes() {
  if (const char* given = std::getenv("PPSCHED_PLAN_MEMORY_BYTES"); given != nullptr && *given != '\0') {
    std::uint64_t bytes = 0;
    const std::string_view text(given);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bytes);
    if (ec != std::errc{} || end != text.data() + text.size() || bytes == 0) {
      fail({"environment variable PPSCHED_PLAN_MEMORY_BYTES", concat("value '", text, "' is not a byte count"),
            "", "give a positive whole number of bytes, or unset it to use the machine's memory"});
    }
    return static_cast<double>(bytes);
  }
  double bytes = 0.0;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) bytes = static_cast<double>(pages) * static_cast<double>(page);
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");  // cgroup v2; "max" when unlimited
  double limit = 0.0;
  if (cgroup >> limit && limit > 0.0) bytes = bytes > 0.0 ? std::min(bytes, limit) : limit;
  return bytes;
}

// Refuses, before any work, a plan whose schedules would need more memory than this process
// may use (estimate_plan_bytes; the search keeps about twice as much): flag values such as
// --stages 1024 --microbatches 21845 are each in range but together need tens of GiB, and
// ended in "internal error: std::bad_alloc" (issue 24).
inline void check_plan_memory(const PlanRequest& request, bool search, std::string_view sizes) {
  const double usable = usable_memory_bytes();
  if (usable <= 0.0) return;
  const double need = estimate_plan_bytes(request) * (search ? 2.0 : 1.0);
  if (need <= usable) return;
  fail({concat("flags ", sizes), concat("planning these schedules would need about ", bytes_text(need),
                                       " of memory, and this process may use ", bytes_text(usable)),
        "", "give fewer stages or micro-batches, or compare fewer schedules with --schedule NAME"});
}

// --chunks names a number for the families that take any (interleaved-1f1b, looped-bfs);
// given while none is selected it would change nothing, which the user should hear about.
inline void check_chunks_used(const PlanOptions& options) {
  if (!options.chunks_given || options.schedules.empty()) return;
  for (const std::string& s : options.schedules) {
    if (family_info(s).chunks == 0) return;
  }
  std::vector<std::string_view> takers;  // the families whose record takes any chunk count
  for (const FamilyInfo& f : schedule_families) {
    if (f.chunks == 0) takers.push_back(f.name);
  }
  std::string names;
  for (std::size_t i = 0; i < takers.size(); ++i) {
    names += concat(i == 0 ? "" : i + 1 == takers.size() ? " and " : ", ", takers[i]);
  }
  fail({"flag --chunks",
        concat("applies to ", names, ", and ", takers.size() == 2 ? "neither" : "none", " is selected"),
        "", "drop --chunks, or add one of them to --schedule (the V-shaped families always have 2 chunks, the others 1)"});
}

// A schedule named with --schedule that the model cannot be cut for is an error naming the
// flags that would help (`all` lists it as skipped instead). Both tools hold to this.
inline void refuse_named_uncut(const PlanOptions& options, const std::vector<SkippedSchedule>& skipped) {
  if (options.schedules.empty()) return;
  for (const SkippedSchedule& s : skipped) {
    if (!s.cannot_cut) continue;
    fail({concat("schedule '", s.name, "'"), s.reason, "",
          s.chunks > 1 ? "use fewer --chunks or --stages, or a model with more layers" : "use fewer --stages"});
  }
}

// Evaluates the schedules `options` asks for on `model` and recommends one.
[[nodiscard]] inline PlanResult make_plan(const PlanOptions& options, const PlanModel& model) {
  check_chunks_used(options);
  PlanResult plan = compare_families(model, plan_request(options));
  refuse_named_uncut(options, plan.skipped);
  return plan;
}

// What --validate reports: the file's schedule, proven and simulated on the model.
struct FileCheck {
  std::string path;
  PlanResult context;  // ranks, micro-batches, caps and the partition for the file's placement
  ScheduleResult result;
};

// Reads a PyTorch-format schedule CSV, validates it and, when it is valid, simulates it on
// `model` cut for the file's placement. Throws ppsched::error when the file cannot be read
// or parsed, or contradicts --stages / --microbatches; problems in the schedule itself are
// results (FileCheck::result.problems), not errors.
[[nodiscard]] inline FileCheck check_schedule_file(const PlanOptions& options, const PlanModel& model) {
  FileCheck check;
  check.path = options.validate_path;
  const std::string subject = concat("schedule CSV '", options.validate_path, "'");
  CsvReadOptions read;
  read.source = options.validate_path;
  read.name = std::filesystem::path(options.validate_path).filename().string();
  // A FIFO or a device (`--validate <(generate)`, /dev/stdin) is read like a file, up to
  // CsvReadOptions::max_bytes; only a missing path or a directory is refused here.
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(options.validate_path, ec);
  if (!std::filesystem::exists(status)) {
    fail({subject, "cannot be read: no such file", "",
          "give the path of a CSV written by ppsched-plan --csv or PyTorch's _dump_csv"});
  }
  if (std::filesystem::is_directory(status)) {
    fail({subject, "is a directory", "", "give the path of a CSV written by ppsched-plan --csv or PyTorch's _dump_csv"});
  }
  // The micro-batch count is read from the file and compared with --microbatches here, so
  // that a mismatch names the flag rather than the library's CsvReadOptions::microbatches.
  Schedule schedule = load_pytorch_csv(options.validate_path, read);
  if (options.microbatches_given) {
    if (schedule.microbatches > options.microbatches) {
      fail({subject,
            concat("an action names micro-batch ", schedule.microbatches - 1, " but --microbatches is ",
                   options.microbatches),
            "", concat("fix the cell, or give --microbatches ", schedule.microbatches, " or more (or drop it: the file sets it)")});
    }
    schedule.microbatches = options.microbatches;
  }
  if (options.stages_given && schedule.ranks != options.stages) {
    fail({subject, concat("has ", schedule.ranks, " ranks (rows) but --stages is ", options.stages), "",
          "drop --stages (the file sets it) or give the file's rank count"});
  }
  PlanResult& plan = check.context;
  plan.model = model.description;
  plan.unit = model.unit;
  plan.ranks = schedule.ranks;
  plan.microbatches = schedule.microbatches;
  plan.cap = memory_cap_of(options);
  plan.device_cap = model.device_cap;
  // Problems found without costs are reported before the model is cut for a placement
  // that may not make sense.
  ValidateOptions shape_only;
  shape_only.check_deadlock = false;
  if (const ValidationReport first = validate(schedule, shape_only); !first.ok()) {
    check.result.name = schedule.name;
    check.result.virtual_stages = schedule.stages();
    for (const Problem& p : first.problems) check.result.problems.push_back(p.message);
    if (first.unlisted_problems != 0) check.result.problems.push_back(concat("... and ", first.unlisted_problems, " more"));
    check.result.fits = false;
    check.result.fit_problem = "is not valid";
    check.result.schedule = std::move(schedule);
    return check;
  }
  plan.partition = model.partition(schedule.placement);
  plan.chunks = 1;
  for (const std::int32_t v : chunks_per_rank(schedule)) plan.chunks = std::max(plan.chunks, v);
  PlanRequest request = plan_request(options);
  request.ranks = schedule.ranks;
  request.microbatches = schedule.microbatches;
  check.result = evaluate_schedule(std::move(schedule), model, plan.partition, request);
  return check;
}

}  // namespace ppsched::cli
