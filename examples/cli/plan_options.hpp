// What ppsched-plan was asked to do: the flag table (which also writes --help), and the
// checks that turn the command line into a PlanOptions value or a ppsched::error. Every
// combination that would be silently ignored or ambiguous is rejected here, before any
// work starts, so that a typo costs the user one line of output rather than a wrong plan.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "args.hpp"
#include "ppsched/error.hpp"
#include "ppsched/plan/compare.hpp"
#include "ppsched/plan/memory_policy.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/sim/data_parallel.hpp"
#include "text.hpp"

namespace ppsched::cli {
using namespace ppsched::plan;  // the planner library, which these tools only parse for and print

// Where the model comes from. Exactly one, or the embedded GPT-style default.
enum class ModelSource : std::uint8_t { embedded_gpt, profile, uniform_layers, stage_cost };


struct PlanOptions {
  ModelSource source = ModelSource::embedded_gpt;
  std::string profile_path;
  std::int32_t layers = 0;                  // --layers
  std::array<double, 3> stage_cost{};       // --stage-cost F,B,W (per rank)
  std::int32_t stages = 8;                  // P, ranks
  std::int32_t microbatches = 32;           // M
  bool stages_given = false;
  bool microbatches_given = false;
  std::int32_t chunks = 2;                  // V for the families that take any (FamilyInfo::chunks == 0)
  bool chunks_given = false;
  std::optional<double> comm_latency;       // --comm; unset: the source's default
  std::optional<double> bandwidth;          // --bandwidth, bytes per time unit
  std::optional<double> memory_cap_microbatches;
  std::optional<double> memory_cap_bytes;
  double w_memory_ratio = 0.5;              // M_W / M_B
  // Bytes held per parameter byte: the library's default (bf16 weights and gradients with fp32
  // master weights and two fp32 Adam moments, 16 bytes per 2-byte parameter).
  double optimizer_state_factor = default_optimizer_state_factor;
  PartitionMethod partition = PartitionMethod::optimal;
  std::vector<std::string> schedules;       // canonical family names, in the order asked
  bool schedule_auto = false;               // --schedule auto: the schedule search picks one
  Objective objective;                      // --objective: what the recommendation (or search) minimises
  PlanMemoryPolicy memory_policy;           // --memory-policy: none (default), auto, or per stage
  bool json = false;
  std::string trace_path;
  std::string svg_path;
  std::string csv_path;
  std::string validate_path;
  // --devices N: split N devices into data x pipeline parallelism (plan/devices.hpp).
  std::int32_t devices = 0;                 // 0: plan one pipeline of --stages ranks
  std::int64_t global_batch = 256;          // samples per step, with --devices
  AllReduceAlgorithm all_reduce = AllReduceAlgorithm::ring;
  std::optional<double> all_reduce_bandwidth;  // bytes per time unit between replicas; unset: the link's
  // --calibrate FILE[,FILE...]: measured timelines (CSV), one step each, refit the profile
  // before the --devices plan, which is shown before and after (plan/calibrate.hpp). Several
  // runs at different micro-batch sizes separate the fixed costs from the per-row ones.
  std::vector<std::string> calibrate_paths;
  // --calibrate-rows R[,R...]: rows per micro-batch of each run (one value: all of them);
  // empty: the profile's "rows".
  std::vector<double> calibrate_rows;
  // --lengths FILE: plan one step of variable-length sequences (cli/varlen.hpp) from profiles
  // measured at several micro-batch sizes and sequence lengths (--profile A,B --profile-lengths LA,LB).
  std::string lengths_path;
  std::vector<std::int64_t> profile_lengths;   // --profile-lengths: each profile's tokens per sequence
  std::int64_t token_budget = 8192;            // --token-budget: tokens per micro-batch, padding included
  std::string split = "balanced";              // --split: a SplitMethod's name, or "all"
  bool help = false;
  bool version = false;
};

// The caps the flags give (--memory-cap, --memory-cap-bytes), in the library's one cap type.
[[nodiscard]] inline MemoryCap memory_cap_of(const PlanOptions& options) {
  MemoryCap cap;
  if (options.memory_cap_microbatches) cap.microbatches = *options.memory_cap_microbatches;
  if (options.memory_cap_bytes) cap.total_bytes = *options.memory_cap_bytes;
  return cap;
}

inline constexpr std::array<FlagSpec, 34> plan_flags{{
    {"--profile", "FILE", "model profile (JSON, see docs/profile-format.md)"},
    {"--layers", "N", "a chain of N identical layers (forward 1, backward-for-input 1, backward-for-weights 1)"},
    {"--stage-cost", "F,B,W", "every rank's stage costs F, BI, BW (pure schedule study; no partitioning)"},
    {"--stages", "P", "pipeline ranks (default 8)"},
    {"--microbatches", "M", "micro-batches per step (default 32)"},
    {"--chunks", "V", "model chunks per rank for the looped families: interleaved-1f1b, interleaved-zb, looped-bfs (default 2)"},
    {"--comm", "T", "latency of one transfer between ranks, in the model's time unit (default: the profile's)"},
    {"--bandwidth", "BYTES", "bytes per time unit between ranks (default: the profile's; free for --layers)"},
    {"--memory-cap-microbatches", "N", "per-rank cap on stored activations, in M_B units"},
    {"--memory-cap-bytes", "BYTES", "per-rank cap on parameters + activations, e.g. 80GiB"},
    {"--memory-policy", "POLICY", "none (default), auto (recompute or offload where a schedule exceeds --memory-cap-bytes), or per stage: 0=recompute,1=offload:0.5,2=layerwise,3=layerwise-offload"},
    {"--host-link", "T,X", "with --memory-policy: offload copies' latency T and bytes per time unit X (default PCIe 4 x16: 10 us, 25 GB/s)"},
    {"--w-memory-ratio", "R", "M_W / M_B: what BI keeps until BW (default 0.5)"},
    {"--optimizer-state-factor", "X", "bytes held per parameter byte (default 8: bf16 + fp32 Adam)"},
    {"--partition", "METHOD", "optimal (default, min bottleneck), uniform (equal layer counts) or params"},
    {"--schedule", "NAME", "all (default), a family (comma-separated list allowed), or auto (search)"},
    {"--objective", "GOAL", "makespan (default), span (the longest rank span), or memory[:BOUND] (least memory, makespan <= BOUND)"},
    {"--json", "", "print one JSON object instead of the report (docs/cli.md)"},
    {"--trace", "FILE", "write the chosen schedule's simulated timeline as a Chrome trace"},
    {"--svg", "FILE", "write the chosen schedule's timeline as an SVG Gantt chart"},
    {"--csv", "FILE", "write the chosen schedule as PyTorch-compatible CSV"},
    {"--validate", "FILE", "check a schedule CSV and simulate it on this model"},
    {"--devices", "N", "plan N devices as d replicas of a p-stage pipeline (p from --stages if given)"},
    {"--global-batch", "B", "samples per step with --devices (default 256); m from --microbatches if given"},
    {"--all-reduce", "ALGO", "ring (default) or tree: how a stage's replicas sum gradients, with --devices"},
    {"--all-reduce-bandwidth", "BYTES", "bytes per time unit between replicas (default: --bandwidth's link)"},
    {"--calibrate", "FILE[,FILE...]", "measured steps' timelines (CSV) refit the profile; shows the --devices plan before and after"},
    {"--calibrate-rows", "R[,R...]", "rows per micro-batch of each measured step, or one for all (default: the profile's \"rows\")"},
    {"--lengths", "FILE", "plan one step of sequences of these lengths (integers separated by newlines, commas or spaces); needs --profile and --profile-lengths"},
    {"--profile-lengths", "L[,L...]", "with --lengths: tokens per sequence each --profile file (comma-separated, two or more) was measured at"},
    {"--token-budget", "N", "with --lengths: tokens a micro-batch may compute, padding included (default 8192)"},
    {"--split", "METHOD", "with --lengths: balanced (default), packed, bucketed, padded, or all (compared in one table)"},
    {"--help", "", "print this help"},
    {"--version", "", "print the version"},
}};

[[nodiscard]] inline std::string schedule_choices() {
  std::string list = "all, auto";
  for (const std::string_view name : family_names()) {
    list += ", ";
    list += name;
  }
  return list;
}

// The comma-separated items of a flag's value, in order ("a.csv,b.csv" -> a.csv, b.csv).
[[nodiscard]] inline std::vector<std::string> comma_items(const GivenFlag& flag) {
  std::vector<std::string> items;
  std::string_view rest = flag.value;
  while (true) {
    const std::size_t comma = rest.find(',');
    items.emplace_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) return items;
    rest = rest.substr(comma + 1);
  }
}

