// Variable-length batches (ppsched/plan/varlen.hpp): the fit of a micro-batch's costs to its
// sequences' lengths, the split of a batch into micro-batches, the per-micro-batch cost model and
// the per-step plan, and the errors that name the bad input. Built into test_plan's executable
// (tests/meson.build). Expected values are derived here from the model that generated the samples.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/plan/varlen.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/sim/simulate.hpp"

using namespace ppsched;
using namespace ppsched::plan;

namespace {

// The model the samples are drawn from: stage s costs fixed + b x tokens + c x squares, its
// backward twice its forward split 60/40, bytes 1 KB + 20 KB per token.
struct Truth {
  double fixed = 0.05, per_token = 2e-4, per_square = 2e-8;
  [[nodiscard]] StageCost at(std::size_t stage, const MicrobatchShape& s, double noise = 0.0) const {
    const double k = 1.0 + 0.1 * static_cast<double>(stage);
    const double f = k * (fixed + per_token * s.tokens + per_square * s.squares) * (1.0 + noise);
    return StageCost{f, 1.2 * f, 0.8 * f, 1000.0 + 20000.0 * s.tokens, 4000.0 * s.tokens};
  }
};

std::vector<LengthSample> samples_of(const Truth& t, std::size_t stages, const std::vector<std::int64_t>& seq_lengths,
                                     double noise = 0.0) {
  std::vector<LengthSample> out;
  int k = 0;
  for (const std::int64_t len : seq_lengths) {
    for (const std::size_t count : {1, 2, 4, 8}) {
      LengthSample s;
      s.lengths.assign(count, len);
      const double e = noise * ((k++ % 3) - 1.0);  // -noise, 0, +noise in turn
      for (std::size_t st = 0; st < stages; ++st) s.stages.push_back(t.at(st, shape_of(s.lengths), e));
      out.push_back(s);
    }
  }
  return out;
}

// A long-tailed batch: lognormal lengths (Box-Muller over mt19937_64, whose output the standard
// fixes, so the batch is the same with every standard library), clipped to [16, 4096].
std::vector<std::int64_t> long_tailed(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> out;
  const double two_pi = 6.283185307179586;
  while (out.size() < n) {
    const double u1 = (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = static_cast<double>(rng() >> 11) / 9007199254740992.0;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
    out.push_back(std::clamp<std::int64_t>(static_cast<std::int64_t>(std::exp(5.49 + 1.10 * z)), 16, 4096));
  }
  return out;
}

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const ppsched::error& e) {
    return e.what();
  }
  return "(no error)";
}

double makespan_1f1b(const LengthCosts& costs, const std::vector<Microbatch>& mbs) {
  const auto p = static_cast<std::int32_t>(costs.stages.size());
  const Schedule s = make_schedule("1f1b", {.ranks = p, .microbatches = static_cast<std::int32_t>(mbs.size())});
  SimOptions o;
  o.record_timeline = false;
  return simulate(s, length_cost_model(costs, mbs), o).makespan;
}

}  // namespace

TEST_CASE("fit_length_costs recovers the terms that generated the samples", "[varlen]") {
  const Truth t;
  const LengthCosts fit = fit_length_costs(samples_of(t, 3, {128, 512, 2048}));
  REQUIRE(fit.stages.size() == 3);
  REQUIRE(fit.samples == 12);
  for (std::size_t s = 0; s < 3; ++s) {
    const double k = 1.0 + 0.1 * static_cast<double>(s);
    CHECK(fit.stages[s].forward.fixed == Approx(k * t.fixed).epsilon(1e-6));
    CHECK(fit.stages[s].forward.per_token == Approx(k * t.per_token).epsilon(1e-6));
    CHECK(fit.stages[s].forward.per_square == Approx(k * t.per_square).epsilon(1e-6));
    CHECK(fit.stages[s].backward_input.per_square == Approx(1.2 * k * t.per_square).epsilon(1e-6));
    CHECK(fit.stages[s].activation_bytes.fixed == Approx(1000.0).epsilon(1e-6));
    CHECK(fit.stages[s].activation_bytes.per_token == Approx(20000.0).epsilon(1e-9));
    CHECK(fit.stages[s].activation_bytes.per_square == 0.0);
    CHECK_FALSE(fit.stages[s].backward.has_value());
  }
  CHECK(fit.max_relative_residual() < 1e-9);
  // A shape never measured is priced by the same terms.
  const MicrobatchShape mixed = shape_of(std::vector<std::int64_t>{100, 3000, 7});
  CHECK(stage_cost_at(fit.stages[1], mixed).forward == Approx(t.at(1, mixed).forward).epsilon(1e-6));
}

