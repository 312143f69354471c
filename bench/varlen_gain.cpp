// Issue 42 item 4's second goal: when does a plan made every step beat the static plan of the
// same micro-batches by 10%? A report, built and not registered (docs/plan.md, "Variable-length
// batches", records its figures).
//
// The static plan is the issue's: fixed packing (split_batch's `packed`, first-fit decreasing, in
// the order it packs), one schedule chosen by the search for the average micro-batch of the step
// and used on the step's real micro-batches. The per-step plans run on the same micro-batches and
// choose from the same candidates (the same SearchOptions): the schedule for their own costs
// (plan_microbatches), then the order too (plan_step, 8 and 64 timed orders). "busy" is what no
// schedule or order on the static plan's placement can beat: its busiest rank's work
// (SimResult::ideal_time), and with one stage per rank its busiest rank's work after the cheapest
// fill ("fill"), each given as the static plan's distance to it. "rule" is the static plan with a
// fixed order rule instead of packing's (no planning: cheapest first, next cheapest last, the
// rest costliest first); "1000rnd" the best of 1000 random orders under plan_step's schedule,
// where m <= 16: the order's ceiling. The last column is not a same-micro-batch comparison: the
// split made per step too (`balanced`, its own micro-batch count) with plan_step, against the
// static packed plan.
//
//   varlen_gain [batches per row]
#include <ppsched/plan/varlen.hpp>
#include <ppsched/sim/simulate.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace ppsched;
using namespace ppsched::plan;

// Stage s of p: fixed + per token + per squared length (ms) as examples/varlen_plan.cpp, the
// first stage 0.7x and the last 1.4x ("imbalanced"), or every stage alike ("even").
LengthCosts model(std::int32_t p, bool imbalanced) {
  std::vector<LengthSample> samples;
  for (const std::int64_t len : {256, 1024, 4096}) {
    for (const std::size_t count : {1, 2, 4, 8}) {
      LengthSample s;
      s.lengths.assign(count, len);
      const MicrobatchShape sh = shape_of(s.lengths);
      for (std::int32_t st = 0; st < p; ++st) {
        const double k = !imbalanced ? 1.0 : st == 0 ? 0.7 : st == p - 1 ? 1.4 : 1.0;
        const double f = k * (0.03 + 2.0e-4 * sh.tokens + 2.4e-8 * sh.squares);
        s.stages.push_back(StageCost{f, 1.1 * f, 0.9 * f, 64.0 * 1024 + 96.0 * 1024 * sh.tokens, 8.0 * 1024 * sh.tokens});
      }
      samples.push_back(s);
    }
  }
  return fit_length_costs(samples);
}

enum class Dist { sharegpt, narrow, heavy, mixture };

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::sharegpt: return "LN(5.49,1.10)";
    case Dist::narrow: return "LN(5.49,0.50)";
    case Dist::heavy: return "LN(5.00,1.80)";
    case Dist::mixture: return "95%~90+5%>=2k";
  }
  return "?";
}

std::int64_t draw(Dist d, std::mt19937_64& rng) {
  double x = 0;
  switch (d) {
    case Dist::sharegpt: x = std::lognormal_distribution<double>(5.49, 1.10)(rng); break;
    case Dist::narrow: x = std::lognormal_distribution<double>(5.49, 0.50)(rng); break;
    case Dist::heavy: x = std::lognormal_distribution<double>(5.00, 1.80)(rng); break;
    case Dist::mixture:
      x = std::uniform_real_distribution<double>(0, 1)(rng) < 0.05 ? std::uniform_real_distribution<double>(2048, 4096)(rng)
                                                                    : std::lognormal_distribution<double>(4.5, 0.5)(rng);
      break;
  }
  return std::clamp<std::int64_t>(std::llround(x), 16, 4096);
}

// A batch of about m micro-batches' worth: lengths drawn until 0.97 x m x budget tokens.
std::vector<std::int64_t> batch(Dist d, std::int64_t budget, std::int32_t m, std::mt19937_64& rng) {
  std::vector<std::int64_t> out;
  double tokens = 0;
  while (tokens < 0.97 * m * static_cast<double>(budget)) {
    out.push_back(draw(d, rng));
    tokens += static_cast<double>(out.back());
  }
  return out;
}

struct Config {
  Dist dist;
  std::int32_t p, m;
  std::int64_t budget;
  bool imbalanced;
  bool capped;  // activation cap: 1F1B's p micro-batches of `budget` tokens on stage 0
  int search;   // 0: plan_step's default (fixed families, chunks {1}); 1: + greedy; 2: + V (chunks {1,2}, greedy)
};

