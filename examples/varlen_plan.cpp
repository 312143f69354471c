// Variable-length batches planned every step (ppsched/plan/varlen.hpp, docs/plan.md,
// "Variable-length batches"). An 8-stage GPT-like model is "measured" at three sequence lengths
// and four micro-batch sizes (a stand-in for profiling::profile_stages: the times follow
// fixed + per-token + attention terms, with +-1.5% noise); the fit recovers the terms and says
// how far it lies from the points. Then global batches of sequences whose lengths follow a
// long-tailed lognormal are split four ways — padded, packed (first-fit decreasing), length
// buckets, balanced — and each split is timed by the simulator three ways: 1F1B, the schedule
// the search picks for the average micro-batch (a static plan: what a planner that sees one
// profile picks), and the schedule the search picks for these very micro-batches (the plan
// every step). Throughput is real tokens per millisecond of the simulated step.
//
//   varlen_plan [steps] [sequences per batch] [lengths file]
//
// With a lengths file (whitespace-separated token counts), its lengths form one batch instead.
#include <ppsched/plan/varlen.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/sim/simulate.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace ppsched;
using namespace ppsched::plan;

constexpr std::int32_t ranks = 8;

// What the "measured" stages cost: per stage fixed + per token + per squared length (ms), the
// first stage (embedding) lighter and the last (LM head, loss) heavier; attention is about a
// third of a 4096-token sequence's time. Backward is twice forward, split 55/45 into BI and BW.
StageCost measured(std::size_t stage, const MicrobatchShape& s, double noise) {
  const double k = stage == 0 ? 0.7 : stage == ranks - 1 ? 1.4 : 1.0;
  const double f = k * (0.03 + 2.0e-4 * s.tokens + 2.4e-8 * s.squares) * (1.0 + noise);
  return StageCost{f, 1.1 * f, 0.9 * f, 64.0 * 1024 + 96.0 * 1024 * s.tokens, 8.0 * 1024 * s.tokens};
}

// Lognormal lengths clipped to [16, 4096] (the context). mu, sigma: docs/plan.md says where from.
std::vector<std::int64_t> lognormal_lengths(std::size_t n, std::mt19937_64& rng) {
  std::lognormal_distribution<double> d(5.49, 1.10);
  std::vector<std::int64_t> out(n);
  for (auto& l : out) l = std::clamp<std::int64_t>(std::llround(d(rng)), 16, 4096);
  return out;
}

struct Row {
  double microbatches = 0, padding = 0, tokens = 0;
  double t_1f1b = 0, t_static = 0, t_planned = 0, t_ordered = 0;  // summed simulated steps, ms
  double plan_ms = 0, order_ms = 0;  // wall time of plan_microbatches, of plan_step
};