// Parses "--schedule" values: all, auto, or a comma-separated list of family names (any
// spelling family_info accepts), stored canonically and without repeats.
inline void parse_schedule_list(const GivenFlag& flag, PlanOptions& options) {
  const std::string& text = flag.value;
  if (text == "all") return;
  if (text == "auto") {
    options.schedule_auto = true;
    return;
  }
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    if (name == "all" || name == "auto") {
      fail({"flag --schedule", concat("'", name, "' cannot be part of a list"), argument_place(flag.position),
            concat("give '", name, "' alone, or a list of families: ", schedule_choices())});
    }
    std::string canonical;
    try {
      canonical = std::string(family_info(name).name);
    } catch (const ppsched::error&) {
      fail({"flag --schedule", concat("unknown schedule '", name, "'"), argument_place(flag.position),
            concat("valid schedules: ", schedule_choices())});
    }
    if (std::find(options.schedules.begin(), options.schedules.end(), canonical) != options.schedules.end()) {
      fail({"flag --schedule", concat("'", canonical, "' is listed twice"), argument_place(flag.position),
            "list each schedule once"});
    }
    options.schedules.push_back(canonical);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
}

// Parses "--objective": makespan, span, memory, or memory:BOUND with a makespan bound > 0.
[[nodiscard]] inline Objective parse_objective(const GivenFlag& flag) {
  const std::string_view text = flag.value;
  if (text == "makespan") return Objective{};
  if (text == "span") return Objective{ObjectiveKind::span};
  if (text == "memory") return Objective{ObjectiveKind::memory};
  constexpr std::string_view memory_with = "memory:";
  if (text.starts_with(memory_with)) {
    Objective o{ObjectiveKind::memory};
    o.makespan_bound = parse_real_text(text.substr(memory_with.size()), "flag --objective", flag.position, 0.0, true);
    return o;
  }
  fail({"flag --objective", concat("unknown objective '", text, "'"),
        argument_place(flag.position),
        "give makespan, span, memory, or memory:BOUND (the least memory among schedules whose makespan is at most BOUND)"});
}

