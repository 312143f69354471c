// The planner (ppsched::plan): a profile cut for each family's placement, every family proven,
// simulated and measured against the memory caps, one recommended; memory policies
// (recomputation, offload) placed into a schedule or chosen under a cap; N devices split into
// data x pipeline parallelism.
#include "common.hpp"
#include "plan_options.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/plan/plan.hpp"

namespace ppsched_py {
namespace {

namespace pp = ppsched;
namespace pl = ppsched::plan;
using pp::detail::concat;

pl::PartitionMethod method_of(const std::string& name) {
  if (name == "optimal") return pl::PartitionMethod::optimal;
  if (name == "uniform") return pl::PartitionMethod::uniform;
  if (name == "by-params" || name == "by_params") return pl::PartitionMethod::by_params;
  pp::detail::fail({"plan", concat("unknown partition method '", name, "'"), "method", "use 'optimal', 'uniform' or 'by-params'"});
}

// "none", "auto", or {stage: MemoryPolicy} (the same policies for every family's stages).
pl::PlanMemoryPolicy memory_policy_of(const py::object& policy, std::optional<pp::Interconnect> host_link) {
  pl::PlanMemoryPolicy p;
  p.host_link = host_link;
  if (policy.is_none()) return p;
  if (py::isinstance<py::str>(policy)) {
    const auto name = policy.cast<std::string>();
    if (name == "none") return p;
    if (name == "auto" || name == "automatic") {
      p.mode = pl::MemoryPolicyMode::automatic;
      return p;
    }
    pp::detail::fail({"plan", concat("unknown memory policy '", name, "'"), "memory_policy",
              "use 'none', 'auto', or a dict {stage: MemoryPolicy}"});
  }
  if (!py::isinstance<py::dict>(policy))
    throw py::type_error("plan: memory_policy must be 'none', 'auto' or a dict {stage: MemoryPolicy}");
  p.mode = pl::MemoryPolicyMode::given;
  p.stages = policy.cast<std::map<std::int32_t, pl::MemoryPolicy>>();
  return p;
}

// Python's "no cap" is None; the library's is infinity.
double cap_or_none(std::optional<double> cap) { return cap.value_or(std::numeric_limits<double>::infinity()); }
std::optional<double> none_or_cap(double cap) {
  if (std::isinf(cap)) return std::nullopt;
  return cap;
}

std::string schedule_result_repr(const pl::ScheduleResult& r) {
  return concat("ScheduleResult(name='", r.name, "', makespan=", float_repr(r.makespan),
                ", bubble_fraction=", float_repr(r.bubble_fraction), ", fits=", r.fits ? "True" : "False",
                ", valid=", r.valid ? "True" : "False", ")");
}

}  // namespace

void bind_plan(py::module_& m) {
  // ------------------------------------------------------------------ memory policies
  py::class_<pl::MemoryPolicy>(m, "MemoryPolicy",
                               "What one stage does about its activation memory: keep it (none), recompute all or\n"
                               "part of it before the backward, or offload it to host memory and reload it.")
      .def(py::init([](const std::string& kind, double fraction, std::optional<double> saved_bytes,
                       std::optional<double> recompute_time, std::optional<double> peak_bytes) {
             pl::MemoryPolicy p;
             bool known = false;
             for (const pl::MemoryPolicyKind k :
                  {pl::MemoryPolicyKind::none, pl::MemoryPolicyKind::full_recompute, pl::MemoryPolicyKind::selective_recompute,
                   pl::MemoryPolicyKind::offload, pl::MemoryPolicyKind::layerwise_recompute,
                   pl::MemoryPolicyKind::layerwise_offload}) {
               std::string spelled(pl::memory_policy_kind_name(k));
               for (char& c : spelled)
                 if (c == ' ' || c == '-') c = '_';
               if (kind == spelled || kind == pl::memory_policy_kind_name(k)) {
                 p.kind = k;
                 known = true;
               }
             }
             if (kind == "layerwise_recompute") p.kind = pl::MemoryPolicyKind::layerwise_recompute, known = true;
             if (kind == "layerwise_offload") p.kind = pl::MemoryPolicyKind::layerwise_offload, known = true;
             if (!known)
               pp::detail::fail({"MemoryPolicy", concat("unknown kind '", kind, "'"), "kind",
                         "use 'none', 'full_recompute', 'selective_recompute', 'offload', 'layerwise_recompute' or "
                         "'layerwise_offload'"});
             p.fraction = fraction;
             p.saved_bytes = saved_bytes;
             p.recompute_time = recompute_time;
             p.peak_bytes = peak_bytes;
             return p;
           }),
           py::arg("kind") = "none", py::kw_only(), py::arg("fraction") = 1.0, py::arg("saved_bytes") = py::none(),
           py::arg("recompute_time") = py::none(), py::arg("peak_bytes") = py::none())
      .def_static("none", &pl::MemoryPolicy::none)
      .def_static("full_recompute", &pl::MemoryPolicy::full_recompute)
      .def_static("selective", &pl::MemoryPolicy::selective, py::arg("fraction"))
      .def_static("offload", &pl::MemoryPolicy::offload, py::arg("fraction") = 1.0)
      .def_property_readonly("kind", [](const pl::MemoryPolicy& p) { return std::string(pl::memory_policy_kind_name(p.kind)); })
      .def_readonly("fraction", &pl::MemoryPolicy::fraction)
      .def_readonly("saved_bytes", &pl::MemoryPolicy::saved_bytes)
      .def_readonly("recompute_time", &pl::MemoryPolicy::recompute_time)
      .def_readonly("peak_bytes", &pl::MemoryPolicy::peak_bytes)
      .def("__eq__", [](const pl::MemoryPolicy& a, const pl::MemoryPolicy& b) { return a == b; }, py::is_operator())
      .def("__str__", [](const pl::MemoryPolicy& p) { return pl::to_string(p); })
      .def("__repr__", [](const pl::MemoryPolicy& p) { return concat("MemoryPolicy('", pl::to_string(p), "')"); });

  py::class_<pl::MemoryPlan>(m, "MemoryPlan", "A schedule with its memory actions, and the costs that price them.")
      .def_readonly("schedule", &pl::MemoryPlan::schedule)
      .def_readonly("costs", &pl::MemoryPlan::costs)
      .def_readonly("policies", &pl::MemoryPlan::policies)
      .def("__repr__", [](const pl::MemoryPlan& p) {
        return concat("MemoryPlan(schedule='", p.schedule.name, "', policies=", p.policies.size(), ")");
      });

  m.def(
      "apply_memory_policies",
      [](const pp::Schedule& s, const pp::CostModel& costs, const std::vector<pl::MemoryPolicy>& policies) {
        py::gil_scoped_release release;
        return pl::apply_memory_policies(s, costs, std::span<const pl::MemoryPolicy>(policies));
      },
      py::arg("schedule"), py::arg("costs"), py::arg("policies"),
      "Inserts each stage's memory actions (R, OFFLOAD, RELOAD) into a compute-only schedule; `policies` has\n"
      "one MemoryPolicy per stage. Returns the schedule with the costs that price them.");

  // ------------------------------------------------------------------ the planner's results
  // A planner's cut is a Partition (bind_partition binds it, before this): what PartitionPlan
  // offered on top stays, and the name stays an alias of the one class.
  py::reinterpret_borrow<py::class_<pp::Partition>>(m.attr("Partition"))
      .def_property_readonly("bottleneck_time", [](const pp::Partition& p) { return p.bottleneck; },
                             "bottleneck, by the name PartitionPlan gave it")
      .def("cost_model", [](const pp::Partition& p) { return pl::cost_model_of(p); },
           "The simulator's CostModel of this cut (default options).")
      .def("cut_text", &pl::cut_text, "One line per stage with its rank, as the planner lists a cut.");
  m.attr("PartitionPlan") = m.attr("Partition");

  py::class_<pl::ScheduleResult>(m, "ScheduleResult", "One schedule of a plan: proven, simulated, measured against the caps.")
      .def_readonly("name", &pl::ScheduleResult::name)
      .def_property_readonly("family",
                             [](const pl::ScheduleResult& r) -> std::optional<std::string> {
                               if (r.family == nullptr) return std::nullopt;
                               return std::string(r.family->name);
                             })
      .def_readonly("chunks", &pl::ScheduleResult::chunks)
      .def_readonly("virtual_stages", &pl::ScheduleResult::virtual_stages)
      .def_readonly("training", &pl::ScheduleResult::training)
      .def_readonly("valid", &pl::ScheduleResult::valid)
      .def_readonly("problems", &pl::ScheduleResult::problems)
      .def_readonly("makespan", &pl::ScheduleResult::makespan)
      .def_readonly("max_rank_span", &pl::ScheduleResult::max_rank_span)
      .def_readonly("bubble_fraction", &pl::ScheduleResult::bubble_fraction)
      .def_readonly("ideal_time", &pl::ScheduleResult::ideal_time)
      .def_readonly("busy", &pl::ScheduleResult::busy)
      .def_readonly("span", &pl::ScheduleResult::span)
      .def_readonly("peak_activations", &pl::ScheduleResult::peak_activations)
      .def_readonly("static_bytes", &pl::ScheduleResult::static_bytes)
      .def_readonly("peak_activation_bytes", &pl::ScheduleResult::peak_activation_bytes)
      .def_readonly("peak_memory_bytes", &pl::ScheduleResult::peak_memory_bytes)
      .def_readonly("throughput", &pl::ScheduleResult::throughput)
      .def_readonly("analytic_idle_per_rank", &pl::ScheduleResult::analytic_idle_per_rank)
      .def_readonly("analytic_formula", &pl::ScheduleResult::analytic_formula)
      .def_readonly("fits", &pl::ScheduleResult::fits)
      .def_readonly("fit_problem", &pl::ScheduleResult::fit_problem)
      .def_readonly("schedule", &pl::ScheduleResult::schedule)
      .def_readonly("timeline", &pl::ScheduleResult::timeline)
      .def_readonly("partition", &pl::ScheduleResult::partition,
                    "the cut it was priced on: stage s holds layers partition.boundaries[s]:boundaries[s+1]\n"
                    "and runs on rank partition.stages[s].rank (schedule.placement[s]); one PipelineStage each")
      .def_property_readonly(
          "memory_policies",
          [](const pl::ScheduleResult& r) -> std::optional<std::vector<pl::MemoryPolicy>> {
            if (!r.memory) return std::nullopt;
            std::vector<pl::MemoryPolicy> out;
            for (const pl::StageMemoryCost& s : r.memory->stages) out.push_back(s.policy);
            return out;
          },
          "per stage, when the schedule was priced with memory policies; None otherwise")
      .def("__str__", [](const pl::ScheduleResult& r) { return pl::to_string(r); })
      .def("__repr__", &schedule_result_repr);

  py::class_<pl::SkippedSchedule>(m, "SkippedSchedule", "A family the plan left out, and why.")
      .def_readonly("name", &pl::SkippedSchedule::name)
      .def_readonly("reason", &pl::SkippedSchedule::reason)
      .def_readonly("cannot_cut", &pl::SkippedSchedule::cannot_cut)
      .def_readonly("chunks", &pl::SkippedSchedule::chunks)
      .def("__repr__", [](const pl::SkippedSchedule& s) {
        return concat("SkippedSchedule(name='", s.name, "', reason=", py::repr(py::str(s.reason)).cast<std::string>(), ")");
      });

  py::class_<pl::PlanResult>(m, "PlanResult",
                             "Every family compared on one model and pipeline; `recommended` is the best that fits\n"
                             "(None when nothing does; `reason` says why).")
      .def_readonly("model", &pl::PlanResult::model)
      .def_readonly("unit", &pl::PlanResult::unit)
      .def_readonly("ranks", &pl::PlanResult::ranks)
      .def_readonly("microbatches", &pl::PlanResult::microbatches)
      .def_readonly("chunks", &pl::PlanResult::chunks)
      .def_readonly("partition", &pl::PlanResult::partition,
                    "the one-stage-per-rank cut; each schedule's own cut is ScheduleResult.partition")
      .def_readonly("schedules", &pl::PlanResult::schedules)
      .def_readonly("skipped", &pl::PlanResult::skipped)
      .def_property_readonly("rank_memory_cap", [](const pl::PlanResult& p) { return p.device_cap.rank_total_bytes; },
                             "bytes per rank from the profile's devices (PlanModel::device_cap); empty: no cap")
      .def_property_readonly(
          "recommended",
          [](const pl::PlanResult& p) -> std::optional<pl::ScheduleResult> {
            if (const pl::ScheduleResult* r = p.recommended_schedule()) return *r;
            return std::nullopt;
          })
      .def_property_readonly("reason", [](const pl::PlanResult& p) { return p.recommended.reason; })
      .def("__str__", [](const pl::PlanResult& p) { return pl::to_string(p); })
      .def("__repr__", [](const pl::PlanResult& p) {
        const pl::ScheduleResult* r = p.recommended_schedule();
        return concat("PlanResult(model=", py::repr(py::str(p.model)).cast<std::string>(), ", ranks=", p.ranks,
                      ", microbatches=", p.microbatches, ", schedules=", p.schedules.size(),
                      ", recommended=", r != nullptr ? concat("'", r->name, "'") : std::string("None"), ")");
      });

  m.def(
      "plan",
      [](const pp::Profile& profile, std::int32_t ranks, std::int32_t microbatches, std::int32_t chunks,
         std::vector<std::string> families, std::optional<double> memory_cap, std::optional<double> memory_cap_microbatches,
         const py::object& memory_policy, std::optional<pp::Interconnect> host_link, const std::string& objective,
         double makespan_bound, double optimizer_state_factor, double weight_memory_fraction, const std::string& method,
         std::string description) {
        pl::GraphModelOptions model_options;
        model_options.ranks = ranks;
        model_options.microbatches = microbatches;
        model_options.optimizer_state_factor = optimizer_state_factor;
        model_options.method = method_of(method);
        pl::PlanRequest request;
        request.ranks = ranks;
        request.microbatches = microbatches;
        request.chunks = chunks;
        request.families = std::move(families);
        request.weight_memory_fraction = weight_memory_fraction;
        request.cap.total_bytes = cap_or_none(memory_cap);
        request.cap.microbatches = cap_or_none(memory_cap_microbatches);
        request.objective = objective_of(objective, makespan_bound);
        request.memory_policy = memory_policy_of(memory_policy, host_link);
        if (description.empty()) description = concat(profile.graph.size(), " layers");
        py::gil_scoped_release release;
        const pl::PlanModel model = pl::graph_model(profile, std::move(description), model_options);
        return pl::compare_families(model, request);
      },
      py::arg("profile"), py::kw_only(), py::arg("ranks"), py::arg("microbatches"), py::arg("chunks") = 2,
      py::arg("families") = std::vector<std::string>{}, py::arg("memory_cap") = py::none(),
      py::arg("memory_cap_microbatches") = py::none(), py::arg("memory_policy") = "none",
      py::arg("host_link") = py::none(), py::arg("objective") = "makespan",
      py::arg("makespan_bound") = std::numeric_limits<double>::infinity(),
      py::arg("optimizer_state_factor") = pp::default_optimizer_state_factor, py::arg("weight_memory_fraction") = 0.5,
      py::arg("method") = "optimal", py::arg("description") = "",
      "Plans a pipeline of `ranks` ranks and `microbatches` micro-batches for the profile: cuts the model\n"
      "for each family's placement, proves, simulates and prices each family, and recommends the best that\n"
      "fits. families: names to compare (empty: all that accept the request). memory_cap: bytes per rank\n"
      "(parameters with optimizer state plus activations); the profile's device caps apply too.\n"
      "memory_cap_microbatches: peak activations per rank in M_B. memory_policy: 'none', 'auto' (a family\n"
      "over the byte cap is priced again with recomputation/offload chosen for it), or {stage: MemoryPolicy}.\n"
      "host_link: device-host link for offload (None: PCIe 4). objective: 'makespan', 'span' or 'memory'\n"
      "(the smallest peak within makespan_bound).");

  // ------------------------------------------------------------------ the planner's search
  py::class_<pl::SearchedPlan>(m, "SearchedPlan",
                               "A plan made by the schedule search: `plan` holds the winner alone (its recommended),\n"
                               "or nothing when no candidate keeps to the caps (plan.reason says what the least hungry\n"
                               "one needed); `candidates` are every schedule the search considered, `why` the winner's\n"
                               "one line.")
      .def_readonly("plan", &pl::SearchedPlan::plan)
      .def_property_readonly("candidates", [](const pl::SearchedPlan& p) { return p.search.candidates; })
      .def_property_readonly("why", [](const pl::SearchedPlan& p) { return p.search.why; })
      .def_property_readonly(
          "recommended",
          [](const pl::SearchedPlan& p) -> std::optional<pl::ScheduleResult> {
            if (const pl::ScheduleResult* r = p.plan.recommended_schedule()) return *r;
            return std::nullopt;
          },
          "the winner, evaluated as plan() evaluates a family; None when nothing fits")
      .def("__str__", [](const pl::SearchedPlan& p) { return pl::to_string(p.plan); })
      .def("__repr__", [](const pl::SearchedPlan& p) {
        const pl::ScheduleResult* r = p.plan.recommended_schedule();
        return concat("SearchedPlan(recommended=", r != nullptr ? py::repr(py::str(r->name)).cast<std::string>() : "None",
                      r != nullptr ? concat(", makespan=", float_repr(r->makespan)) : std::string(),
                      ", candidates=", p.search.candidates.size(), ")");
      });

  m.def(
      "search_plan",
      [](const pp::Profile& profile, std::int32_t ranks, std::int32_t microbatches, std::int32_t chunks,
         std::optional<double> memory_cap, std::optional<double> memory_cap_microbatches, const py::object& memory_policy,
         std::optional<pp::Interconnect> host_link, const std::string& objective, double makespan_bound,
         double optimizer_state_factor, double weight_memory_fraction, const std::string& method, std::string description,
         std::optional<bool> fixed_families, std::optional<bool> greedy, std::optional<bool> dualpipev,
         std::optional<bool> v_blocks, std::optional<bool> split_backward, std::optional<double> fb_overlap,
         std::optional<std::int32_t> max_simulations, std::optional<bool> comm_on_compute_stream) {
        pl::GraphModelOptions model_options;
        model_options.ranks = ranks;
        model_options.microbatches = microbatches;
        model_options.optimizer_state_factor = optimizer_state_factor;
        model_options.method = method_of(method);
        pl::PlanRequest request;
        request.ranks = ranks;
        request.microbatches = microbatches;
        request.chunks = chunks;
        request.weight_memory_fraction = weight_memory_fraction;
        request.cap.total_bytes = cap_or_none(memory_cap);
        request.cap.microbatches = cap_or_none(memory_cap_microbatches);
        request.objective = objective_of(objective, makespan_bound);
        request.memory_policy = memory_policy_of(memory_policy, host_link);
        // search_plan sets the depths (1, 2, 4 and `chunks`) and the objective from the request.
        const pl::SearchOptions options =
            SearchKnobs{std::nullopt, fixed_families, greedy, dualpipev, v_blocks, split_backward,
                        comm_on_compute_stream, fb_overlap, max_simulations}
                .applied_to({});
        if (description.empty()) description = concat(profile.graph.size(), " layers");
        py::gil_scoped_release release;
        const pl::PlanModel model = pl::graph_model(profile, std::move(description), model_options);
        return pl::search_plan(model, request, options);
      },
      py::arg("profile"), py::kw_only(), py::arg("ranks"), py::arg("microbatches"), py::arg("chunks") = 2,
      py::arg("memory_cap") = py::none(), py::arg("memory_cap_microbatches") = py::none(),
      py::arg("memory_policy") = "none", py::arg("host_link") = py::none(), py::arg("objective") = "makespan",
      py::arg("makespan_bound") = std::numeric_limits<double>::infinity(),
      py::arg("optimizer_state_factor") = pp::default_optimizer_state_factor, py::arg("weight_memory_fraction") = 0.5,
      py::arg("method") = "optimal", py::arg("description") = "", py::arg("fixed_families") = py::none(),
      py::arg("greedy") = py::none(), py::arg("dualpipev") = py::none(), py::arg("v_blocks") = py::none(),
      py::arg("split_backward") = py::none(), py::arg("fb_overlap") = py::none(), py::arg("max_simulations") = py::none(),
      py::arg("comm_on_compute_stream") = py::none(),
      "plan() with the schedule search instead of the fixed families: the model is cut for every\n"
      "placement the search tries (depths 1, 2, 4 and `chunks`), and the fastest schedule that keeps to\n"
      "the caps wins, evaluated as plan() evaluates a family. The keywords shared with plan() mean the\n"
      "same; the search's knobs keep the C++ defaults when None (see search_schedule).");

  // ------------------------------------------------------------------ N devices
  py::class_<pl::DeviceSplit>(m, "DeviceSplit", "One way to run the step on the devices: p x d, m, the family, the cut.")
      .def_readonly("pipeline", &pl::DeviceSplit::pipeline)
      .def_readonly("replicas", &pl::DeviceSplit::replicas)
      .def_readonly("microbatches", &pl::DeviceSplit::microbatches)
      .def_readonly("microbatch_size", &pl::DeviceSplit::microbatch_size)
      .def_property_readonly("family",
                             [](const pl::DeviceSplit& s) -> std::optional<std::string> {
                               if (s.family == nullptr) return std::nullopt;
                               return std::string(s.family->name);
                             })
      .def_readonly("chunks", &pl::DeviceSplit::chunks)
      .def_readonly("schedule", &pl::DeviceSplit::schedule)
      .def_readonly("partition", &pl::DeviceSplit::partition)
      .def_readonly("pipeline_time", &pl::DeviceSplit::pipeline_time)
      .def_readonly("bubble_fraction", &pl::DeviceSplit::bubble_fraction)
      .def_readonly("all_reduce_longest", &pl::DeviceSplit::all_reduce_longest)
      .def_readonly("all_reduce_exposed", &pl::DeviceSplit::all_reduce_exposed)
      .def_readonly("step_time", &pl::DeviceSplit::step_time)
      .def_readonly("peak_memory_bytes", &pl::DeviceSplit::peak_memory_bytes)
      .def_readonly("fits", &pl::DeviceSplit::fits)
      .def_readonly("fit_problem", &pl::DeviceSplit::fit_problem)
      .def("__str__", [](const pl::DeviceSplit& s) { return pl::to_string(s); })
      .def("__repr__", [](const pl::DeviceSplit& s) {
        return concat("DeviceSplit(pipeline=", s.pipeline, ", replicas=", s.replicas, ", microbatches=", s.microbatches,
                      ", family='", s.family != nullptr ? s.family->name : "?", "', step_time=", float_repr(s.step_time),
                      ")");
      });

  py::class_<pl::DevicePlan>(m, "DevicePlan", "N devices split into data x pipeline parallelism: the chosen split and runners-up.")
      .def_readonly("model", &pl::DevicePlan::model)
      .def_readonly("unit", &pl::DevicePlan::unit)
      .def_readonly("devices", &pl::DevicePlan::devices)
      .def_readonly("global_batch", &pl::DevicePlan::global_batch)
      .def_property_readonly("memory_cap_bytes", [](const pl::DevicePlan& p) { return none_or_cap(p.cap.total_bytes); })
      .def_readonly("chosen", &pl::DevicePlan::chosen)
      .def_readonly("alternatives", &pl::DevicePlan::alternatives)
      .def_readonly("per_pipeline", &pl::DevicePlan::per_pipeline)
      .def_readonly("reason", &pl::DevicePlan::reason)
      .def_readonly("evaluated", &pl::DevicePlan::evaluated)
      .def("__str__", [](const pl::DevicePlan& p) { return pl::to_string(p); })
      .def("__repr__", [](const pl::DevicePlan& p) {
        return concat("DevicePlan(devices=", p.devices, ", global_batch=", p.global_batch,
                      ", chosen=", p.chosen ? concat("p=", p.chosen->pipeline, " d=", p.chosen->replicas) : "None", ")");
      });

  m.def(
      "plan_devices",
      [](const pp::Profile& profile, std::int32_t devices, std::int64_t global_batch, std::optional<double> memory_cap,
         std::vector<std::string> families, std::int32_t chunks, std::vector<std::int32_t> pipeline_sizes,
         std::vector<std::int32_t> microbatch_counts, std::int32_t max_microbatches, double profile_microbatch_size,
         double optimizer_state_factor, double weight_memory_fraction, const std::string& method,
         std::optional<pp::Interconnect> all_reduce_link, std::size_t alternatives, std::string description) {
        pl::DevicePlanOptions o;
        o.description = std::move(description);
        o.families = std::move(families);
        o.chunks = chunks;
        o.pipeline_sizes = std::move(pipeline_sizes);
        o.microbatch_counts = std::move(microbatch_counts);
        o.max_microbatches = max_microbatches;
        o.profile_microbatch_size = profile_microbatch_size;
        o.optimizer_state_factor = optimizer_state_factor;
        o.weight_memory_fraction = weight_memory_fraction;
        o.method = method_of(method);
        o.all_reduce_link = all_reduce_link;
        o.alternatives = alternatives;
        py::gil_scoped_release release;
        return pl::plan_devices(profile, devices, global_batch, pl::MemoryCap{.total_bytes = cap_or_none(memory_cap)}, o);
      },
      py::arg("profile"), py::kw_only(), py::arg("devices"), py::arg("global_batch"), py::arg("memory_cap") = py::none(),
      py::arg("families") = std::vector<std::string>{}, py::arg("chunks") = 2,
      py::arg("pipeline_sizes") = std::vector<std::int32_t>{}, py::arg("microbatch_counts") = std::vector<std::int32_t>{},
      py::arg("max_microbatches") = 64, py::arg("profile_microbatch_size") = 1.0,
      py::arg("optimizer_state_factor") = pp::default_optimizer_state_factor, py::arg("weight_memory_fraction") = 0.5,
      py::arg("method") = "optimal", py::arg("all_reduce_link") = py::none(), py::arg("alternatives") = 5,
      py::arg("description") = "",
      "Plans `devices` devices for `global_batch` samples per step: every pipeline size p dividing the\n"
      "devices (d = devices / p replicas), every micro-batch count, every family; the fastest split that\n"
      "fits memory_cap bytes per device wins. Raises ppsched.Error when nothing can be tried as asked; a\n"
      "cap nothing fits is a result (chosen is None, reason says the smallest need).");
}

}  // namespace ppsched_py