double simulated(const Schedule& schedule, const CostModel& costs) {
  SimOptions o;
  o.record_timeline = false;
  return simulate(schedule, costs, o).makespan;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
  const std::size_t batch = argc > 2 ? static_cast<std::size_t>(std::max(1, std::atoi(argv[2]))) : 1024;
  std::vector<std::int64_t> from_file;
  if (argc > 3) {
    std::ifstream in(argv[3]);
    for (std::int64_t l = 0; in >> l;) from_file.push_back(l);
  }

  // 1. The fit.
  std::vector<LengthSample> samples;
  int k = 0;
  for (const std::int64_t len : {256, 1024, 4096}) {
    for (const std::size_t count : {1, 2, 4, 8}) {
      LengthSample s;
      s.lengths.assign(count, len);
      const double noise = 0.015 * ((k++ % 3) - 1.0);
      for (std::size_t st = 0; st < ranks; ++st) s.stages.push_back(measured(st, shape_of(s.lengths), noise));
      samples.push_back(s);
    }
  }
  LengthCosts fit;
  try {
    fit = fit_length_costs(samples);
  } catch (const ppsched::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  const TermFit& f1 = fit.stages[1].forward;
  std::printf("fit of %zu samples, stage 1 forward: %.4g + %.4g x tokens + %.4g x sum(len^2) ms "
              "(true 0.03, 2e-4, 2.4e-8); largest residual %.2f%% of a point\n",
              fit.samples, f1.fixed, f1.per_token, f1.per_square, 100.0 * fit.max_relative_residual());

  // 2-4. Splits and plans over `steps` batches.
  SplitOptions split;
  split.token_budget = 8192;
  split.cap.activation_bytes = 6.0 * 1024 * 1024 * 1024;  // per rank
  const StepPlanOptions plan_options{.cap = split.cap};
  const SplitMethod methods[] = {SplitMethod::padded, SplitMethod::packed, SplitMethod::bucketed, SplitMethod::balanced};
  Row rows[4];
  std::mt19937_64 rng(42);
  for (int step = 0; step < steps; ++step) {
    const std::vector<std::int64_t> lengths = from_file.empty() ? lognormal_lengths(batch, rng) : from_file;
    for (int mi = 0; mi < 4; ++mi) {
      Split s;
      try {
        s = split_batch(lengths, fit, methods[mi], split);
      } catch (const ppsched::error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
      }
      Row& r = rows[mi];
      const auto m = static_cast<std::int32_t>(s.microbatches.size());
      r.microbatches += m;
      r.padding += s.padding_fraction();
      r.tokens += s.tokens;
      const CostModel actual = length_cost_model(fit, s.microbatches);
      r.t_1f1b += simulated(make_schedule("1f1b", {.ranks = ranks, .microbatches = m}), actual);
      // The static plan: the schedule the search picks when every micro-batch costs the average.
      MicrobatchShape mean;
      for (const Microbatch& mb : s.microbatches) {
        mean.tokens += mb.shape.tokens / m;
        mean.squares += mb.shape.squares / m;
      }
      const std::vector<Microbatch> average(static_cast<std::size_t>(m), Microbatch{{}, 0, 0, mean});
      const SearchResult fixed = plan_microbatches(fit, average, plan_options);
      r.t_static += simulated(fixed.schedule, evenly_split(actual, ranks, m)(fixed.schedule.placement));
      const auto t0 = std::chrono::steady_clock::now();
      const SearchResult planned = plan_microbatches(fit, s.microbatches, plan_options);
      r.plan_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      r.t_planned += planned.simulation.makespan;
      const auto t1 = std::chrono::steady_clock::now();
      const StepPlan ordered = plan_step(fit, s.microbatches, plan_options);
      r.order_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
      r.t_ordered += ordered.search.simulation.makespan;
    }
    if (!from_file.empty()) break;
  }
  const int n = from_file.empty() ? steps : 1;
  std::printf("\n%d batches of %zu sequences, lognormal(5.49, 1.10) clipped to [16, 4096]; %d ranks, "
              "8192 tokens per micro-batch at most\n",
              n, from_file.empty() ? batch : from_file.size(), ranks);
  std::printf("%-9s %6s %8s | %11s %11s %11s %11s | %9s %9s %9s | %7s %8s\n", "split", "m", "padding", "1F1B tok/ms", "static",
              "planned", "ordered", "vs padded", "vs static", "ordered", "plan ms", "order ms");
  const double padded_planned = rows[0].tokens / rows[0].t_planned;
  for (int mi = 0; mi < 4; ++mi) {
    const Row& r = rows[mi];
    const double planned = r.tokens / r.t_planned, fixed = r.tokens / r.t_static, ordered = r.tokens / r.t_ordered;
    std::printf("%-9s %6.1f %7.1f%% | %11.1f %11.1f %11.1f %11.1f | %8.2fx %8.1f%% %8.1f%% | %7.2f %8.2f\n",
                std::string(split_method_name(methods[mi])).c_str(), r.microbatches / n, 100.0 * r.padding / n,
                r.tokens / r.t_1f1b, fixed, planned, ordered, planned / padded_planned, 100.0 * (planned / fixed - 1.0),
                100.0 * (ordered / fixed - 1.0), r.plan_ms / n, r.order_ms / n);
  }
  const double padded_static = rows[0].tokens / rows[0].t_static;
  std::printf("\nbalanced, planned every step: %.2fx the throughput of padding (its static plan), "
              "%.1f%% over packing with a static plan\n",
              (rows[3].tokens / rows[3].t_planned) / padded_static,
              100.0 * ((rows[3].tokens / rows[3].t_planned) / (rows[1].tokens / rows[1].t_static) - 1.0));
  return 0;
}