struct Sums {
  double tokens = 0, m = 0, t_static = 0, ideal = 0, fill = 0, t_sched = 0, t_order8 = 0, t_order64 = 0, t_ceiling = 0, t_rule = 0, t_balanced = 0;
  std::string static_name, step_names;
};

SearchOptions search_options(int level) {
  StepPlanOptions d;
  SearchOptions o = d.search;
  if (level >= 1) o.greedy = true;
  if (level >= 2) o.chunks = {1, 2};
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const int batches = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  std::vector<Config> configs;
  // The example's setting, then one change at a time.
  for (const Dist d : {Dist::sharegpt, Dist::narrow, Dist::heavy, Dist::mixture}) configs.push_back({d, 8, 64, 8192, true, false, 0});
  for (const std::int64_t b : {4096, 16384}) configs.push_back({Dist::sharegpt, 8, 64, b, true, false, 0});
  for (const std::int32_t m : {8, 16, 32}) configs.push_back({Dist::sharegpt, 8, m, 8192, true, false, 0});
  configs.push_back({Dist::sharegpt, 4, 16, 8192, true, false, 0});
  configs.push_back({Dist::sharegpt, 8, 64, 8192, true, true, 0});
  configs.push_back({Dist::sharegpt, 8, 64, 8192, false, false, 0});
  configs.push_back({Dist::sharegpt, 8, 64, 8192, true, false, 1});
  configs.push_back({Dist::sharegpt, 8, 32, 8192, true, false, 2});
  configs.push_back({Dist::sharegpt, 8, 8, 8192, true, false, 2});
  configs.push_back({Dist::heavy, 8, 8, 4096, false, false, 2});
  // Where the micro-batches differ most and the pipeline is shortest.
  configs.push_back({Dist::mixture, 8, 8, 4096, false, false, 0});
  configs.push_back({Dist::heavy, 8, 8, 4096, false, false, 0});
  configs.push_back({Dist::heavy, 8, 8, 4096, false, false, 1});
  configs.push_back({Dist::heavy, 8, 16, 4096, false, false, 0});

  std::printf("%d batches per row; static: packed, the search's schedule for the average micro-batch; gains in throughput over it\n", batches);
  std::printf("%-14s %2s %3s %5s %5s %3s %3s %-6s | %-11s %7s %6s %6s %6s | %6s %6s %7s %7s | %7s | %s\n", "lengths", "p", "m~", "budgt", "stage", "cap",
              "srch", "m", "static", "tok/ms", "busy", "fill", "rule", "sched", "order8", "order64", "1000rnd", "balncd", "per-step winners");
  for (const Config& c : configs) {
    const LengthCosts fit = model(c.p, c.imbalanced);
    SplitOptions split;
    split.token_budget = c.budget;
    if (c.capped) split.cap.activation_bytes = c.p * (64.0 * 1024 + 96.0 * 1024 * static_cast<double>(c.budget));
    StepPlanOptions opts{.cap = split.cap};
    opts.search = search_options(c.search);
    std::mt19937_64 rng(42), shuffle_rng(7);
    Sums s;
    for (int b = 0; b < batches; ++b) {
      const std::vector<std::int64_t> lengths = batch(c.dist, c.budget, c.m, rng);
      const Split packed = split_batch(lengths, fit, SplitMethod::packed, split);
      const auto m = static_cast<std::int32_t>(packed.microbatches.size());
      s.tokens += packed.tokens;
      s.m += m;
      MicrobatchShape mean;
      for (const Microbatch& mb : packed.microbatches) {
        mean.tokens += mb.shape.tokens / m;
        mean.squares += mb.shape.squares / m;
      }
      const std::vector<Microbatch> average(static_cast<std::size_t>(m), Microbatch{{}, 0, 0, mean});
      const SearchResult fixed = plan_microbatches(fit, average, opts);
      const CostModel actual = evenly_split(length_cost_model(fit, packed.microbatches), c.p, m)(fixed.schedule.placement);
      SimOptions so;
      so.record_timeline = false;
      const SimResult st = simulate(fixed.schedule, actual, so);
      s.t_static += st.makespan;
      s.ideal += st.ideal_time;
      // One stage per rank: rank r starts no earlier than some micro-batch's forwards through
      // stages 0..r-1 (the cheapest's), then has all its work to do.
      double fill = st.ideal_time;
      if (static_cast<std::int32_t>(fixed.schedule.placement.size()) == c.p) {
        for (std::int32_t r = 0; r < c.p; ++r) {
          double head = std::numeric_limits<double>::infinity(), work = 0;
          for (const Microbatch& mb : packed.microbatches) {
            double h = 0;
            for (std::int32_t q = 0; q < r; ++q) h += stage_cost_at(fit.stages[static_cast<std::size_t>(q)], mb.shape).forward;
            head = std::min(head, h);
            const StageCost sc = stage_cost_at(fit.stages[static_cast<std::size_t>(r)], mb.shape);
            work += sc.forward + sc.backward_input + sc.backward_weight;
          }
          fill = std::max(fill, head + work);
        }
      }
      s.fill += fill;
      s.static_name = fixed.best().name;
      // The static plan with a fixed rule for the order, no planning: the cheapest micro-batch
      // first, the next cheapest last, the rest costliest first (balanced's order).
      {
        std::vector<double> t(packed.microbatches.size(), 0.0);
        for (std::size_t k = 0; k < t.size(); ++k) {
          for (const StageLengthFit& f : fit.stages) {
            const StageCost sc = stage_cost_at(f, packed.microbatches[k].shape);
            t[k] = std::max(t[k], sc.forward + sc.backward_input + sc.backward_weight);
          }
        }
        std::vector<std::size_t> asc(t.size());
        std::iota(asc.begin(), asc.end(), std::size_t{0});
        std::stable_sort(asc.begin(), asc.end(), [&](std::size_t x, std::size_t y) { return t[x] < t[y]; });
        std::vector<Microbatch> ruled{packed.microbatches[asc[0]]};
        for (std::size_t k = asc.size(); k-- > 2;) ruled.push_back(packed.microbatches[asc[k]]);
        if (asc.size() > 1) ruled.push_back(packed.microbatches[asc[1]]);
        const CostModel rc = evenly_split(length_cost_model(fit, ruled), c.p, m)(fixed.schedule.placement);
        s.t_rule += simulate(fixed.schedule, rc, so).makespan;
      }
      const SearchResult sched = plan_microbatches(fit, packed.microbatches, opts);
      s.t_sched += sched.simulation.makespan;
      const StepPlan o8 = plan_step(fit, packed.microbatches, opts);
      s.t_order8 += o8.search.simulation.makespan;
      const StepPlan o64 = plan_step(fit, packed.microbatches, opts, {.evaluations = 64});
      s.t_order64 += o64.search.simulation.makespan;
      // The order's ceiling where m is small: the best of 1000 random orders under plan_step's
      // schedule (or plan_step's own order where none beats it).
      double ceiling = o64.search.simulation.makespan;
      if (m <= 16) {
        std::vector<std::size_t> perm(static_cast<std::size_t>(m));
        std::vector<Microbatch> permuted(perm.size());
        std::iota(perm.begin(), perm.end(), std::size_t{0});
        for (int trial = 0; trial < 1000; ++trial) {
          std::shuffle(perm.begin(), perm.end(), shuffle_rng);
          for (std::size_t k = 0; k < perm.size(); ++k) permuted[k] = packed.microbatches[perm[k]];
          const CostModel pc = evenly_split(length_cost_model(fit, permuted), c.p, m)(o64.search.schedule.placement);
          ceiling = std::min(ceiling, simulate(o64.search.schedule, pc, so).makespan);
        }
      }
      s.t_ceiling += ceiling;
      if (s.step_names.find(o64.search.best().name) == std::string::npos) s.step_names += (s.step_names.empty() ? "" : ",") + o64.search.best().name;
      const Split bal = split_batch(lengths, fit, SplitMethod::balanced, split);
      s.t_balanced += plan_step(fit, bal.microbatches, opts, {.evaluations = 64}).search.simulation.makespan;
    }
    const auto gain = [&](double t) { return 100.0 * (s.t_static / t - 1.0); };
    std::printf("%-14s %2d %3d %5lld %5s %3s %3d %-6.1f | %-11s %7.1f %5.1f%% %5.1f%% %5.1f%% | %5.1f%% %5.1f%% %6.1f%% %6.1f%% | %6.1f%% | %s\n", dist_name(c.dist), c.p, c.m,
                static_cast<long long>(c.budget), c.imbalanced ? "imb" : "even", c.capped ? "yes" : "no", c.search, s.m / batches,
                s.static_name.c_str(), s.tokens / s.t_static, 100.0 * (s.t_static / s.ideal - 1.0), 100.0 * (s.t_static / s.fill - 1.0), gain(s.t_rule), gain(s.t_sched), gain(s.t_order8),
                gain(s.t_order64), gain(s.t_ceiling), gain(s.t_balanced), s.step_names.c_str());
    std::fflush(stdout);
  }
  return 0;
}
