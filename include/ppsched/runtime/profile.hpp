// Profiling stage functions: the measured profile the partitioner and the planner read, made
// by the library on the machine that will run the model instead of written by hand.
//
// `profile_stages` times each stage's forward, input-gradient and weight-gradient callables
// (and the full backward and the optimizer step where the stage has them) at several
// micro-batch sizes, with warm-up runs first and the spread of the repetitions kept; `measure_backend_overheads` measures the
// runtime's own fixed cost per compute action and per transfer by running small schedules of
// empty stages through the executor and fitting the simulator's one cost model to their step
// times; `measured_profile` writes both as a Profile (graph/profile.hpp), one layer per stage
// function with a point per size, which profile_to_json saves for `ppsched-plan --profile`.
//
// The callables run on the calling thread, one at a time, as the CPU backend's compute stream
// runs them; a stage's time alone is what the cost model calls its time, and what the runtime
// adds around it is the overhead measured separately.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/rows.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/runtime/time_spread.hpp"
#include "ppsched/runtime/world.hpp"
#include "ppsched/schedule/fill_drain.hpp"
#include "ppsched/schedule/one_f_one_b.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/runtime/detail/profile.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace profiling {

// One stage function at one micro-batch size.
struct StageTiming {
  std::int32_t rows = 0;
  TimeSpread forward;
  TimeSpread backward_input;   // zeros for a stage with a full backward only
  TimeSpread backward_weight;
  std::optional<TimeSpread> backward;  // the full backward, when the stage has one
  // The stage's optimizer_step, when it has one: what the executor runs once per step after
  // the rank's last action (Layer::optimizer_step in measured_profile). It is given a zero
  // gradient of the stage's size: plain SGD then leaves the weights as they were, an
  // optimizer with state (momentum, Adam) does not, so give such a model's profile its own stages.
  std::optional<TimeSpread> optimizer_step;
  double input_bytes = 0.0;   // the boundary tensors per micro-batch (floats x 4)
  double output_bytes = 0.0;
};

struct StageProfile {
  std::string name;
  double param_bytes = 0.0;  // weight_grad_size floats x 4: the parameters the gradient covers
  std::vector<StageTiming> sizes;  // one per ProfileOptions::rows, in increasing rows
};

struct ProfileOptions {
  std::vector<std::int32_t> rows{8};  // micro-batch sizes to measure (samples per micro-batch)
  std::int32_t warmup = 2;            // untimed runs of each callable before the timed ones
  std::int32_t repetitions = 10;      // timed runs; the median is the cost, the rest the spread
  TimeUnit unit = "ms";               // "s", "ms", "us" or "ns" (measured: a scale) of every time reported
  std::vector<std::string> names;     // one per stage; empty: "stage 0", "stage 1", ...
};

