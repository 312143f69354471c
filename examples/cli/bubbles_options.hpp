// What ppsched-bubbles was asked to do: the flag table (which also writes --help) and the
// checks that turn the command line into a BubblesOptions value or a ppsched::error. The
// model flags are ppsched-plan's, so a model planned there can be measured here as is.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "args.hpp"
#include "plan_options.hpp"
#include "ppsched/error.hpp"
#include "text.hpp"

namespace ppsched::cli {

struct BubblesOptions {
  PlanOptions model;         // model source, P, M, V, schedules (shared with ppsched-plan)
  double ms_per_unit = 0.0;  // 0: 1 for a unit-less model, else from the model's time unit
  std::int32_t steps = 3;    // measured steps per schedule
  std::int32_t warmup = 1;   // unmeasured steps first (threads start, buffers fault in)
  std::string backend = "cpu";
  bool json = false;
  std::string trace_path;
  bool help = false;
  bool version = false;
};

inline constexpr std::array<FlagSpec, 15> bubbles_flags{{
    {"--stage-cost", "F,B,W", "every rank's stage costs F, BI, BW in model units (default 1,1,1)"},
    {"--layers", "N", "a chain of N identical layers, partitioned (forward 1, BI 1, BW 1 each)"},
    {"--profile", "FILE", "model profile (JSON), partitioned"},
    {"--stages", "P", "pipeline ranks (default 4)"},
    {"--microbatches", "M", "micro-batches per step (default 8)"},
    {"--chunks", "V", "model chunks per rank for the looped families: interleaved-1f1b, interleaved-zb, looped-bfs (default 2)"},
    {"--schedule", "NAME", "all (default) or a family (comma-separated list allowed)"},
    {"--ms-per-unit", "X", "wall-clock milliseconds of one model time unit (default 1, or the profile's unit)"},
    {"--steps", "N", "measured steps per schedule; the median one is reported (default 3)"},
    {"--warmup", "N", "unmeasured steps before them (default 1)"},
    {"--backend", "NAME", "cpu (default), or cuda: spin kernels on the GPUs (the CUDA build of this tool)"},
    {"--json", "", "print one JSON object instead of the report (docs/cli.md)"},
    {"--trace", "FILE", "write the measured timeline as a Chrome trace (one schedule only)"},
    {"--help", "", "print this help"},
    {"--version", "", "print the version"},
}};

[[nodiscard]] inline BubblesOptions parse_bubbles_options(std::span<const char* const> argv) {
  BubblesOptions options;
  const std::vector<GivenFlag> given = split_flags(argv, bubbles_flags);
  // The model flags mean what they mean for ppsched-plan: its parser reads them.
  std::vector<GivenFlag> model_flags;
  for (const GivenFlag& flag : given) {
    const std::string_view n = flag.name;
    if (n == "--ms-per-unit") {
      options.ms_per_unit = parse_real(flag, 0.0, true);
    } else if (n == "--steps") {
      options.steps = static_cast<std::int32_t>(parse_integer(flag, 1, 1000));
    } else if (n == "--warmup") {
      options.warmup = static_cast<std::int32_t>(parse_integer(flag, 0, 1000));
    } else if (n == "--backend") {
      if (flag.value != "cpu" && flag.value != "cuda") {
        fail({"flag --backend", concat("unknown backend '", flag.value, "'"), argument_place(flag.position),
              "valid backends: cpu, cuda"});
      }
      options.backend = flag.value;
    } else if (n == "--json") {
      options.json = true;
    } else if (n == "--trace") {
      if (flag.value.empty()) {
        fail({"flag --trace", "the file name is empty", argument_place(flag.position), "give a path"});
      }
      options.trace_path = flag.value;
    } else if (n == "--help") {
      options.help = true;
    } else if (n == "--version") {
      options.version = true;
    } else {
      if (n == "--schedule" && flag.value == "auto") {
        fail({"flag --schedule", "'auto' picks a schedule by simulation; ppsched-bubbles measures the ones named",
              argument_place(flag.position), "use ppsched-plan --schedule auto, then measure its choice here"});
      }
      model_flags.push_back(flag);
    }
  }
  options.model = parse_plan_flags(model_flags);
  if (options.model.source == ModelSource::embedded_gpt) {  // no model flag: the bubbles default
    options.model.source = ModelSource::stage_cost;
    options.model.stage_cost = {1.0, 1.0, 1.0};
  }
  if (!options.model.stages_given) options.model.stages = 4;
  if (!options.model.microbatches_given) options.model.microbatches = 8;
  if (!options.trace_path.empty() && options.model.schedules.size() != 1) {
    fail({"flag --trace", "records the run of one schedule", "",
          "name exactly one schedule with --schedule, e.g. --schedule 1f1b"});
  }
  return options;
}

}  // namespace ppsched::cli