// The forms --memory-policy takes, for its errors.
inline constexpr std::string_view memory_policy_forms =
    "give none, auto, or STAGE=POLICY pairs separated by commas, POLICY one of recompute, selective:F, offload, "
    "offload:F (F a share from 0 to 1), layerwise, layerwise-offload, e.g. 0=recompute,1=offload:0.5,2=selective:0.3";

// Parses "--memory-policy": none, auto, or STAGE=POLICY[,STAGE=POLICY...]; an error names the
// token it cannot read.
[[nodiscard]] inline PlanMemoryPolicy parse_memory_policy(const GivenFlag& flag) {
  PlanMemoryPolicy out;
  const std::string_view text = flag.value;
  if (text == "none") return out;
  if (text == "auto") {
    out.mode = MemoryPolicyMode::automatic;
    return out;
  }
  out.mode = MemoryPolicyMode::given;
  const auto bad = [&](std::string_view token, std::string_view what) {
    fail({"flag --memory-policy", concat("'", token, "' ", what), argument_place(flag.position),
          std::string(memory_policy_forms)});
  };
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view token = rest.substr(0, comma);
    const std::size_t eq = token.find('=');
    if (token == "none" || token == "auto") bad(token, "cannot be part of a list of stages");
    if (eq == std::string_view::npos) bad(token, "is not STAGE=POLICY");
    const std::string_view stage_text = token.substr(0, eq), policy = token.substr(eq + 1);
    std::int32_t stage = -1;
    const auto [end, ec] = std::from_chars(stage_text.data(), stage_text.data() + stage_text.size(), stage);
    if (ec != std::errc{} || end != stage_text.data() + stage_text.size() || stage < 0) {
      bad(token, "does not start with a stage number >= 0");
    }
    const std::size_t colon = policy.find(':');
    const std::string_view kind = policy.substr(0, colon);
    std::optional<double> share;
    if (colon != std::string_view::npos) {
      share = parse_real_text(policy.substr(colon + 1), concat("flag --memory-policy ('", token, "')"), flag.position, 0.0, false);
      if (*share > 1.0) bad(token, "has a share above 1");
    }
    MemoryPolicy p;
    if (kind == "recompute" && !share) {
      p = MemoryPolicy::full_recompute();
    } else if (kind == "selective" && share) {
      p = MemoryPolicy::selective(*share);
    } else if (kind == "offload") {
      p = MemoryPolicy::offload(share.value_or(1.0));
    } else if ((kind == "layerwise" || kind == "layerwise-offload") && !share) {
      // priced from each family's cut of the model's layers (PlanMemoryPolicy::stages)
      p.kind = kind == "layerwise" ? MemoryPolicyKind::layerwise_recompute : MemoryPolicyKind::layerwise_offload;
    } else {
      bad(token, "names no policy");
    }
    if (!out.stages.emplace(stage, p).second) bad(token, concat("gives stage ", stage, " a second policy"));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

// Turns split flags (plan_flags, or a subset of them) into PlanOptions; throws
// ppsched::error for anything it cannot use.
[[nodiscard]] inline PlanOptions parse_plan_flags(const std::vector<GivenFlag>& given) {
  PlanOptions options;
  const GivenFlag* source_flag = nullptr;
  auto set_source = [&](const GivenFlag& flag, ModelSource source) {
    if (source_flag != nullptr) {
      fail({"command line", concat(source_flag->name, " and ", flag.name, " both describe the model"),
            argument_place(flag.position), "give one of --profile, --layers, --stage-cost (or none for the GPT-style default)"});
    }
    source_flag = &flag;
    options.source = source;
  };
  const GivenFlag* cap_flag = nullptr;
  for (const GivenFlag& flag : given) {
    const std::string_view n = flag.name;
    if (n == "--profile") {
      set_source(flag, ModelSource::profile);
      if (flag.value.empty()) fail({"flag --profile", "the file name is empty", argument_place(flag.position), "give a path"});
      options.profile_path = flag.value;
    } else if (n == "--layers") {
      set_source(flag, ModelSource::uniform_layers);
      options.layers = static_cast<std::int32_t>(parse_integer(flag, 1, 1'000'000));
    } else if (n == "--stage-cost") {
      set_source(flag, ModelSource::stage_cost);
      options.stage_cost = parse_cost_triple(flag);
    } else if (n == "--stages") {
      options.stages = static_cast<std::int32_t>(parse_integer(flag, 1, 1024));
      options.stages_given = true;
    } else if (n == "--microbatches") {
      options.microbatches = static_cast<std::int32_t>(parse_integer(flag, 1, 1'000'000));
      options.microbatches_given = true;
    } else if (n == "--chunks") {
      options.chunks = static_cast<std::int32_t>(parse_integer(flag, 1, 256));
      options.chunks_given = true;
    } else if (n == "--comm") {
      options.comm_latency = parse_real(flag, 0.0);
    } else if (n == "--bandwidth") {
      options.bandwidth = parse_real(flag, 0.0, true);
    } else if (n == "--memory-cap-microbatches" || n == "--memory-cap-bytes") {
      if (cap_flag != nullptr) {
        fail({"command line", concat(cap_flag->name, " and ", n, " both set the memory cap"),
              argument_place(flag.position), "give one memory cap"});
      }
      cap_flag = &flag;
      if (n == "--memory-cap-microbatches") {
        options.memory_cap_microbatches = parse_real(flag, 0.0, true);
      } else {
        options.memory_cap_bytes = static_cast<double>(parse_bytes(flag));
      }
    } else if (n == "--w-memory-ratio") {
      options.w_memory_ratio = parse_real(flag, 0.0);
    } else if (n == "--optimizer-state-factor") {
      options.optimizer_state_factor = parse_real(flag, 0.0);
    } else if (n == "--partition") {
      if (flag.value == "optimal") {
        options.partition = PartitionMethod::optimal;
      } else if (flag.value == "uniform") {
        options.partition = PartitionMethod::uniform;
      } else if (flag.value == "params") {
        options.partition = PartitionMethod::by_params;
      } else {
        fail({"flag --partition", concat("unknown method '", flag.value, "'"), argument_place(flag.position),
              "valid methods: optimal, uniform, params"});
      }
    } else if (n == "--schedule") {
      parse_schedule_list(flag, options);
    } else if (n == "--objective") {
      options.objective = parse_objective(flag);
    } else if (n == "--memory-policy") {
      const std::optional<Interconnect> link = options.memory_policy.host_link;  // --host-link may come first
      options.memory_policy = parse_memory_policy(flag);
      options.memory_policy.host_link = link;
    } else if (n == "--host-link") {
      const std::size_t comma = flag.value.find(',');
      if (comma == std::string::npos || flag.value.find(',', comma + 1) != std::string::npos) {
        fail({"flag --host-link", concat("value '", flag.value, "' is not two comma-separated numbers"),
              argument_place(flag.position),
              "write LATENCY,BANDWIDTH in the model's time unit and bytes per time unit, e.g. 0.01,25e6 for 10 us and 25 GB/s in ms"});
      }
      const std::string_view text = flag.value;
      options.memory_policy.host_link =
          Interconnect{parse_real_text(text.substr(0, comma), "flag --host-link (latency)", flag.position, 0.0, false),
                       parse_real_text(text.substr(comma + 1), "flag --host-link (bandwidth)", flag.position, 0.0, true)};
    } else if (n == "--json") {
      options.json = true;
    } else if (n == "--trace" || n == "--svg" || n == "--csv" || n == "--validate") {
      if (flag.value.empty()) {
        fail({concat("flag ", n), "the file name is empty", argument_place(flag.position), "give a path"});
      }
      (n == "--trace" ? options.trace_path : n == "--svg" ? options.svg_path : n == "--csv" ? options.csv_path
                                                                                             : options.validate_path) =
          flag.value;
    } else if (n == "--devices") {
      options.devices = static_cast<std::int32_t>(parse_integer(flag, 1, 1'000'000));
    } else if (n == "--global-batch") {
      options.global_batch = parse_integer(flag, 1, 1'000'000'000);
    } else if (n == "--all-reduce") {
      if (flag.value == "ring" || flag.value == "tree") {
        options.all_reduce = flag.value == "ring" ? AllReduceAlgorithm::ring : AllReduceAlgorithm::tree;
      } else {
        fail({"flag --all-reduce", concat("unknown algorithm '", flag.value, "'"), argument_place(flag.position),
              "valid algorithms: ring, tree"});
      }
    } else if (n == "--all-reduce-bandwidth") {
      options.all_reduce_bandwidth = parse_real(flag, 0.0, true);
    } else if (n == "--calibrate") {
      for (std::string& path : comma_items(flag)) {
        if (path.empty()) fail({"flag --calibrate", "a file name is empty", argument_place(flag.position), "give a path"});
        options.calibrate_paths.push_back(std::move(path));
      }
    } else if (n == "--calibrate-rows") {
      for (const std::string& rows : comma_items(flag)) {
        options.calibrate_rows.push_back(parse_real_text(rows, "flag --calibrate-rows", flag.position, 0.0, true));
      }
    } else if (n == "--lengths") {
      if (flag.value.empty()) fail({"flag --lengths", "the file name is empty", argument_place(flag.position), "give a path"});
      options.lengths_path = flag.value;
    } else if (n == "--profile-lengths") {
      for (const std::string& item : comma_items(flag)) {
        GivenFlag one = flag;
        one.value = item;
        options.profile_lengths.push_back(parse_integer(one, 1, 1'000'000'000));
      }
    } else if (n == "--token-budget") {
      options.token_budget = parse_integer(flag, 1, 1'000'000'000'000);
    } else if (n == "--split") {
      if (flag.value != "balanced" && flag.value != "packed" && flag.value != "bucketed" && flag.value != "padded" &&
          flag.value != "all") {
        fail({"flag --split", concat("unknown method '", flag.value, "'"), argument_place(flag.position),
              "valid methods: balanced, packed, bucketed, padded, all"});
      }
      options.split = flag.value;
    } else if (n == "--help") {
      options.help = true;
    } else if (n == "--version") {
      options.version = true;
    }
  }
  // Combinations that would otherwise be ignored.
  const auto find = [&](std::string_view name) -> const GivenFlag* {
    const auto it = std::find_if(given.begin(), given.end(), [&](const GivenFlag& f) { return f.name == name; });
    return it == given.end() ? nullptr : &*it;
  };
  // --lengths plans with its own model (the fit from the profiles: one layer per stage) and its
  // own search, so every other planning flag would be silently ignored: each is refused by name.
  if (const GivenFlag* l = find("--lengths")) {
    for (const GivenFlag& f : given) {
      const std::string_view n = f.name;
      if (n == "--lengths" || n == "--profile" || n == "--profile-lengths" || n == "--token-budget" || n == "--split" ||
          n == "--json" || n == "--help" || n == "--version") {
        continue;
      }
      fail({concat("flag ", n), concat("does not apply to --lengths (given at ", argument_place(l->position), ")"),
            argument_place(f.position),
            concat("drop ", n, "; --lengths takes --profile, --profile-lengths, --token-budget, --split and --json")});
    }
    if (options.source != ModelSource::profile) {
      fail({"flag --lengths", "needs profiles measured at several micro-batch sizes to fit the costs from",
            argument_place(l->position),
            "add --profile A.json,B.json --profile-lengths LA,LB (each measured at two sizes or more, see docs/cli.md)"});
    }
    if (options.profile_lengths.empty()) {
      fail({"flag --lengths", "needs the sequence length each --profile file was measured at", argument_place(l->position),
            "add --profile-lengths LA,LB, one per --profile file"});
    }
  } else {
    for (const char* name : {"--profile-lengths", "--token-budget", "--split"}) {
      if (const GivenFlag* f = find(name)) {
        fail({concat("flag ", name), "applies to --lengths only", argument_place(f->position), "add --lengths FILE, or drop it"});
      }
    }
  }
  if (const GivenFlag* f = find("--bandwidth"); f != nullptr && options.source == ModelSource::stage_cost) {
    fail({"flag --bandwidth", "--stage-cost has no tensor sizes for a bandwidth to apply to",
          argument_place(f->position), "use --comm for the per-transfer time, or --profile for tensor sizes"});
  }
  for (const char* name : {"--partition", "--optimizer-state-factor"}) {
    if (const GivenFlag* f = find(name); f != nullptr && options.source == ModelSource::stage_cost) {
      fail({concat("flag ", name), "--stage-cost has no layers or parameters", argument_place(f->position),
            "use --layers or --profile to partition a model"});
    }
  }
  if (const GivenFlag* f = find("--memory-cap-bytes"); f != nullptr && options.source == ModelSource::stage_cost) {
    fail({"flag --memory-cap-bytes", "--stage-cost has no byte sizes to compare with a byte cap",
          argument_place(f->position), "use --memory-cap-microbatches, or --profile for byte sizes"});
  }
  if (const GivenFlag* f = find("--validate"); f != nullptr) {
    if (const GivenFlag* s = find("--schedule")) {
      fail({"flag --schedule", "--validate checks the schedule in its file; there is nothing to choose",
            argument_place(s->position), "drop --schedule, or drop --validate"});
    }
    if (const GivenFlag* c = find("--csv")) {
      fail({"flag --csv", "--validate reads a CSV; writing one in the same run is ambiguous",
            argument_place(c->position), "drop --csv"});
    }
    if (const GivenFlag* c = find("--chunks")) {
      fail({"flag --chunks", "--validate takes its stages from the file", argument_place(c->position),
            "drop --chunks"});
    }
    if (const GivenFlag* o = find("--objective")) {
      fail({"flag --objective", "--validate checks the schedule in its file; there is nothing to choose",
            argument_place(o->position), "drop --objective, or drop --validate"});
    }
  }
  if (const GivenFlag* f = find("--host-link"); f != nullptr && options.memory_policy.mode == MemoryPolicyMode::none) {
    fail({"flag --host-link", "prices offload copies, and --memory-policy is none", argument_place(f->position),
          "add --memory-policy auto (or per stage), or drop --host-link"});
  }
  if (const GivenFlag* f = find("--memory-policy"); f != nullptr && options.memory_policy.mode != MemoryPolicyMode::none) {
    const auto refuse = [&](std::string_view problem, std::string_view fix) {
      fail({"flag --memory-policy", std::string(problem), argument_place(f->position), std::string(fix)});
    };
    if (options.source == ModelSource::stage_cost) {
      refuse("--stage-cost has no activation bytes to recompute or offload", "use --layers or --profile (or the default model)");
    }
    if (options.schedule_auto && options.memory_policy.mode == MemoryPolicyMode::given) {
      refuse("per-stage policies name the stages of one schedule, and the search's candidates (--schedule auto) differ in their stages",
             "use --memory-policy auto with --schedule auto, or name families with --schedule");
    }
    if (options.schedule_auto && options.objective.kind != ObjectiveKind::makespan) {
      refuse("the search (--schedule auto) chooses memory policies for the makespan", "drop --objective, or drop --schedule auto");
    }
    if (!options.validate_path.empty()) refuse("does not apply to --validate", "drop --memory-policy, or drop --validate");
    if (options.devices != 0) refuse("does not apply to a --devices plan", "drop --memory-policy, or drop --devices");
    if (options.memory_policy.mode == MemoryPolicyMode::automatic && !options.memory_cap_bytes) {
      refuse("'auto' chooses policies under a byte cap, and none is given", "add --memory-cap-bytes, e.g. 21GiB");
    }
  }
  if (const GivenFlag* f = find("--calibrate-rows"); f != nullptr && options.calibrate_paths.empty()) {
    fail({"flag --calibrate-rows", "applies to --calibrate only", argument_place(f->position),
          "add --calibrate FILE, or drop it"});
  }
  if (const GivenFlag* f = find("--calibrate-rows");
      f != nullptr && options.calibrate_rows.size() != 1 && options.calibrate_rows.size() != options.calibrate_paths.size()) {
    fail({"flag --calibrate-rows", concat("gives ", options.calibrate_rows.size(), " sizes for ", options.calibrate_paths.size(),
                                          " timelines"),
          argument_place(f->position), "give one size for all the timelines, or one per timeline, in their order"});
  }
  if (const GivenFlag* f = find("--calibrate"); f != nullptr && options.source != ModelSource::profile) {
    fail({"flag --calibrate", "calibrates a profile", argument_place(f->position), "add --profile FILE"});
  }
  if (const GivenFlag* f = find("--calibrate"); f != nullptr && options.json) {
    fail({"flag --calibrate", "prints a report, not JSON", argument_place(f->position), "drop --json"});
  }
  // Data parallelism: its flags need --devices, and --devices plans whole steps over a layer model.
  if (options.devices == 0) {
    for (const char* name : {"--global-batch", "--all-reduce", "--all-reduce-bandwidth", "--calibrate"}) {
      if (const GivenFlag* f = find(name)) {
        fail({concat("flag ", name), "applies to data x pipeline plans only", argument_place(f->position),
              "add --devices N, or drop it"});
      }
    }
  } else {
    const GivenFlag* d = find("--devices");
    if (options.source == ModelSource::stage_cost) {
      fail({"flag --devices", "--stage-cost has no layers or parameters to split and all-reduce",
            argument_place(d->position), "use --layers or --profile (or the default model)"});
    }
    for (const char* name : {"--validate", "--trace", "--svg", "--csv", "--memory-cap-microbatches"}) {
      if (const GivenFlag* f = find(name)) {
        fail({concat("flag ", name), "does not apply to a --devices plan", argument_place(f->position),
              concat("drop ", name, "; plan the chosen pipeline again without --devices for its files"
                                    " (and use --memory-cap-bytes for the cap per device)")});
      }
    }
    if (options.schedule_auto) {
      fail({"flag --schedule", "'auto' is not available with --devices", argument_place(find("--schedule")->position),
            "name families with --schedule, or give none to compare them all"});
    }
    if (options.stages_given && options.devices % options.stages != 0) {
      fail({"flag --stages", concat("a pipeline of ", options.stages, " stages does not divide ", options.devices, " devices"),
            argument_place(find("--stages")->position),
            "give --stages a divisor of --devices, or drop it to try every divisor"});
    }
  }
  // Two outputs into one file would leave only the last.
  const std::array<std::pair<std::string_view, const std::string*>, 3> outputs{
      {{"--trace", &options.trace_path}, {"--svg", &options.svg_path}, {"--csv", &options.csv_path}}};
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      if (!outputs[i].second->empty() && *outputs[i].second == *outputs[j].second) {
        const GivenFlag* f = find(outputs[j].first);
        fail({concat("flag ", outputs[j].first), concat("writes to '", *outputs[j].second, "', as ", outputs[i].first, " does"),
              argument_place(f->position), "give each output its own file"});
      }
    }
  }
  return options;
}

// Turns argv into PlanOptions; throws ppsched::error for anything it cannot use.
[[nodiscard]] inline PlanOptions parse_plan_options(std::span<const char* const> argv) {
  return parse_plan_flags(split_flags(argv, plan_flags));
}

}  // namespace ppsched::cli