// Builds every stage's functions for micro-batches of `rows` samples (stage functions size
// their spans by the micro-batch, so each size needs its own).
using StageFactory = std::function<std::vector<StageFunctions>(std::int32_t rows)>;

}  // namespace profiling
namespace detail {

// Units of `unit` per second of the clock: the profiler times with a clock, so a unit of the
// model's own, with no fixed relation to time, is an error here.
[[nodiscard]] inline double per_clock_second(const TimeUnit& unit, const char* who, const char* field) {
  return TimeUnit("s").factor_to(unit, who, field, "give \"s\", \"ms\", \"us\" or \"ns\"");
}

}  // namespace detail
namespace profiling {

// Times every stage that `make` builds, at every size in options.rows: per repetition, a
// forward of micro-batch 0, then its backward_input and backward_weight (when the stage has
// the split), then a forward and the full backward (when it has one), then optimizer_step
// (when it has one) on a zero gradient. Inputs are a fixed pattern, the output gradient ones. Throws ppsched::error for bad options, a factory whose
// stage count changes with the size, or a stage without a forward.
[[nodiscard]] inline std::vector<StageProfile> profile_stages(const StageFactory& make, const ProfileOptions& options = {}) {
  using detail::concat;
  const char* who = "profile_stages";
  if (!make) detail::fail({who, "no stage factory", "make", "give a function from rows to the stages' StageFunctions"});
  if (options.rows.empty()) detail::fail({who, "no micro-batch sizes", "ProfileOptions::rows", "give at least one size"});
  for (std::size_t i = 0; i < options.rows.size(); ++i) {
    if (options.rows[i] < 1 || (i > 0 && options.rows[i] <= options.rows[i - 1])) {
      detail::fail({who, detail::concat("rows[", i, "] = ", options.rows[i]), "ProfileOptions::rows",
            "give distinct sizes >= 1 in increasing order"});
    }
  }
  if (options.repetitions < 1 || options.warmup < 0) {
    detail::fail({who, detail::concat("repetitions = ", options.repetitions, ", warmup = ", options.warmup), "ProfileOptions",
          "give at least one repetition and no negative warm-up"});
  }
  const double per_second = detail::per_clock_second(options.unit, who, "ProfileOptions::unit");
  std::vector<StageProfile> out;
  for (const std::int32_t rows : options.rows) {
    std::vector<StageFunctions> stages = make(rows);
    if (stages.empty()) detail::fail({who, detail::concat("the factory built no stages for ", rows, " rows"), "make", "build one StageFunctions per stage"});
    if (out.empty()) {
      if (!options.names.empty() && options.names.size() != stages.size()) {
        detail::fail({who, detail::concat(options.names.size(), " names for ", stages.size(), " stages"), "ProfileOptions::names",
              "give one name per stage, or none"});
      }
      for (std::size_t s = 0; s < stages.size(); ++s) {
        StageProfile p;
        p.name = options.names.empty() ? detail::concat("stage ", s) : options.names[s];
        p.param_bytes = 4.0 * static_cast<double>(stages[s].weight_grad_size);
        out.push_back(std::move(p));
      }
    } else if (stages.size() != out.size()) {
      detail::fail({who, detail::concat("the factory built ", stages.size(), " stages for ", rows, " rows and ", out.size(), " before"),
            "make", "build the same stages for every size"});
    }
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const StageFunctions& f = stages[s];
      if (!f.forward) detail::fail({who, detail::concat("stage ", s, " has no forward"), "StageFunctions::forward", "set it"});
      const bool split = static_cast<bool>(f.backward_input) && static_cast<bool>(f.backward_weight);
      std::vector<float> input(f.input_size), output(f.output_size), grad_output(f.output_size, 1.0f),
          grad_input(s == 0 ? 0 : f.input_size), weight_grad(f.weight_grad_size);
      for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
      StageContext c;
      c.microbatch = 0;
      c.stage = static_cast<std::int32_t>(s);
      c.rank = 0;
      const auto timed = [&](StageCall call, auto&& body) {
        c.call = call;
        auto copy = body;  // StageCallRef takes a callable it may change; the lambdas here are const
        const auto t0 = std::chrono::steady_clock::now();
        detail::run_inside_around_call(f, c, copy, "profile_stages");
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * per_second;
      };
      const auto forward = [&] { f.forward(c, input, output); };
      std::vector<double> tf, tbi, tbw, tb, topt;
      const std::vector<float> zero_gradient(f.optimizer_step ? f.weight_grad_size : 0, 0.0f);
      for (std::int32_t r = -options.warmup; r < options.repetitions; ++r) {
        const bool keep = r >= 0;
        std::fill(weight_grad.begin(), weight_grad.end(), 0.0f);
        if (split || !f.backward) {
          const double t = timed(StageCall::forward, forward);
          if (keep) tf.push_back(t);
          if (split) {
            const double ti = timed(StageCall::backward_input, [&] { f.backward_input(c, input, grad_output, grad_input); });
            const double tw = timed(StageCall::backward_weight, [&] { f.backward_weight(c, input, grad_output, weight_grad); });
            if (keep) {
              tbi.push_back(ti);
              tbw.push_back(tw);
            }
          }
        }
        if (f.backward) {
          const double t = timed(StageCall::forward, forward);
          const double tfull = timed(StageCall::backward, [&] { f.backward(c, input, grad_output, grad_input, weight_grad); });
          if (keep) {
            if (!split) tf.push_back(t);
            tb.push_back(tfull);
          }
        }
        if (f.optimizer_step) {
          c.microbatch = -1;  // as the executor calls it, once per step
          const double t = timed(StageCall::optimizer_step, [&] { f.optimizer_step(c, zero_gradient); });
          c.microbatch = 0;
          if (keep) topt.push_back(t);
        }
      }
      StageTiming timing;
      timing.rows = rows;
      timing.forward = detail::spread_of(tf);
      if (split) {
        timing.backward_input = detail::spread_of(tbi);
        timing.backward_weight = detail::spread_of(tbw);
      }
      if (f.backward) timing.backward = detail::spread_of(tb);
      if (f.optimizer_step) timing.optimizer_step = detail::spread_of(topt);
      timing.input_bytes = 4.0 * static_cast<double>(f.input_size);
      timing.output_bytes = 4.0 * static_cast<double>(f.output_size);
      out[s].sizes.push_back(timing);
    }
  }
  return out;
}