TEST_CASE("fit_length_costs reports how far its fit lies from noisy points", "[varlen]") {
  const LengthCosts fit = fit_length_costs(samples_of(Truth{}, 2, {256, 1024, 4096}, 0.03));
  // +-3% noise: the fit cannot pass through every point, and no point is further than the noise
  // plus what the other points pull the line by.
  CHECK(fit.max_relative_residual() > 0.005);
  CHECK(fit.max_relative_residual() < 0.06);
  CHECK(fit.stages[0].forward.max_residual > 0.0);
  // Bytes carry no noise: still exact.
  CHECK(fit.stages[0].activation_bytes.max_relative_residual < 1e-9);
}

TEST_CASE("fit_length_costs refuses points that cannot determine the terms", "[varlen]") {
  const Truth t;
  // All at one length: sum(len^2) = 512 x tokens.
  CHECK_THAT(message_of([&] { (void)fit_length_costs(samples_of(t, 2, {512})); }),
             Catch::Contains("attention term") && Catch::Contains("two sequence lengths"));
  // One token count in every sample, the squares differing.
  std::vector<LengthSample> same_tokens;
  for (const std::vector<std::int64_t>& ls : {std::vector<std::int64_t>{100, 100}, {200}, {50, 150}}) {
    same_tokens.push_back({ls, {t.at(0, shape_of(ls))}});
  }
  CHECK_THAT(message_of([&] { (void)fit_length_costs(same_tokens); }), Catch::Contains("per-token term is not determined"));
  std::vector<LengthSample> two = samples_of(t, 1, {128, 512});
  two.resize(2);
  CHECK_THAT(message_of([&] { (void)fit_length_costs(two); }), Catch::Contains("2 samples for 3 terms"));
  std::vector<LengthSample> bad = samples_of(t, 1, {128, 512});
  bad[1].lengths[1] = -5;
  CHECK_THAT(message_of([&] { (void)fit_length_costs(bad); }), Catch::Contains("samples[1].lengths[1]") && Catch::Contains("-5"));
  bad = samples_of(t, 2, {128, 512});
  bad[3].stages.pop_back();
  CHECK_THAT(message_of([&] { (void)fit_length_costs(bad); }), Catch::Contains("sample 3 measures 1 stages"));
  bad = samples_of(t, 1, {128, 512});
  bad[2].stages[0].forward = std::nan("");
  CHECK_THAT(message_of([&] { (void)fit_length_costs(bad); }), Catch::Contains("samples[2].stages[0].forward"));
  CHECK_THROWS_AS(fit_length_costs(std::vector<LengthSample>{}), ppsched::error);
}

TEST_CASE("length_samples reads profiles measured at several sizes, one per sequence length", "[varlen]") {
  const Truth t;
  const auto profile_at = [&](std::int64_t len) {
    std::vector<Layer> layers;
    for (std::size_t s = 0; s < 2; ++s) {
      Layer l;
      l.name = "stage " + std::to_string(s);
      for (const double rows : {2.0, 8.0}) {
        const std::vector<std::int64_t> ls(static_cast<std::size_t>(rows), len);
        const StageCost c = t.at(s, shape_of(ls));
        l.points.push_back(CostPoint{rows, c.forward, c.backward_input, c.backward_weight, std::nullopt, c.activation_bytes, c.output_bytes});
      }
      layers.push_back(l);
    }
    Profile p;
    p.graph = LayerGraph(std::move(layers));
    return p;
  };
  std::vector<LengthSample> all = length_samples(profile_at(256), 256);
  REQUIRE(all.size() == 2);
  CHECK(all[1].lengths == std::vector<std::int64_t>(8, 256));
  CHECK_THAT(message_of([&] { (void)fit_length_costs(all); }), Catch::Contains("2 samples"));
  const std::vector<LengthSample> more = length_samples(profile_at(2048), 2048);
  all.insert(all.end(), more.begin(), more.end());
  const LengthCosts fit = fit_length_costs(all);
  CHECK(fit.stages[1].forward.per_square == Approx(1.1 * t.per_square).epsilon(1e-6));
  CHECK_THAT(message_of([&] { (void)length_samples(profile_at(256), 0); }), Catch::Contains("sequence_length = 0"));
}