// The runtime's fixed costs per action, per transfer and per step as measured (FixedCosts;
// concurrent_slowdown is measure_concurrent_slowdown's, left empty here), in a unit, with the
// steps the fit used.
struct BackendOverheads {
  TimeUnit unit = "ms";  // measured, so a scale: ms unless OverheadOptions::unit asks another
  FixedCosts fixed_costs{};
  TimeSpread one_rank_step;  // the measured steps the fit used, for the report (one rank: the longest schedule)
  TimeSpread two_rank_step;
  TimeSpread few_step;       // one rank, the shortest schedule (empty when only one was measured)
};

// One schedule's measured steps (in the fit's unit), for the fits below.
struct MeasuredSteps {
  Schedule schedule;
  std::vector<double> steps;
};

// Fits the fixed costs from measured steps of empty stages. `one_rank` holds schedules on one
// rank (compute actions only), whose step is step + n x action for n actions
// as the simulator counts them: with two or more distinct n (few and many micro-batches) both
// are fitted, by least squares on the medians, so that what a step pays once is not spread
// over its actions; with one n the step overhead is 0 and the action overhead the whole step
// over n. Neither goes below 0 (noise that would put one there: the better fit with one
// constant). `two_rank` (on two ranks) then gives the cost per transfer, the other two held.
// Steps are in `unit`.
[[nodiscard]] inline BackendOverheads fit_backend_overheads(const std::vector<MeasuredSteps>& one_rank,
                                                            const MeasuredSteps& two_rank, TimeUnit unit = "ms") {
  using detail::concat;
  const char* who = "fit_backend_overheads";
  if (one_rank.empty()) detail::fail({who, "no one-rank schedule", "one_rank", "give at least one measured one-rank schedule"});
  std::vector<double> n, t;
  std::size_t longest = 0, shortest = 0;
  for (std::size_t i = 0; i < one_rank.size(); ++i) {
    if (one_rank[i].schedule.ranks != 1) {
      detail::fail({who, detail::concat("one_rank[", i, "] runs on ", one_rank[i].schedule.ranks, " ranks"), "one_rank",
            "give schedules of one rank here, the two-rank one apart"});
    }
    if (one_rank[i].steps.empty()) detail::fail({who, detail::concat("one_rank[", i, "] has no steps"), "steps", "measure at least one step"});
    n.push_back(detail::fixed_cost_makespan(one_rank[i].schedule, 1.0, 0.0));  // its action count
    t.push_back(detail::spread_of(one_rank[i].steps).median);
    if (n[i] > n[longest]) longest = i;
    if (n[i] < n[shortest]) shortest = i;
  }
  if (two_rank.steps.empty()) detail::fail({who, "the two-rank schedule has no steps", "two_rank.steps", "measure at least one step"});
  BackendOverheads o;
  o.unit = std::move(unit);
  o.one_rank_step = detail::spread_of(one_rank[longest].steps);
  o.two_rank_step = detail::spread_of(two_rank.steps);
  if (n[shortest] < n[longest]) o.few_step = detail::spread_of(one_rank[shortest].steps);
  double mn = 0.0, mt = 0.0;
  for (std::size_t i = 0; i < n.size(); ++i) {
    mn += n[i] / static_cast<double>(n.size());
    mt += t[i] / static_cast<double>(n.size());
  }
  double snn = 0.0, snt = 0.0, nn = 0.0, nt = 0.0;
  for (std::size_t i = 0; i < n.size(); ++i) {
    snn += (n[i] - mn) * (n[i] - mn);
    snt += (n[i] - mn) * (t[i] - mt);
    nn += n[i] * n[i];
    nt += n[i] * t[i];
  }
  double a = snn > 0.0 ? snt / snn : -1.0, s = mt - a * mn;
  if (!(a >= 0.0) || !(s >= 0.0)) {
    const double a_only = nn > 0.0 ? nt / nn : 0.0;
    double e_a = 0.0, e_s = 0.0;
    for (std::size_t i = 0; i < n.size(); ++i) {
      e_a += (t[i] - a_only * n[i]) * (t[i] - a_only * n[i]);
      e_s += (t[i] - mt) * (t[i] - mt);
    }
    if (snn == 0.0 || e_a <= e_s) {
      a = std::max(0.0, a_only);
      s = 0.0;
    } else {
      a = 0.0;
      s = std::max(0.0, mt);
    }
  }
  o.fixed_costs.action = a;
  o.fixed_costs.step = s;
  o.fixed_costs.transfer = detail::solve_increasing(
      [&](double x) { return detail::fixed_cost_makespan(two_rank.schedule, a, x) + s; }, o.two_rank_step.median);
  return o;
}