TEST_CASE("split_batch keeps every sequence once and every micro-batch under its limit", "[varlen]") {
  const LengthCosts fit = fit_length_costs(samples_of(Truth{}, 4, {128, 512, 2048}));
  const std::vector<std::int64_t> lengths = long_tailed(600, 7);
  SplitOptions o;
  o.token_budget = 8192;
  for (const SplitMethod method : {SplitMethod::padded, SplitMethod::packed, SplitMethod::bucketed, SplitMethod::balanced}) {
    INFO(split_method_name(method));
    const Split split = split_batch(lengths, fit, method, o);
    CHECK(split.token_limit == 8192);
    std::vector<int> seen(lengths.size(), 0);
    double tokens = 0.0;
    for (const Microbatch& mb : split.microbatches) {
      REQUIRE_FALSE(mb.sequences.empty());
      CHECK(mb.shape.tokens <= 8192.0);
      std::int64_t real = 0, longest = 0;
      for (const std::size_t i : mb.sequences) {
        ++seen.at(i);
        real += lengths[i];
        longest = std::max(longest, lengths[i]);
      }
      CHECK(mb.tokens == real);
      const bool pads = method == SplitMethod::padded || method == SplitMethod::bucketed;
      CHECK(mb.padded_length == (pads ? longest : 0));
      tokens += static_cast<double>(real);
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
    CHECK(split.tokens == tokens);
    if (method == SplitMethod::packed || method == SplitMethod::balanced) CHECK(split.padding_fraction() == 0.0);
  }
  // Padding in arrival order wastes more than padding within length buckets.
  CHECK(split_batch(lengths, fit, SplitMethod::padded, o).padding_fraction() >
        split_batch(lengths, fit, SplitMethod::bucketed, o).padding_fraction());
}

TEST_CASE("the memory cap gives the tokens a micro-batch may hold", "[varlen]") {
  const LengthCosts fit = fit_length_costs(samples_of(Truth{}, 4, {128, 512, 2048}));
  SplitOptions o;
  // Stage 0 holds 4 micro-batches at 1F1B's peak: 4 x (1000 + 20000 T) <= cap.
  o.cap.activation_bytes = 4.0 * (1000.0 + 20000.0 * 3000.5);
  CHECK(token_limit(fit, o) == 3000);
  o.token_budget = 2000;
  CHECK(token_limit(fit, o) == 2000);
  o.token_budget.reset();
  const std::vector<std::int64_t> lengths{100, 2999, 3001, 5};
  CHECK_THAT(message_of([&] { (void)split_batch(lengths, fit, SplitMethod::packed, o); }),
             Catch::Contains("sequence 2 has 3001 tokens") && Catch::Contains("may hold 3000") && Catch::Contains("lengths[2]"));
  o.cap.activation_bytes = 100.0;
  CHECK_THAT(message_of([&] { (void)split_batch(lengths, fit, SplitMethod::packed, o); }), Catch::Contains("before any token"));
}

TEST_CASE("split_batch names bad batches", "[varlen]") {
  const LengthCosts fit = fit_length_costs(samples_of(Truth{}, 2, {128, 512}));
  SplitOptions o;
  o.token_budget = 1024;
  CHECK_THAT(message_of([&] { (void)split_batch(std::vector<std::int64_t>{}, fit, SplitMethod::packed, o); }), Catch::Contains("the batch is empty"));
  CHECK_THAT(message_of([&] { (void)split_batch(std::vector<std::int64_t>{10, -3}, fit, SplitMethod::padded, o); }),
             Catch::Contains("sequence 1 has length -3"));
  CHECK_THAT(message_of([&] { (void)split_batch(std::vector<std::int64_t>{10, 0}, fit, SplitMethod::padded, o); }),
             Catch::Contains("lengths[1]"));
  CHECK_THAT(message_of([&] { (void)split_batch(std::vector<std::int64_t>{10, 2000}, fit, SplitMethod::bucketed, o); }),
             Catch::Contains("sequence 1 has 2000 tokens"));
  CHECK_THAT(message_of([&] { (void)split_batch(std::vector<std::int64_t>{10}, fit, SplitMethod::packed, SplitOptions{}); }),
             Catch::Contains("packing needs a token count"));
  o.token_budget = 0;
  CHECK_THAT(message_of([&] { (void)split_batch(std::vector<std::int64_t>{10}, fit, SplitMethod::packed, o); }), Catch::Contains("token_budget = 0"));
  // A micro-batch count alone packs to the tokens shared among that many.
  SplitOptions count;
  count.microbatches = 4;
  const Split s = split_batch(std::vector<std::int64_t>{100, 100, 100, 100, 100, 100, 100, 100}, fit, SplitMethod::packed, count);
  CHECK(s.microbatches.size() == 4);
}

TEST_CASE("per-micro-batch costs and the per-step plan", "[varlen]") {
  const LengthCosts fit = fit_length_costs(samples_of(Truth{}, 4, {128, 512, 2048}));
  const std::vector<std::int64_t> lengths = long_tailed(400, 11);
  SplitOptions o;
  o.token_budget = 8192;
  const Split packed = split_batch(lengths, fit, SplitMethod::packed, o);
  const CostModel costs = length_cost_model(fit, packed.microbatches);
  const std::size_t m = packed.microbatches.size();
  REQUIRE(costs.per_microbatch.size() == 4 * m);
  CHECK(costs.per_microbatch[2 * m + 3].forward == Approx(stage_cost_at(fit.stages[2], packed.microbatches[3].shape).forward));
  check_cost_model(costs, 4, static_cast<std::int32_t>(m));

  // The planned step is never slower than 1F1B over the same micro-batches (1F1B is a candidate).
  const SearchResult plan = plan_microbatches(fit, packed.microbatches);
  CHECK(plan.simulation.makespan == Approx(plan.best().makespan));
  CHECK(plan.simulation.makespan <= makespan_1f1b(fit, packed.microbatches) * (1.0 + 1e-12));
  CHECK(plan.costs.per_microbatch.size() >= 4 * m);

  // Padding computes more tokens, so its step is longer than packing's.
  const Split padded = split_batch(lengths, fit, SplitMethod::padded, o);
  CHECK(padded.computed_tokens > packed.computed_tokens);
  CHECK(makespan_1f1b(fit, padded.microbatches) > makespan_1f1b(fit, packed.microbatches));
  // Balanced micro-batches under 1F1B are no slower than first-fit decreasing's.
  const Split balanced = split_batch(lengths, fit, SplitMethod::balanced, o);
  CHECK(makespan_1f1b(fit, balanced.microbatches) <= makespan_1f1b(fit, packed.microbatches));

  // A cap the search holds the schedule to: no candidate fits one micro-batch's bytes.
  StepPlanOptions tight;
  tight.cap.activation_bytes = 1.0;
  CHECK_THROWS_AS(plan_microbatches(fit, packed.microbatches, tight), ppsched::error);
  CHECK_THAT(message_of([&] { (void)length_cost_model(fit, std::vector<Microbatch>{}); }), Catch::Contains("no micro-batches"));
}

TEST_CASE("plan_step orders the micro-batches and is never slower than their given order", "[varlen]") {
  const LengthCosts fit = fit_length_costs(samples_of(Truth{}, 4, {128, 512, 2048}));
  SplitOptions o;
  o.token_budget = 8192;
  const Split packed = split_batch(long_tailed(400, 11), fit, SplitMethod::packed, o);
  // First-fit decreasing's order: its fullest bins first and its emptiest last; and the same
  // micro-batches costliest last, where the drain crosses every stage on the longest one.
  std::vector<Microbatch> worst = packed.microbatches;
  std::stable_sort(worst.begin(), worst.end(), [](const Microbatch& a, const Microbatch& b) { return a.shape.tokens < b.shape.tokens; });
  for (const std::vector<Microbatch>* given : std::vector<const std::vector<Microbatch>*>{&packed.microbatches, &worst}) {
    const std::size_t m = given->size();
    const StepPlan plan = plan_step(fit, *given);
    REQUIRE(plan.order.size() == m);
    std::vector<std::size_t> sorted = plan.order;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t k = 0; k < m; ++k) CHECK(sorted[k] == k);  // a permutation
    REQUIRE(plan.microbatches.size() == m);
    for (std::size_t k = 0; k < m; ++k) CHECK(plan.microbatches[k] == (*given)[plan.order[k]]);
    // Its step is the given order's plan or shorter, and is what the simulator gives its
    // schedule under the reordered micro-batches' own costs.
    CHECK(plan.given_order_makespan == Approx(plan_microbatches(fit, *given).simulation.makespan));
    CHECK(plan.search.simulation.makespan <= plan.given_order_makespan * (1.0 + 1e-12));
    const CostModel costs = evenly_split(length_cost_model(fit, plan.microbatches), 4, static_cast<std::int32_t>(m))(plan.search.schedule.placement);
    SimOptions so;
    so.record_timeline = false;
    CHECK(simulate(plan.search.schedule, costs, so).makespan == Approx(plan.search.simulation.makespan));
    CHECK(plan.orders_tried >= 1);
  }
  // The costliest micro-batch last lengthens the drain: reordering shortens that step.
  const StepPlan fixed = plan_step(fit, worst);
  CHECK(fixed.search.simulation.makespan < fixed.given_order_makespan);

  // Under a cap, the reordered plan keeps to it.
  StepPlanOptions capped;
  capped.cap.activation_bytes = 4.0 * plan_microbatches(fit, worst).best().peak_bytes / 3.0;
  const StepPlan under = plan_step(fit, worst, capped);
  CHECK(under.search.best().peak_bytes <= capped.cap.activation_bytes);
  CHECK(under.search.simulation.makespan <= under.given_order_makespan * (1.0 + 1e-12));
}