// The same from one one-rank schedule: no step overhead, every cost per action.
[[nodiscard]] inline BackendOverheads fit_backend_overheads(const Schedule& one_rank, const std::vector<double>& one_rank_steps,
                                                            const Schedule& two_rank, const std::vector<double>& two_rank_steps,
                                                            TimeUnit unit = "ms") {
  if (one_rank_steps.empty() || two_rank_steps.empty()) {
    detail::fail({"fit_backend_overheads", "no measured steps", "steps", "measure at least one step of each schedule"});
  }
  return fit_backend_overheads({MeasuredSteps{one_rank, one_rank_steps}}, MeasuredSteps{two_rank, two_rank_steps},
                               std::move(unit));
}

}  // namespace profiling
namespace detail {

// Stages that do nothing: what a step of them costs is the runtime's own work. Each declares
// `weight_floats` floats of weight gradient (StageFunctions::weight_grad_size), which it never
// writes: the executor's own work on them (zeroing a micro-batch's part before each B or BW,
// adding it into the stage's total after, zeroing the total each step) is then in that cost.
[[nodiscard]] inline std::vector<StageFunctions> empty_stages(std::int32_t stages, std::size_t weight_floats = 0) {
  std::vector<StageFunctions> out(static_cast<std::size_t>(stages));
  for (std::size_t s = 0; s < out.size(); ++s) {
    StageFunctions& f = out[s];
    f.input_size = f.output_size = 1;
    f.weight_grad_size = weight_floats;
    f.forward = [](std::int32_t, std::span<const float>, std::span<float>) {};
    f.backward = [](std::int32_t, std::span<const float>, std::span<const float>, std::span<float>, std::span<float>) {};
    if (s + 1 == out.size()) {
      f.target_size = 1;
      f.loss = [](std::int32_t, std::span<const float>, std::span<const float>, std::span<float>) { return 0.0f; };
    }
  }
  return out;
}

}  // namespace detail
namespace profiling {

struct OverheadOptions {
  std::int32_t microbatches = 32;  // per step; more actions per step average the clock's cost away
  // The one-rank step is also measured with this few micro-batches, so that the fixed cost per
  // step and per action are told apart (fit_backend_overheads); 0 or microbatches: not.
  std::int32_t few_microbatches = 2;
  std::int32_t warmup = 3;         // untimed steps first (threads, pools and caches settle)
  std::int32_t repetitions = 21;   // timed steps of each schedule
  TimeUnit unit = "ms";            // of every time measured: a scale (ms: a measured one's default)
  ExecutorOptions executor{};      // as the real run will use them
  // The model's weight-gradient floats (its parameters), split evenly over each measured
  // schedule's stages: the empty stages then carry gradients of the model's size, and the
  // executor's work on them (zeroing each micro-batch's part, adding it into the stage's total;
  // docs/accuracy.md) is in the fixed costs. 0: stages without weights, whose steps miss it.
  std::size_t weight_grad_floats = 0;
};

// Measures the fixed cost of a step, of a compute action and of a transfer on a backend: steps
// of empty stages, GPipe on one rank (`one_rank`, one backend) with few and with many
// micro-batches, their steps alternated so that a change of load hits both, and 1F1B on two
// (`two_ranks`, two backends of one cluster), timed on the host around run_step (the time a
// caller waits: waking the rank threads and gathering the results included) and fitted by
// fit_backend_overheads. Stages with real weights cost more per action than empty ones (the
// executor zeroes and sums their gradients): OverheadOptions::weight_grad_floats gives the
// empty stages the model's gradient size so that this part is measured too; without it, only
// calibration (which reads the measured actions' spans) sees it.
template <class B>
[[nodiscard]] BackendOverheads measure_backend_overheads(const std::vector<B*>& one_rank, const std::vector<B*>& two_ranks,
                                                         const OverheadOptions& options = {}) {
  using detail::concat;
  const char* who = "measure_backend_overheads";
  if (one_rank.size() != 1 || two_ranks.size() != 2) {
    detail::fail({who, detail::concat("got ", one_rank.size(), " and ", two_ranks.size(), " backends"), "one_rank, two_ranks",
          "give one backend for the one-rank run and two (of one cluster) for the two-rank run"});
  }
  if (options.microbatches < 2 || options.repetitions < 1 || options.warmup < 0) {
    detail::fail({who, detail::concat("microbatches = ", options.microbatches, ", repetitions = ", options.repetitions), "OverheadOptions",
          "give at least 2 micro-batches and 1 repetition"});
  }
  if (options.few_microbatches < 0 || options.few_microbatches > options.microbatches) {
    detail::fail({who, detail::concat("few_microbatches = ", options.few_microbatches, " with microbatches = ", options.microbatches),
          "OverheadOptions::few_microbatches", "give 1 to microbatches - 1 (0: measure one shape only)"});
  }
  const double per_second = detail::per_clock_second(options.unit, who, "OverheadOptions::unit");
  // Each run in its own World, all built before any is timed; their steps alternate.
  const auto measure = [&](std::vector<std::unique_ptr<World<B>>>& worlds, std::vector<MeasuredSteps>& out) {
    std::vector<std::vector<float>> data;
    for (const MeasuredSteps& m : out) data.emplace_back(static_cast<std::size_t>(m.schedule.microbatches), 0.0f);
    for (std::int32_t r = -options.warmup; r < options.repetitions; ++r) {
      for (std::size_t k = 0; k < worlds.size(); ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        (void)worlds[k]->run_step({data[k], data[k]});
        const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * per_second;
        if (r >= 0) out[k].steps.push_back(t);
      }
    }
  };
  std::vector<std::unique_ptr<World<B>>> one_worlds;
  std::vector<MeasuredSteps> one;
  std::vector<std::int32_t> counts{options.microbatches};
  if (options.few_microbatches > 0 && options.few_microbatches < options.microbatches) counts.push_back(options.few_microbatches);
  for (const std::int32_t m : counts) {
    one_worlds.push_back(std::make_unique<World<B>>(one_rank, make_gpipe(ScheduleRequest{1, m, 1}),
                                                    detail::empty_stages(1, options.weight_grad_floats), options.executor));
    one.push_back({one_worlds.back()->schedule(), {}});
  }
  measure(one_worlds, one);
  one_worlds.clear();
  std::vector<std::unique_ptr<World<B>>> two_worlds;
  two_worlds.push_back(std::make_unique<World<B>>(two_ranks, make_1f1b(ScheduleRequest{2, options.microbatches, 1}),
                                                  detail::empty_stages(2, (options.weight_grad_floats + 1) / 2),
                                                  options.executor));
  std::vector<MeasuredSteps> two{{two_worlds.back()->schedule(), {}}};
  measure(two_worlds, two);
  return fit_backend_overheads(one, two.front(), options.unit);
}

// How much slower a rank's compute runs while other ranks compute on the same host
// (CostModel::fixed_costs.concurrent_slowdown): `work(thread)` (one micro-batch of the model's own compute;
// each thread its own copy of what it writes) runs `calls` times back to back on k threads
// started together, for k = 1 .. ranks, the counts alternated `rounds` times so that a change of
// load hits each; entry k-1 is the median time per call with k threads over the median with
// one, at least 1. Cores shared with a sibling hyper-thread, a memory bus or a neighbouring VM
// show here, where no per-action time can: a 2-core VM measured 1.7-2.4x for two threads.
struct SlowdownOptions {
  std::int32_t ranks = 2;      // the most ranks that will compute at once on this host
  std::int32_t calls = 5;      // calls per thread per round, at least (the first is a warm-up, untimed)
  std::int32_t rounds = 5;     // alternations of 1 .. ranks threads
  // More calls where one is short, so that the threads' timed calls overlap for at least this
  // long (seconds) and not only in the moments their starts and ends leave: tiny work measured
  // 1.0x and 1.6x in two runs with 5 calls.
  double min_seconds = 0.02;
};

[[nodiscard]] inline std::vector<double> measure_concurrent_slowdown(const std::function<void(std::int32_t thread)>& work,
                                                                     const SlowdownOptions& options = {}) {
  using detail::concat;
  const char* who = "measure_concurrent_slowdown";
  if (!work) detail::fail({who, "no work was given", "work", "give the model's compute of one micro-batch, work(thread)"});
  if (options.ranks < 1 || options.calls < 2 || options.rounds < 1) {
    detail::fail({who, detail::concat("ranks = ", options.ranks, ", calls = ", options.calls, ", rounds = ", options.rounds), "SlowdownOptions",
          "give at least 1 rank, 2 calls (one is a warm-up) and 1 round"});
  }
  if (!(options.min_seconds >= 0.0 && options.min_seconds <= 3600.0)) {
    detail::fail({who, detail::concat("min_seconds = ", options.min_seconds), "SlowdownOptions::min_seconds", "give 0 to 3600 seconds"});
  }
  const auto k_max = static_cast<std::size_t>(options.ranks);
  // One call alone, after one untimed, sets the calls per round.
  work(0);
  const auto first = std::chrono::steady_clock::now();
  work(0);
  const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count();
  const std::int32_t calls =
      one > 0.0 ? static_cast<std::int32_t>(std::min<double>(1e6, std::max<double>(options.calls, 1.0 + std::ceil(options.min_seconds / one))))
                : options.calls;
  std::vector<std::vector<double>> per_call(k_max);  // per thread count: every thread's mean time per call
  for (std::int32_t round = 0; round < options.rounds; ++round) {
    for (std::size_t k = 1; k <= k_max; ++k) {
      std::vector<double> seconds(k, 0.0);
      std::vector<std::exception_ptr> errors(k);
      std::atomic<std::size_t> ready{0};
      const auto body = [&](std::size_t t) {
        try {
          work(static_cast<std::int32_t>(t));  // warm-up, and the threads line up behind it
          ready.fetch_add(1);
          while (ready.load() < k) std::this_thread::yield();
          const auto t0 = std::chrono::steady_clock::now();
          for (std::int32_t c = 1; c < calls; ++c) work(static_cast<std::int32_t>(t));
          seconds[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (calls - 1);
        } catch (...) {
          errors[t] = std::current_exception();
          ready.fetch_add(1);  // the others do not wait for a thread that failed
        }
      };
      std::vector<std::thread> threads;
      for (std::size_t t = 1; t < k; ++t) threads.emplace_back(body, t);
      body(0);
      for (std::thread& th : threads) th.join();
      for (const std::exception_ptr& e : errors) {
        if (e) std::rethrow_exception(e);
      }
      per_call[k - 1].insert(per_call[k - 1].end(), seconds.begin(), seconds.end());
    }
  }
  const double alone = detail::spread_of(per_call[0]).median;
  if (!(alone > 0.0)) detail::fail({who, "the work took no measurable time", "work", "give work of at least a few microseconds"});
  std::vector<double> out;
  for (std::size_t k = 0; k < k_max; ++k) out.push_back(std::max(1.0, detail::spread_of(per_call[k]).median / alone));
  out[0] = 1.0;
  return out;
}

// A Profile of the measured stages: one layer per stage function (so the partitioner cuts
// between them), a CostPoint per size with the medians and the largest relative spread, the
// plain fields and the optimizer step at `reference_rows` (one of the sizes measured; 0: the largest), and the
// backend's fixed costs, converted from the overheads' unit to the profile's (TimeUnit::factor_to:
// "us" overheads into an "ms" profile are divided by 1000; a unit that does not convert is an
// error).
[[nodiscard]] inline Profile measured_profile(const std::vector<StageProfile>& stages, const TimeUnit& unit,
                                              std::int32_t reference_rows = 0,
                                              const std::optional<BackendOverheads>& overheads = std::nullopt) {
  using detail::concat;
  const char* who = "measured_profile";
  if (stages.empty() || stages.front().sizes.empty()) detail::fail({who, "no measured stages", "stages", "profile_stages first"});
  const double overheads_scale =
      overheads ? overheads->unit.factor_to(unit, who, "BackendOverheads::unit to the stages' unit",
                                            "measure both in one unit, or both in s, ms, us or ns")
                : 1.0;
  const std::int32_t reference = reference_rows == 0 ? stages.front().sizes.back().rows : reference_rows;
  std::vector<Layer> layers;
  for (const StageProfile& s : stages) {
    Layer l;
    l.name = s.name;
    l.param_bytes = s.param_bytes;
    bool found = false;
    for (const StageTiming& t : s.sizes) {
      CostPoint p;
      p.rows = t.rows;
      p.forward = t.forward.median;
      p.backward_input = t.backward_input.median;
      p.backward_weight = t.backward_weight.median;
      if (t.backward) p.backward = t.backward->median;
      // What backward keeps is at least the stage's input; the stage functions do not say more.
      p.activation_bytes = t.input_bytes;
      p.output_bytes = t.output_bytes;
      p.spread = std::max({t.forward.relative_spread(), t.backward_input.relative_spread(),
                           t.backward_weight.relative_spread(), t.backward ? t.backward->relative_spread() : 0.0});
      if (t.backward && p.backward_input == 0.0 && p.backward_weight == 0.0) {
        // A stage with a full backward only: the split halves are unknown, so the zero-bubble
        // families see BI = B, BW = 0 (the executor cannot run them on it anyway).
        p.backward_input = *p.backward;
      }
      l.points.push_back(p);
      if (t.rows == reference) {
        found = true;
        l.forward = p.forward;
        l.backward_input = p.backward_input;
        l.backward_weight = p.backward_weight;
        l.backward = p.backward;
        l.activation_bytes = p.activation_bytes;
        l.output_bytes = p.output_bytes;
        l.optimizer_step = t.optimizer_step ? t.optimizer_step->median : 0.0;
      }
    }
    if (!found) {
      detail::fail({who, detail::concat("no size of ", reference, " rows was measured"), "reference_rows", "give one of the sizes measured"});
    }
    layers.push_back(std::move(l));
  }
  Profile p;
  p.graph = LayerGraph(std::move(layers));
  p.time_unit = unit;
  p.rows = reference;
  if (overheads) {
    p.fixed_costs = overheads->fixed_costs;  // concurrent_slowdown is a ratio: no unit to convert
    p.fixed_costs.action *= overheads_scale;
    p.fixed_costs.transfer *= overheads_scale;
    p.fixed_costs.step *= overheads_scale;
  }
  return p;
}

}  // namespace profiling
}  // namespace ppsched
