// The planner as a library (ppsched/plan/): models cut per placement, the partition -> cost
// model bridge, static and activation bytes per rank, family comparison and the recommendation,
// the search entry, the family records' properties, and the errors. Expected values are
// derived here from the inputs, not copied from a run.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/plan/plan.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/sim/analytic.hpp"

using namespace ppsched;
using namespace ppsched::plan;

namespace {

// A chain of `n` layers; layer i costs (1 + i % 3) forward, twice that backward (BI and BW
// equal), holds `param` parameter bytes, `act` stored bytes and hands `out` bytes on.
Profile chain(int n, double param = 1000.0, double act = 100.0, double out = 10.0) {
  std::vector<Layer> layers;
  for (int i = 0; i < n; ++i) {
    const double f = 1.0 + i % 3;
    layers.push_back(Layer{"layer " + std::to_string(i), f, f, f, param, act, out});
  }
  Profile p;
  p.graph = LayerGraph(std::move(layers));
  p.time_unit = "ms";
  return p;
}

const ScheduleResult& named(const PlanResult& plan, std::string_view name) {
  for (const ScheduleResult& r : plan.schedules) {
    if (r.name == name) return r;
  }
  FAIL("no schedule " << name);
  throw;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("every family's record says what its generated schedules show", "[plan][family]") {
  for (const FamilyInfo& f : schedule_families) {
    INFO(f.name);
    for (std::int32_t p = 1; p <= 5; ++p) {
      for (std::int32_t m = 1; m <= 12; ++m) {
        for (std::int32_t v = 1; v <= 4; ++v) {
          const ScheduleRequest r{p, m, v};
          bool built = true;
          Schedule s;
          try {
            s = make_schedule(f.name, r);
          } catch (const error&) {
            built = false;
          }
          INFO("p=" << p << " m=" << m << " v=" << v);
          CHECK(accepts(f.name, r) == built);
          CHECK(f.rule_allows(r) == built);
          if (!built) continue;
          // The chunk rule: a family with its own count builds only that, and chunks_for says so.
          CHECK(f.chunks_for(v) == v);
          if (f.chunks != 0) CHECK(v == f.chunks);
          // The placement kind is the schedule's placement.
          const std::vector<std::int32_t> placement =
              f.placement == PlacementKind::v_shape ? v_shape_placement(p)
              : f.placement == PlacementKind::looped ? looped_placement(p, v)
                                                     : one_stage_per_rank_placement(p);
          CHECK(s.placement == placement);
          CHECK(s.split_backward == f.split_backward);
          bool backward = false, pairs = false;
          for (const auto& program : s.programs) {
            for (const Action& a : program) {
              backward = backward || (is_compute(a.op) && a.op != Op::F);
              pairs = pairs || a.group != 0;
            }
          }
          CHECK(backward == f.training);
          if (m >= 2 * p && p > 1) CHECK(pairs == f.overlapped_pairs);
        }
      }
    }
  }
  // A family with its own chunk count answers with it whatever is asked.
  CHECK(family_info("zb-v").chunks_for(4) == 2);
  CHECK(family_info("DualPipeV").chunks_for(1) == 2);
  CHECK(family_info("Interleaved1F1B").chunks_for(3) == 3);
  CHECK(family_info("1f1b").chunks_for(3) == 1);
  CHECK(placement_kind_name(family_info("looped-bfs").placement) == "looped");
}

TEST_CASE("a family's in-flight bound is what validate() counts", "[plan][family]") {
  for (const FamilyInfo& f : schedule_families) {
    if (f.peak_in_flight == nullptr) continue;
    INFO(f.name);
    for (std::int32_t p = 1; p <= 5; ++p) {
      for (std::int32_t m = 1; m <= 10; ++m) {
        const ScheduleRequest r{p, m, 1};
        if (!accepts(f.name, r)) continue;
        const ValidationReport report = validate(make_schedule(f.name, r));
        REQUIRE(report.ok());
        for (std::int32_t s = 0; s < p; ++s) {
          const std::int32_t bound = f.peak_in_flight(p, m, s);
          CHECK(analytic_peak_in_flight(f.name, p, m, s) == bound);
          // Inference frees as it goes; validate() counts what no backward releases.
          if (bound >= 0 && f.training) CHECK(report.memory[static_cast<std::size_t>(s)].peak_in_flight == bound);
        }
      }
    }
  }
}

TEST_CASE("per_rank_cost_model: v chunks share a rank's costs, no transfer at the V's turn", "[plan][model]") {
  // 0.25 latency and 50 bytes at 200 bytes per unit: 0.5 per transfer.
  const PlanModel model = per_rank_cost_model(StageCost{4.0, 6.0, 2.0, 0.0, 50.0}, Interconnect{0.25, 200.0});
  CHECK_FALSE(model.has_bytes);
  CHECK(model.layers == 0);
  const std::vector<std::int32_t> v = v_shape_placement(3);  // 0 1 2 2 1 0
  const Partition p = model.partition(v);
  REQUIRE(p.stages.size() == 6);
  for (std::size_t s = 0; s < 6; ++s) {
    CHECK(p.stages[s].rank == v[s]);
    CHECK(p.stages[s].forward == 2.0);
    CHECK(p.stages[s].backward_input == 3.0);
    CHECK(p.stages[s].backward_weight == 1.0);
    CHECK(p.stages[s].compute_time == 6.0);
    const bool turn_or_last = s == 2 || s == 5;
    CHECK(p.stages[s].send_time == (turn_or_last ? 0.0 : 0.5));
  }
  // Bottleneck: comm in + compute + comm out, the first stage that has the largest.
  CHECK(p.bottleneck == 0.5 + 6.0 + 0.5);
  CHECK(p.bottleneck_stage == 1);
  // The rest of the Partition, consistent with the stages: a stage's share is its position.
  CHECK(p.order == std::vector<std::size_t>{0, 1, 2, 3, 4, 5});
  CHECK(p.boundaries == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6});
  CHECK(p.layers_of(4) == std::vector<std::size_t>{4});
  // Times 6.5, 7, 6.5, 6.5, 7, 6.5 (the turn at stage 2 sends nothing, stage 3 receives nothing).
  CHECK(p.mean_time == Approx(40.0 / 6.0).epsilon(1e-15));
  CHECK(p.imbalance == Approx(7.0 / (40.0 / 6.0)).epsilon(1e-15));
  CHECK_THAT(cut_text(p), Catch::StartsWith("partition (uniform per-rank costs; a rank's v chunks cost 1/v each), 6 stages\n"
                                            "  stage 0 rank 0 layers 0-0 (stage 0): F 2 BI 3 BW 1 comm 0.5 static 0 B\n"));
  CHECK_THAT(cut_text(p), Catch::EndsWith("  bottleneck 7 on stage 1\n"));
}

TEST_CASE("graph_model's cut is the partitioner's, on the placement's ranks", "[plan][model]") {
  Profile profile = chain(12);
  profile.link = Interconnect{0.25, 20.0};
  const PlanModel model = graph_model(profile, "chain", {.ranks = 3, .microbatches = 6});
  const std::vector<std::int32_t> v = v_shape_placement(3);  // 0 1 2 2 1 0
  const Partition p = model.partition(v);
  REQUIRE(p.stages.size() == 6);
  CHECK(p.method == "exact min-bottleneck");
  CHECK(p.order.size() == 12);
  REQUIRE(p.boundaries.size() == 7);
  double total = 0.0;
  for (std::size_t s = 0; s < 6; ++s) {
    CHECK(p.stages[s].rank == v[s]);
    CHECK(p.boundaries[s] == p.stages[s].begin);
    CHECK(p.boundaries[s + 1] == p.stages[s].end);
    CHECK(p.stages[s].time == (p.stages[s].compute_time + p.stages[s].recv_time) + p.stages[s].send_time);
    total += p.stages[s].time;
  }
  // The V's turn: nothing crosses a link between stages 2 and 3.
  CHECK(p.stages[2].send_time == 0.0);
  CHECK(p.stages[3].recv_time == 0.0);
  CHECK(p.stages[1].send_time > 0.0);
  CHECK(p.mean_time == total / 6.0);
  CHECK(p.imbalance == p.bottleneck / p.mean_time);
  CHECK(p.bottleneck == p.stages[p.bottleneck_stage].time);
}

TEST_CASE("cost_model_of: the partition's cut time is every transfer's time", "[plan][costs]") {
  Profile profile = chain(8);
  profile.link = Interconnect{0.25, 20.0};  // a 10-byte output: 0.25 + 0.5 per cut
  const PlanModel model = graph_model(profile, "chain", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  const Partition p = model.partition(one_stage_per_rank_placement(4));
  const CostModel c = cost_model_of(p, {"ms", 0.25});
  CHECK(c.unit == "ms");
  CHECK(c.weight_memory_fraction == 0.25);
  REQUIRE(c.stages.size() == 4);
  for (std::size_t s = 0; s < 4; ++s) {
    const PartitionStage& st = p.stages[s];
    CHECK(c.stages[s].forward == st.forward);
    CHECK(c.stages[s].activation_bytes == st.activation_bytes);
    CHECK(st.send_time == (s < 3 ? 0.75 : 0.0));
    // A SEND_F of stage s takes exactly the cut time.
    if (s < 3) CHECK(transfer_time(c, Action{Op::SEND_F, static_cast<std::int32_t>(s), 0, 0}, 8) == st.send_time);
  }
  // Scaled, with transfers left out (ppsched-bubbles' synthetic stages move no bytes).
  const CostModel ms = cost_model_of(p, {.unit = "ms", .weight_memory_fraction = 0.5, .time_scale = 4.0, .transfers = false});
  CHECK(ms.link.is_free());
  for (std::size_t s = 0; s < 4; ++s) {
    CHECK(ms.stages[s].backward_weight == 4.0 * p.stages[s].backward_weight);
    CHECK(ms.stages[s].output_bytes == p.stages[s].send_bytes);
  }
  // A free machine keeps a free link, which the search recognises.
  CHECK(cost_model_of(graph_model(chain(8), "free", {.ranks = 4, .optimizer_state_factor = 1.0}).partition(one_stage_per_rank_placement(4))).link.is_free());
  CHECK_THAT(error_of([&] { (void)cost_model_of(p, {.time_scale = 0.0}); }), Catch::Contains("PlanCostOptions::time_scale"));
}

TEST_CASE("static and activation bytes per rank add up to the peak memory", "[plan][memory]") {
  const double param = 1000.0, act = 100.0;
  const PlanModel model = graph_model(chain(8, param, act), "chain",
                                      {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 8.0,
                                       .method = PartitionMethod::uniform});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  request.families = {"1f1b", "zb-v"};
  const PlanResult plan = compare_families(model, request);
  REQUIRE(plan.schedules.size() == 2);
  // Uniform: two layers per rank (one per stage of the V).
  for (const ScheduleResult& r : plan.schedules) {
    INFO(r.name);
    REQUIRE(r.valid);
    for (std::size_t k = 0; k < 4; ++k) {
      CHECK(r.static_bytes[k] == 8.0 * 2 * param);
      CHECK(r.peak_memory_bytes[k] == r.static_bytes[k] + r.peak_activation_bytes[k]);
    }
  }
  // 1F1B keeps p - r micro-batches on rank r, each two layers' activations: 1 M_B.
  const ScheduleResult& f = named(plan, "1f1b");
  for (std::size_t k = 0; k < 4; ++k) {
    CHECK(f.peak_activations[k] == static_cast<double>(4 - k));
    CHECK(f.peak_activation_bytes[k] == (4.0 - static_cast<double>(k)) * 2 * act);
  }
  // ZB-V's chunks count half an M_B each (one layer of the rank's two).
  const ScheduleResult& v = named(plan, "zb-v");
  CHECK(v.chunks == 2);
  CHECK(v.virtual_stages == 8);
  const std::vector<double> weights = chunk_weights(v.schedule);
  CHECK(std::all_of(weights.begin(), weights.end(), [](double w) { return w == 0.5; }));
  const Partition cut = model.partition(v.schedule.placement);
  CHECK(static_bytes_per_rank(cut, 4) == v.static_bytes);
}

TEST_CASE("compare_families: uniform stages give the textbook makespans, the fastest fitting is recommended",
          "[plan][compare]") {
  const double f = 1.0, b = 2.0, w = 1.0;
  const std::int32_t p = 4, m = 8;
  const PlanModel model = per_rank_cost_model(StageCost{f, b, w, 0.0, 0.0});
  PlanRequest request;
  request.ranks = p;
  request.microbatches = m;
  const PlanResult plan = compare_families(model, request);
  CHECK(plan.skipped.empty());  // m is a multiple of p: every family accepts
  CHECK(plan.schedules.size() == schedule_families.size());
  // GPipe and 1F1B: (m + p - 1) (F + B + W).
  CHECK(named(plan, "gpipe").makespan == Approx((m + p - 1) * (f + b + w)));
  CHECK(named(plan, "1f1b").makespan == Approx((m + p - 1) * (f + b + w)));
  // Every closed form that holds is the simulated idle of every rank (free links, uniform ranks).
  for (const ScheduleResult& r : plan.schedules) {
    INFO(r.name);
    const FamilyInfo& info = family_info(r.name);
    if (!r.analytic_idle_per_rank) {
      CHECK((info.bubble == nullptr || !analytic_bubble(r.name, p, m, r.chunks, f, b, w).holds));
      continue;
    }
    if (info.bubble->measured_against == "makespan") {
      for (const double busy : r.busy) CHECK(r.makespan - busy == Approx(*r.analytic_idle_per_rank).margin(1e-9));
    }
  }
  // The recommendation is the fastest valid training schedule (ties: the smaller peak).
  const ScheduleResult* best = plan.recommended_schedule();
  REQUIRE(best != nullptr);
  for (const ScheduleResult& r : plan.schedules) {
    if (r.training && r.valid) CHECK(best->makespan <= r.makespan * (1.0 + 1e-9));
  }
  CHECK(best->training);
  // Plain values: the same request plans the same, and the text names every schedule.
  CHECK(compare_families(model, request) == plan);
  CHECK(plan.partition == model.partition(one_stage_per_rank_placement(p)));
  const std::string text = to_string(plan);
  for (const ScheduleResult& r : plan.schedules) CHECK(text.find(to_string(r)) != std::string::npos);
  CHECK(text.find("recommended: " + best->name + " (" + plan.recommended.reason + ")") != std::string::npos);
  CHECK(cut_text(plan.partition).find("stage 3 rank 3") != std::string::npos);

  // Under a cap of 2 M_B, only schedules whose peak is at most 2 are candidates.
  request.cap.microbatches = 2.0;
  const PlanResult capped = compare_families(model, request);
  const ScheduleResult* fit = capped.recommended_schedule();
  for (const ScheduleResult& r : capped.schedules) {
    const double peak = *std::max_element(r.peak_activations.begin(), r.peak_activations.end());
    CHECK(r.fits == (peak <= 2.0 + 1e-9));
    if (!r.fits) CHECK_THAT(r.fit_problem, Catch::Contains("M_B") && Catch::Contains("> cap 2"));
    if (fit != nullptr && r.fits && r.training) CHECK(fit->makespan <= r.makespan * (1.0 + 1e-9));
  }
  if (fit == nullptr) {
    CHECK_THAT(capped.recommended.reason, Catch::Contains("no schedule fits"));
  } else {
    CHECK(fit->fits);
  }
}

TEST_CASE("recommend: ties go to the smaller peak; a faster schedule that does not fit is named", "[plan][compare]") {
  const auto result = [](std::string name, double makespan, double peak, bool fits, std::string problem = "") {
    ScheduleResult r;
    r.name = std::move(name);
    r.valid = true;
    r.makespan = makespan;
    r.peak_activations = {peak};
    r.fits = fits;
    r.fit_problem = std::move(problem);
    return r;
  };
  std::vector<ScheduleResult> rs{result("a", 10.0, 4.0, true), result("b", 10.0, 3.0, true),
                                 result("c", 8.0, 9.0, false, "needs 9 M_B on rank 0 > cap 5")};
  const Recommendation rec = recommend(rs, true);
  REQUIRE(rec.index);
  CHECK(*rec.index == 1);
  CHECK(rec.reason == "c is " + percent_of(2.0 / 10.0) + " faster but needs 9 M_B on rank 0 > cap 5");
  rs[2].fits = true;
  CHECK(*recommend(rs, false).index == 2);
  CHECK(recommend(std::vector<ScheduleResult>{}, false).reason.find("no valid training schedule") == 0);
}

TEST_CASE("a family the model cannot be cut for is skipped with the partitioner's reason", "[plan][compare]") {
  const PlanModel model = graph_model(chain(6), "six layers", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  request.families = {"1f1b", "zb-v"};  // zb-v needs 8 stages
  const PlanResult plan = compare_families(model, request);
  REQUIRE(plan.schedules.size() == 1);
  REQUIRE(plan.skipped.size() == 1);
  CHECK(plan.skipped[0].name == "zb-v");
  CHECK(plan.skipped[0].cannot_cut);
  CHECK(plan.skipped[0].chunks == 2);
  CHECK_THAT(plan.skipped[0].reason, Catch::Contains("8 stages (4 ranks x 2 chunks)") && Catch::Contains("6 layers"));
  // A rule the request breaks: skipped by `all`, in the family's words.
  request.families.clear();
  request.microbatches = 6;  // interleaved needs a multiple of 4
  const PlanResult all = compare_families(per_rank_cost_model(StageCost{}), request);
  const auto it = std::find_if(all.skipped.begin(), all.skipped.end(),
                               [](const SkippedSchedule& s) { return s.name == "interleaved-1f1b"; });
  REQUIRE(it != all.skipped.end());
  CHECK_FALSE(it->cannot_cut);
  CHECK(it->reason == why_rejected("interleaved-1f1b", ScheduleRequest{4, 6, 2}));
  CHECK(why_rejected("1f1b", ScheduleRequest{4, 6, 1}).empty());
}

TEST_CASE("family_schedules: what compare_families evaluates, built and cut, for a tool of its own", "[plan][compare]") {
  const PlanModel model = graph_model(chain(6), "six layers", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  request.families = {"zb-v", "interleaved-1f1b", "1f1b"};  // zb-v needs 8 stages; interleaved too
  request.chunks = 1;  // interleaved with one chunk: one stage per rank, cut like 1f1b
  const FamilySchedules f = family_schedules(model, request);
  REQUIRE(f.built.size() == 2);
  CHECK(f.built[0].family->name == "interleaved-1f1b");  // the order asked for
  CHECK(f.built[1].family->name == "1f1b");
  for (const FamilySchedule& s : f.built) {
    CHECK(s.chunks == 1);
    CHECK(s.partition.stages.size() == static_cast<std::size_t>(s.schedule.stages()));
    CHECK(s.schedule == make_schedule(s.family->name, ScheduleRequest{4, 8, 1}));
    CHECK(s.partition == model.partition(s.schedule.placement));
  }
  REQUIRE(f.skipped.size() == 1);
  CHECK(f.skipped[0].name == "zb-v");
  CHECK(f.skipped[0].cannot_cut);
  // compare_families evaluates exactly these, with the same reasons for the rest.
  const PlanResult plan = compare_families(model, request);
  REQUIRE(plan.schedules.size() == f.built.size());
  for (std::size_t i = 0; i < f.built.size(); ++i) {
    CHECK(plan.schedules[i].schedule == f.built[i].schedule);
    const ScheduleResult alone = evaluate_schedule(f.built[i].schedule, model, f.built[i].partition, request);
    CHECK(plan.schedules[i].makespan == alone.makespan);
    CHECK(plan.schedules[i].peak_memory_bytes == alone.peak_memory_bytes);
    CHECK(plan.schedules[i].timeline == alone.timeline);
  }
  CHECK(plan.skipped == f.skipped);
  // Named families keep their own rules: one that breaks its rule is an error, not a skip.
  request.families = {"interleaved-1f1b"};
  request.chunks = 2;
  request.microbatches = 6;
  CHECK_THROWS_WITH(family_schedules(model, request), Catch::Contains("interleaved"));
  request.families = {"no-such-family"};
  CHECK_THROWS_AS(family_schedules(model, request), error);
}

TEST_CASE("a profile's measured weight_bytes give each stage its share kept for BW", "[plan][memory]") {
  std::vector<Layer> measured;
  for (const auto& [name, kept, weight] : {std::tuple{"a", 80.0, 160.0}, std::tuple{"b", 100.0, 50.0}, std::tuple{"c", 100.0, 150.0}}) {
    Layer l;
    l.name = name;
    l.forward = 2.0;
    l.activation_bytes = kept;
    l.weight_bytes = weight;
    measured.push_back(l);
  }
  Profile p;
  p.rows = 8;
  p.graph = LayerGraph::chain(std::move(measured));
  // Per stage: summed over the stage's layers, over its activation bytes; the first stage's
  // BI has no input gradient to compute and leaves F's whole activation to BW (1).
  const PlanModel model = graph_model(p, "weights", {.ranks = 2, .microbatches = 4});
  Partition cut = model.partition(one_stage_per_rank_placement(2));
  REQUIRE(cut.stages.size() == 2);
  for (const PartitionStage& s : cut.stages) REQUIRE(s.weight_bytes.has_value());
  const CostModel cost = cost_model_of(cut);
  double kept = 0.0, weight = 0.0;
  for (std::size_t l = cut.stages[1].begin; l < cut.stages[1].end; ++l) {
    kept += p.graph.layer(l).activation_bytes;
    weight += *p.graph.layer(l).weight_bytes;
  }
  CHECK(cost.stages[0].weight_memory_fraction == std::optional<double>(1.0));
  CHECK(cost.stages[1].weight_memory_fraction.value_or(-1.0) == Approx(weight / kept));
  // A layer without it leaves its stage on the model's share.
  Profile partly = p;
  std::vector<Layer> layers(partly.graph.layers().begin(), partly.graph.layers().end());
  layers.back().weight_bytes.reset();
  partly.graph = LayerGraph::chain(std::move(layers));
  const PlanModel partly_model = graph_model(partly, "partly", {.ranks = 2, .microbatches = 4});
  CHECK_FALSE(cost_model_of(partly_model.partition(one_stage_per_rank_placement(2))).stages[1].weight_memory_fraction.has_value());
}

TEST_CASE("a profile's boundary_bytes come off a stage's stored activation only at a cut", "[plan][memory]") {
  std::vector<Layer> measured;
  for (const auto& [name, kept, weight, boundary] :
       {std::tuple{"a", 80.0, 160.0, 16.0}, std::tuple{"b", 100.0, 50.0, 20.0}, std::tuple{"c", 100.0, 150.0, 30.0}}) {
    // What BI leaves for BW loses its own term, here a quarter of the activation's.
    Layer l;
    l.name = name;
    l.forward = 2.0;
    l.activation_bytes = kept;
    l.weight_bytes = weight;
    l.boundary_bytes = boundary;
    l.boundary_weight_bytes = boundary / 4.0;
    measured.push_back(l);
  }
  Profile p;
  p.rows = 8;
  p.graph = LayerGraph::chain(measured);
  Profile without = p;
  for (Layer& l : measured) {
    l.boundary_bytes.reset();
    l.boundary_weight_bytes.reset();
  }
  without.graph = LayerGraph::chain(measured);
  const PlanModel model = graph_model(p, "boundary", {.ranks = 2, .microbatches = 4});
  const PlanModel plain_model = graph_model(without, "plain", {.ranks = 2, .microbatches = 4});
  const Partition cut = model.partition(one_stage_per_rank_placement(2));
  const Partition plain_cut = plain_model.partition(one_stage_per_rank_placement(2));
  REQUIRE(cut.stages.size() == 2);
  REQUIRE(cut.stages[0].end == plain_cut.stages[0].end);  // the term does not move the cut
  const CostModel cost = cost_model_of(cut), plain_cost = cost_model_of(plain_cut);
  const std::size_t last = cut.stages[0].end - 1;
  const double term = *p.graph.layer(last).boundary_bytes;
  // The stage before the cut keeps its last layer's boundary_bytes less, for F and for BW; the
  // last stage, which no cut follows, keeps its layers' sum.
  CHECK(cost.stages[0].activation_bytes == plain_cost.stages[0].activation_bytes - term);
  CHECK(cost.stages[1].activation_bytes == plain_cost.stages[1].activation_bytes);
  CHECK(cost.stages[1].weight_memory_fraction == plain_cost.stages[1].weight_memory_fraction);
  CHECK(cost.stages[0].weight_memory_fraction == std::optional<double>(1.0));  // the first stage's BI computes nothing
  CHECK(stage_cost_of(cut.stages[0]).activation_bytes == cut.stages[0].activation_bytes);
  CHECK(cut.stages[0].weight_bytes.value_or(-1.0) == *plain_cut.stages[0].weight_bytes - term / 4.0);
  CHECK(cut.stages[1].weight_bytes == plain_cut.stages[1].weight_bytes);
  // Without the field, a profile prices as it always has: the stages' sums.
  double sum = 0.0;
  for (std::size_t l = plain_cut.stages[0].begin; l < plain_cut.stages[0].end; ++l) sum += p.graph.layer(l).activation_bytes;
  CHECK(plain_cost.stages[0].activation_bytes == sum);
}

TEST_CASE("bad plan input says which field and what would work", "[plan][errors]") {
  const PlanModel model = per_rank_cost_model(StageCost{});
  PlanRequest r;
  r.ranks = 0;
  CHECK_THAT(error_of([&] { (void)compare_families(model, r); }),
             Catch::Contains("PlanRequest") && Catch::Contains("at least 1"));
  r = {};
  r.weight_memory_fraction = -0.25;
  CHECK_THAT(error_of([&] { (void)compare_families(model, r); }), Catch::Contains("PlanRequest::weight_memory_fraction"));
  r = {};
  r.cap.total_bytes = -1.0;
  CHECK_THAT(error_of([&] { (void)compare_families(model, r); }), Catch::Contains("PlanRequest::cap.total_bytes"));
  r = {};
  r.families = {"2f2b"};
  CHECK_THAT(error_of([&] { (void)compare_families(model, r); }), Catch::Contains("unknown family '2f2b'") &&
                                                                       Catch::Contains("zb-v"));
  r = {};
  r.microbatches = 6;
  r.ranks = 4;
  r.families = {"interleaved-1f1b"};  // named: the family's rule is an error
  CHECK_THAT(error_of([&] { (void)compare_families(model, r); }), Catch::Contains("multiple"));
  CHECK_THAT(error_of([&] { (void)compare_families(PlanModel{}, PlanRequest{}); }),
             Catch::Contains("PlanModel::partition"));
  CHECK_THAT(error_of([] { (void)graph_model(chain(4), "x", {.ranks = 0, .optimizer_state_factor = 1.0}); }), Catch::Contains("GraphModelOptions"));
  CHECK_THAT(error_of([] { (void)per_rank_cost_model(StageCost{1.0, NAN, 1.0}); }),
             Catch::Contains("per_rank.backward_input"));
  // A partition cut for another placement.
  const Schedule s = make_schedule("zb-v", {4, 8, 2});
  CHECK_THAT(error_of([&] {
               (void)evaluate_schedule(s, model, model.partition(one_stage_per_rank_placement(4)), PlanRequest{});
             }),
             Catch::Contains("model.partition(schedule.placement)"));
}

TEST_CASE("search_plan is never slower than the fastest family that fits", "[plan][search]") {
  Profile profile = chain(16);
  profile.link = Interconnect{0.1, 100.0};
  const PlanModel model = graph_model(profile, "uneven chain", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  for (const double cap : {std::numeric_limits<double>::infinity(), 3.0}) {
    PlanRequest request;
    request.ranks = 4;
    request.microbatches = 8;
    request.cap.microbatches = cap;
    const PlanResult families = compare_families(model, request);
    const SearchedPlan searched = search_plan(model, request);
    INFO("cap " << (std::isinf(cap) ? -1.0 : cap));
    REQUIRE(searched.plan.schedules.size() == 1);
    const ScheduleResult& pick = searched.plan.schedules.front();
    CHECK(pick.valid);
    CHECK(pick.fits);
    CHECK(searched.plan.recommended.index == std::optional<std::size_t>(0));
    CHECK_FALSE(searched.search.candidates.empty());
    CHECK(searched.search.why == searched.plan.recommended.reason);
    for (const ScheduleResult& r : families.schedules) {
      if (r.training && r.valid && r.fits) CHECK(pick.makespan <= r.makespan * (1.0 + 1e-9));
    }
  }
}

TEST_CASE("one cap type: every MemoryCap limit applies in compare_families; infinity is none; a cap that cannot apply is refused", "[plan][issue38]") {
  const Profile profile = chain(8);
  const PlanModel model = graph_model(profile, "chain", {.ranks = 4, .microbatches = 8});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  request.families = {"gpipe", "1f1b"};
  const PlanResult free = compare_families(model, request);
  // Infinity in every field is no cap: the same plan as the default cap.
  PlanRequest none = request;
  none.cap = MemoryCap{.microbatches = std::numeric_limits<double>::infinity(),
                       .activation_bytes = std::numeric_limits<double>::infinity(),
                       .total_bytes = std::numeric_limits<double>::infinity()};
  CHECK(compare_families(model, none) == free);
  // Activation bytes per rank: below any stored activation nothing fits, and the reason says so.
  PlanRequest tight = request;
  tight.cap.rank_activation_bytes = std::vector<double>(4, 1.0);
  const PlanResult starved = compare_families(model, tight);
  CHECK_FALSE(starved.recommended.index);
  for (const ScheduleResult& r : starved.schedules) {
    CHECK_FALSE(r.fits);
    CHECK_THAT(r.fit_problem, Catch::Contains("of activations on rank") && Catch::Contains("> cap"));
  }
  tight.cap.rank_activation_bytes = std::vector<double>(3, 1.0);
  CHECK_THAT(error_of([&] { (void)compare_families(model, tight); }), Catch::Contains("PlanRequest::cap.rank_activation_bytes"));
  // A cut keeps to bytes only; plan_devices to one cap for every device.
  const std::vector<std::int32_t> placement{0, 1, 2, 3};
  CutRequest cut(placement);
  cut.cap.microbatches = 2.0;
  CHECK_THAT(error_of([&] { (void)model.partition(cut); }), Catch::Contains("CutRequest::cap"));
  CHECK_THAT(error_of([&] { (void)plan_devices(profile, 4, 16, MemoryCap{.rank_total_bytes = {1e9, 1e9}}, {}); }),
             Catch::Contains("cap.rank_total_bytes"));
}

TEST_CASE("search_plan under a byte cap: each placement's own parameters count, so the pick fits", "[plan][search]") {
  // Heavy first and last layers: the V puts both on rank 0, so rank 0 holds more parameters
  // than with one stage per rank. Taking the one-stage-per-rank bytes off the cap (as the
  // planner once did) let the search pick a V schedule that broke the cap on rank 0.
  GraphBuilder layers;
  layers.then({"embed", 1.0, 0.5, 0.5, 4e8, 2e7, 1.6e7});
  for (int i = 0; i < 14; ++i) layers.then({"block " + std::to_string(i), 2.0, 2.0, 1.5, 2e8, 2e8, 1.6e7});
  layers.then({"head", 3.0, 3.0, 1.0, 4e8, 4e8, 0.0});
  Profile profile;
  profile.graph = layers.build();
  profile.link = Interconnect{0.02, 25e6};
  const PlanModel model = graph_model(profile, "heavy ends", {.ranks = 4, .microbatches = 16, .optimizer_state_factor = 8.0});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 16;
  // A cap between the V's and one-stage-per-rank's rank-0 parameters plus what they store.
  const std::vector<double> flat = static_bytes_per_rank(model.partition(one_stage_per_rank_placement(4)), 4);
  const std::vector<double> vee = static_bytes_per_rank(model.partition(v_shape_placement(4)), 4);
  REQUIRE(vee[0] > flat[0]);
  request.cap.total_bytes = 11e9;
  const SearchedPlan searched = search_plan(model, request);
  REQUIRE(searched.plan.schedules.size() == 1);
  const ScheduleResult& pick = searched.plan.schedules.front();
  INFO(to_string(pick));
  CHECK(pick.fits);
  for (std::size_t r = 0; r < 4; ++r) CHECK(pick.peak_memory_bytes[r] <= 11e9 * (1.0 + 1e-9));
  const PlanResult families = compare_families(model, request);
  for (const ScheduleResult& r : families.schedules) {
    if (r.training && r.valid && r.fits) CHECK(pick.makespan <= r.makespan * (1.0 + 1e-9));
  }
  // Below the parameters alone: nothing, and the reason says so.
  request.cap.total_bytes = flat[0] / 2.0;
  const SearchedPlan none = search_plan(model, request);
  CHECK(none.plan.schedules.empty());
  CHECK_FALSE(none.plan.recommended.index);
  CHECK_THAT(none.plan.recommended.reason,
             Catch::Contains("parameters with optimizer state alone need " + bytes_text(flat[0]) + " on rank 0"));
}

TEST_CASE("objectives: span and memory within a bound pick by their measure; bad ones are refused",
          "[plan][objective]") {
  Profile profile = chain(16);
  profile.link = Interconnect{0.1, 100.0};
  const PlanModel model = graph_model(profile, "uneven chain", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  const PlanResult by_makespan = compare_families(model, request);
  const ScheduleResult* fastest = by_makespan.recommended_schedule();
  REQUIRE(fastest != nullptr);
  const auto peak = [](const ScheduleResult& r) {
    return *std::max_element(r.peak_activations.begin(), r.peak_activations.end());
  };
  // The default objective is the makespan, and results do not depend on it being spelled out.
  PlanRequest spelled = request;
  spelled.objective = Objective{ObjectiveKind::makespan};
  CHECK(compare_families(model, spelled) == by_makespan);

  request.objective.kind = ObjectiveKind::span;
  const PlanResult by_span = compare_families(model, request);
  CHECK(by_span.schedules == by_makespan.schedules);  // the objective only ranks
  const ScheduleResult* shortest = by_span.recommended_schedule();
  REQUIRE(shortest != nullptr);
  CHECK(shortest->max_rank_span <= fastest->max_rank_span);
  for (const ScheduleResult& r : by_span.schedules) {
    if (!r.training || !r.valid || !r.fits) continue;
    INFO(r.name);
    double longest = 0.0;  // the span is the longest of the ranks' own
    for (const double s : r.span) longest = std::max(longest, s);
    CHECK(r.max_rank_span == longest);
    CHECK(shortest->max_rank_span <= r.max_rank_span);
  }
  CHECK_THAT(by_span.recommended.reason, Catch::Contains("longest rank span"));

  // Memory within a bound 20% above the fastest: within it, nothing needs less than the pick.
  const double bound = fastest->makespan * 1.2;
  request.objective = Objective{ObjectiveKind::memory, bound};
  const PlanResult by_memory = compare_families(model, request);
  const ScheduleResult* least = by_memory.recommended_schedule();
  REQUIRE(least != nullptr);
  CHECK(least->makespan <= bound);
  CHECK(peak(*least) <= peak(*fastest));
  for (const ScheduleResult& r : by_memory.schedules) {
    if (!r.training || !r.valid || !r.fits || r.makespan > bound) continue;
    INFO(r.name);
    CHECK(peak(*least) <= peak(r));
  }
  // The search takes the request's objective.
  const SearchedPlan searched = search_plan(model, request);
  REQUIRE(searched.plan.schedules.size() == 1);
  CHECK(searched.plan.schedules.front().makespan <= bound * (1.0 + 1e-9));
  CHECK(peak(searched.plan.schedules.front()) <= peak(*least) + 1e-9);
  // A bound below every schedule: nothing is recommended, by either.
  request.objective.makespan_bound = fastest->makespan / 2.0;
  const PlanResult none = compare_families(model, request);
  CHECK_FALSE(none.recommended.index);
  CHECK_THAT(none.recommended.reason, Catch::Contains("no schedule finishes within") && Catch::Contains(fastest->name));
  const SearchedPlan none_searched = search_plan(model, request);
  CHECK(none_searched.plan.schedules.empty());
  CHECK_THAT(none_searched.plan.recommended.reason, Catch::Contains("within makespan"));

  request.objective = Objective{ObjectiveKind::memory, -1.0};
  CHECK_THAT(error_of([&] { (void)compare_families(model, request); }),
             Catch::Contains("PlanRequest::objective.makespan_bound"));
  request.objective = Objective{static_cast<ObjectiveKind>(7)};
  CHECK_THAT(error_of([&] { (void)compare_families(model, request); }), Catch::Contains("ObjectiveKind::makespan"));
}

// ------------------------------------------------------------------ issue 24: the planner's edges

namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

// `params[i]` parameter bytes in layer i, F = BI = BW = 1 per sample, 1 KiB activations.
Profile layers_with_params(const std::vector<double>& params) {
  std::vector<Layer> layers;
  for (std::size_t i = 0; i < params.size(); ++i) {
    layers.push_back(Layer{"layer " + std::to_string(i), 1.0, 1.0, 1.0, params[i], 1024.0, 1024.0});
  }
  Profile p;
  p.graph = LayerGraph(std::move(layers));
  p.time_unit = "ms";
  return p;
}

}  // namespace

TEST_CASE("plan_devices: a cap no split of one pipeline size meets is a result, not an error",
          "[plan][devices][issue24]") {
  // 8 layers of 1 GiB on 4 devices of 5 GiB: p = 1 needs 8 GiB, which no cut of one stage
  // meets; the partitioner threw "no split ... fits" out of plan_devices for it.
  Profile model = layers_with_params(std::vector<double>(8, GiB));
  model.devices = {Device{1.0, 5 * GiB}};
  DevicePlanOptions o;
  o.optimizer_state_factor = 1.0;
  o.all_reduce_link = Interconnect{};
  for (const double cap : {std::numeric_limits<double>::infinity(), 5 * GiB}) {
    INFO("cap " << (std::isinf(cap) ? -1.0 : cap));
    DevicePlan plan;
    REQUIRE_NOTHROW(plan = plan_devices(model, 4, 16, MemoryCap{.total_bytes = cap}, o));
    REQUIRE(plan.chosen);
    CHECK(plan.chosen->pipeline > 1);
    CHECK(plan.chosen->peak_memory_bytes <= 5 * GiB);
    REQUIRE(!plan.per_pipeline.empty());
    CHECK_THAT(plan.per_pipeline.front(), Catch::StartsWith("p=1 x d=4: nothing fits the memory cap"));
    CHECK_THAT(plan.per_pipeline.front(), Catch::Contains("8 GiB"));
  }
  // Devices nothing fits: the documented result, chosen empty and the least need named.
  model.devices = {Device{1.0, 1 * GiB}};
  DevicePlan none;
  REQUIRE_NOTHROW(none = plan_devices(model, 4, 16, {}, o));
  CHECK_FALSE(none.chosen);
  CHECK_THAT(none.reason, Catch::Contains("no split fits the memory cap"));
  CHECK_THAT(none.reason, Catch::Contains("needs 2"));
}

TEST_CASE("plan_devices: the memory cap reaches the partitioner, so a fitting cut is found",
          "[plan][devices][issue24]") {
  // Layers of 3, 1, 1, 1 GiB on a 2-stage pipeline under a 3.5 GiB cap. The time-optimal cut
  // (2 | 2) needs 4 GiB on stage 0; the cut (1 | 3) is slower and fits with 3 GiB a stage.
  // Before the fix the partitioner never saw the cap and nothing fitted.
  const Profile model = layers_with_params({3 * GiB, GiB, GiB, GiB});
  DevicePlanOptions o;
  o.optimizer_state_factor = 1.0;
  o.pipeline_sizes = {2};
  o.families = {"1f1b"};
  o.all_reduce_link = Interconnect{};
  const DevicePlan uncapped = plan_devices(model, 2, 2, {}, o);
  REQUIRE(uncapped.chosen);
  CHECK(uncapped.chosen->peak_memory_bytes > 3.5 * GiB);  // the time-optimal cut
  const DevicePlan plan = plan_devices(model, 2, 2, MemoryCap{.total_bytes = 3.5 * GiB}, o);
  INFO(to_string(plan));
  REQUIRE(plan.chosen);
  CHECK(plan.chosen->family == &family_info("1f1b"));
  CHECK(plan.chosen->peak_memory_bytes <= 3.5 * GiB);
  CHECK(plan.chosen->peak_memory_bytes >= 3 * GiB);
  CHECK(plan.chosen->step_time > uncapped.chosen->step_time);
  // A cap the time-optimal cut meets changes nothing.
  const DevicePlan roomy = plan_devices(model, 2, 2, MemoryCap{.total_bytes = 4.5 * GiB}, o);
  REQUIRE(roomy.chosen);
  CHECK(roomy.chosen->step_time == uncapped.chosen->step_time);
  CHECK(roomy.chosen->peak_memory_bytes == uncapped.chosen->peak_memory_bytes);
}

TEST_CASE("a step time that is not finite is an error naming the link, not a plan", "[plan][devices][issue24]") {
  const Profile model = layers_with_params(std::vector<double>(8, GiB));
  DevicePlanOptions o;
  o.optimizer_state_factor = 1.0;
  o.all_reduce_link = Interconnect{0.0, 1e-300};  // 1 GiB takes 1e309: beyond a double
  const std::string why = error_of([&] { (void)plan_devices(model, 4, 16, {}, o); });
  CHECK_THAT(why, Catch::Contains("all-reduce"));
  CHECK_THAT(why, Catch::Contains("bandwidth"));
  CHECK_THAT(why, !Catch::Contains("inf"));
  CHECK_THROWS_WITH(all_reduce_time(GiB, AllReduceModel{4, Interconnect{0.0, 1e-300}, AllReduceAlgorithm::ring}),
                    Catch::Contains("not finite") && Catch::Contains("link.bandwidth"));
  CHECK_THROWS_AS(all_reduce_time(GiB, AllReduceModel{4, Interconnect{1e308, 1.0}, AllReduceAlgorithm::tree}), error);
  // A fast enough link still plans.
  o.all_reduce_link = Interconnect{0.0, 1e9};
  CHECK(plan_devices(model, 4, 16, {}, o).chosen);
}

TEST_CASE("all-zero costs: the explanations say 0.0%, never nan", "[plan][devices][issue24]") {
  std::vector<Layer> layers;
  for (int i = 0; i < 4; ++i) layers.push_back(Layer{"l" + std::to_string(i), 0.0, 0.0, 0.0, 1000.0, 100.0, 10.0});
  Profile model;
  model.graph = LayerGraph(std::move(layers));
  const DevicePlan plan = plan_devices(model, 4, 8, {}, {});
  REQUIRE(plan.chosen);
  CHECK_THAT(to_string(plan), !Catch::Contains("nan"));
  GraphModelOptions g;
  g.ranks = 2;
  g.microbatches = 4;
  PlanRequest request;
  request.ranks = 2;
  request.microbatches = 4;
  const PlanResult result = compare_families(graph_model(model, "zero", g), request);
  REQUIRE(result.recommended.index);
  CHECK_THAT(result.recommended.reason, !Catch::Contains("nan"));
  CHECK_THAT(to_string(result), !Catch::Contains("nan"));
}

TEST_CASE("a finite time near the top of the range is printed as a number, not inf", "[plan][devices][issue24]") {
  // 1 MiB a layer over a link of 1e-300 bytes per unit: each all-reduce takes about 1e306,
  // finite; the reasons multiplied it by 1000 to round it and printed "inf".
  const Profile model = layers_with_params(std::vector<double>(8, 1024.0 * 1024.0));
  DevicePlanOptions o;
  o.pipeline_sizes = {1};
  o.families = {"1f1b"};
  o.all_reduce_link = Interconnect{0.0, 1e-300};
  const DevicePlan plan = plan_devices(model, 2, 2, {}, o);
  REQUIRE(plan.chosen);
  CHECK(std::isfinite(plan.chosen->step_time));
  CHECK_THAT(to_string(plan), !Catch::Contains("inf"));
  CHECK_THAT(to_string(plan), Catch::Contains("e+30"));
}

TEST_CASE("graph_model carries the layers' measured full backward into the stage costs", "[plan]") {
  Profile p = chain(4);
  std::vector<Layer> layers = p.graph.layers();
  for (Layer& l : layers) l.backward = l.backward_input;  // a fused B at half of BI + BW
  p.graph = LayerGraph(std::move(layers));
  const PlanModel model = graph_model(p, "fused", {.ranks = 2, .optimizer_state_factor = 1.0});
  const CostModel cost = cost_model_of(model.partition(one_stage_per_rank_placement(2)));
  for (const StageCost& s : cost.stages) {
    REQUIRE(s.backward.has_value());
    CHECK(*s.backward == s.backward_input);
    CHECK(compute_time(cost, Action{Op::B, 0, 0}, 1) == *cost.stages[0].backward);
  }
}

TEST_CASE("plan_devices prices each micro-batch size from measured points, not a linear scale", "[plan][devices][rows]") {
  // Each layer costs 1 per pass at 32 rows; measured, a 2-row micro-batch costs 0.5, not 1/16:
  // most of a small micro-batch's time is fixed. Linear scaling makes 32 micro-batches of 2
  // rows look nearly bubble-free; the points make them cost 16 x 0.5 = 8x as much work.
  std::vector<Layer> layers;
  for (int i = 0; i < 4; ++i) {
    Layer l{"layer " + std::to_string(i), 1.0, 1.0, 1.0, 1000.0, 100.0, 10.0};
    l.points = {CostPoint{2, 0.5, 0.5, 0.5, std::nullopt, 100.0 / 16, 10.0 / 16},
                CostPoint{32, 1.0, 1.0, 1.0, std::nullopt, 100.0, 10.0}};
    layers.push_back(l);
  }
  Profile measured;
  measured.rows = 32;
  measured.graph = LayerGraph(layers);
  Profile linear = measured;
  for (Layer& l : layers) l.points.clear();
  linear.graph = LayerGraph(layers);
  DevicePlanOptions options;
  options.pipeline_sizes = {2};
  options.families = {"1f1b"};
  const DevicePlan by_points = plan_devices(measured, 2, 64, {}, options);
  const DevicePlan by_scale = plan_devices(linear, 2, 64, {}, options);
  REQUIRE(by_points.chosen);
  REQUIRE(by_scale.chosen);
  CHECK(by_scale.chosen->microbatch_size < 8);
  CHECK(by_points.chosen->microbatch_size >= 16);
  // The 2-row candidate is priced from its point: 4 layers x 3 passes at 0.5 per micro-batch.
  DevicePlanOptions one;
  one.families = {"1f1b"};
  const DevicePlan two_rows = plan_devices(measured, 1, 2, {}, one);
  REQUIRE(two_rows.chosen);
  CHECK(two_rows.chosen->step_time == Approx(6.0));
}

TEST_CASE("the profile's fixed costs per action and transfer reach the planner's prices", "[plan][devices][overhead]") {
  Profile p = chain(4);
  p.fixed_costs.action = 0.5;
  p.fixed_costs.transfer = 0.25;
  const PlanModel model = graph_model(p, "with overheads", {.ranks = 2, .optimizer_state_factor = 1.0});
  CHECK(model.fixed_costs.action == 0.5);
  const CostModel cost = cost_model_of(model.partition(one_stage_per_rank_placement(2)),
                                       plan_cost_options(model, 0.5));
  CHECK(cost.fixed_costs.action == 0.5);
  CHECK(cost.fixed_costs.transfer == 0.25);
  CHECK(cost.fixed_costs.step == 0.0);
  // Free layers at 1 row per micro-batch: without fixed costs 16 micro-batches of 1 row cost
  // the same work as 1 of 16, with less bubble; a fixed cost per action makes few large ones win.
  std::vector<Layer> layers;
  for (int i = 0; i < 4; ++i) layers.push_back(Layer{"l" + std::to_string(i), 0.01, 0.01, 0.01, 0, 0, 0});
  Profile tiny;
  tiny.rows = 1;
  tiny.graph = LayerGraph(layers);
  DevicePlanOptions o;
  o.pipeline_sizes = {2};
  o.families = {"1f1b"};
  const DevicePlan free_actions = plan_devices(tiny, 2, 16, {}, o);
  tiny.fixed_costs.action = 1.0;
  const DevicePlan costly_actions = plan_devices(tiny, 2, 16, {}, o);
  REQUIRE(free_actions.chosen);
  REQUIRE(costly_actions.chosen);
  CHECK(free_actions.chosen->microbatches > 2);
  CHECK(costly_actions.chosen->microbatches <= 2);
}

TEST_CASE("the profile's fixed cost per step is paid once in every price the planner makes", "[plan][devices][overhead]") {
  Profile p = chain(4);
  p.rows = 1;
  DevicePlanOptions o;
  o.pipeline_sizes = {2};
  o.families = {"1f1b"};
  const DevicePlan without = plan_devices(p, 2, 8, {}, o);
  p.fixed_costs.step = 3.0;
  const PlanModel model = graph_model(p, "with a step cost", {.ranks = 2});
  CHECK(model.fixed_costs.step == 3.0);
  CHECK(cost_model_of(model.partition(one_stage_per_rank_placement(2)), plan_cost_options(model, 0.5)).fixed_costs.step == 3.0);
  const DevicePlan with = plan_devices(p, 2, 8, {}, o);
  REQUIRE(without.chosen);
  REQUIRE(with.chosen);
  // Once per step, whatever the micro-batch count: the same pick, 3 later.
  CHECK(with.chosen->microbatches == without.chosen->microbatches);
  CHECK(with.chosen->step_time == Approx(without.chosen->step_time + 3.0));
  CHECK(with.chosen->pipeline_time == Approx(without.chosen->pipeline_time + 3.0));
  // The split's own costs leave it out of the simulation, since the split adds it outside.
  const CostModel split_costs = cost_model_of(*with.chosen, p, o);
  CHECK(split_costs.fixed_costs.step == 0.0);
  CHECK(simulate(with.chosen->schedule, split_costs).makespan + 3.0 == Approx(with.chosen->pipeline_time).epsilon(1e-12));
}

TEST_CASE("recalibrate_plan: a measured run twice as slow as profiled re-plans from the refit", "[plan][calibrate]") {
  // The run: 1F1B on 2 ranks, 8 micro-batches of 4 rows, of a profile whose every time is
  // really twice what it says, with a fixed cost per action it does not know.
  Profile profile = chain(4);
  profile.rows = 4;
  Profile truth = profile;
  std::vector<Layer> doubled = profile.graph.layers();
  for (Layer& l : doubled) {
    l.forward *= 2;
    l.backward_input *= 2;
    l.backward_weight *= 2;
  }
  truth.graph = LayerGraph(doubled);
  truth.fixed_costs.action = 0.5;
  const PlanModel real = graph_model(truth, "truth", {.ranks = 2, .microbatches = 8, .optimizer_state_factor = 1.0});
  const Schedule run = make_schedule("1f1b", ScheduleRequest{2, 8, 1});
  CostModel real_cost = cost_model_of(real.partition(run.placement), plan_cost_options(real, 0.5));
  real_cost.unit = "ms";
  const Timeline measured = simulate(run, real_cost).timeline;
  profile.time_unit = "ms";
  DevicePlanOptions o;
  o.families = {"1f1b", "gpipe"};
  const Recalibration r = recalibrate_plan(profile, measured, 4, 2, 32, {}, o);
  CHECK(r.fit.predicted_before < r.fit.measured_makespan);
  CHECK(r.fit.predicted_after == Approx(r.fit.measured_makespan).epsilon(1e-9));
  REQUIRE(r.fit.scale.size() == 2);
  CHECK(r.fit.scale[0][0] > 2.0);  // twice as slow, and each span holds the fixed cost too
  REQUIRE(r.before.chosen);
  REQUIRE(r.after.chosen);
  CHECK(r.after.chosen->step_time > 1.9 * r.before.chosen->step_time);
  // Every layer of stage 0 took stage 0's F ratio.
  CHECK(r.profile.graph.layer(0).forward == Approx(profile.graph.layer(0).forward * r.fit.scale[0][0]));
  Profile one_layer = chain(1);
  one_layer.rows = 4;
  CHECK_THROWS_WITH(recalibrate_plan(one_layer, measured, 4, 2, 32, {}, o),
                    Catch::Contains("2 stages, the profile 1 layers"));
}

TEST_CASE("the pipeline's size enters once: a request that disagrees with the model names both fields",
          "[plan][issue26]") {
  Profile profile = chain(8);
  profile.devices = {Device{1.0, 1e9}};
  const PlanModel model = graph_model(profile, "capped", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  CHECK(model.ranks == 4);
  CHECK(model.microbatches == 8);
  CHECK(model.device_cap.rank_total_bytes == std::vector<double>(4, 1e9));
  PlanRequest r;
  r.ranks = 2;  // a model built for 4 ranks: this ran silently and dropped the device caps
  r.microbatches = 8;
  for (const std::string& e : {error_of([&] { (void)compare_families(model, r); }),
                               error_of([&] { (void)search_plan(model, r); })}) {
    CHECK_THAT(e, Catch::Contains("PlanRequest::ranks is 2") && Catch::Contains("GraphModelOptions::ranks = 4"));
  }
  r.ranks = 4;
  r.microbatches = 16;
  CHECK_THAT(error_of([&] { (void)compare_families(model, r); }),
             Catch::Contains("PlanRequest::microbatches is 16") && Catch::Contains("GraphModelOptions::microbatches = 8"));
  // A cut over 2 of the 4 ranks is refused rather than made without the caps.
  CHECK_THAT(error_of([&] { (void)model.partition(one_stage_per_rank_placement(2)); }),
             Catch::Contains("uses 2 ranks, but GraphModelOptions::ranks is 4"));
  // The caps apply to the cut it accepts: a cap below one layer's bytes leaves no split.
  profile.devices = {Device{1.0, 10.0}};
  const PlanModel tiny = graph_model(profile, "tiny", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  CHECK_THAT(error_of([&] { (void)tiny.partition(one_stage_per_rank_placement(4)); }), Catch::Contains("memory caps"));
  // A model of any size (per_rank_cost_model) takes any request.
  CHECK(per_rank_cost_model(StageCost{1.0, 1.0, 1.0}).ranks == 0);
}

TEST_CASE("optimizer_state_factor defaults one way everywhere", "[plan][issue26]") {
  CHECK(default_optimizer_state_factor == 8.0);
  CHECK(PartitionCostModel{}.optimizer_state_factor == default_optimizer_state_factor);
  CHECK(GraphModelOptions{}.optimizer_state_factor == default_optimizer_state_factor);
  CHECK(DevicePlanOptions{}.optimizer_state_factor == default_optimizer_state_factor);
  // graph_model's default prices the static bytes with it.
  const PlanModel model = graph_model(chain(4, 1000.0), "default", {.ranks = 2});
  for (const PartitionStage& s : model.partition(one_stage_per_rank_placement(2)).stages) {
    CHECK(s.static_bytes == default_optimizer_state_factor * s.param_bytes);
  }
}

TEST_CASE("the partitioner keeps each family's in-flight counts under device caps", "[plan][issue26]") {
  CHECK(family_in_flight(family_info("gpipe"), 4, 8) == std::vector<double>{8, 8, 8, 8});
  CHECK(family_in_flight(family_info("1f1b"), 4, 8) == std::vector<double>{4, 3, 2, 1});
  CHECK(family_in_flight(family_info("zb-h1"), 4, 2) == std::vector<double>{2, 2, 2, 1});
  CHECK(family_in_flight(family_info("zb-h2"), 4, 8) == std::vector<double>{7, 3, 2, 1});  // 2p-1, then 1F1B's
  CHECK(family_in_flight(family_info("forward-only"), 4, 8) == std::vector<double>{0, 0, 0, 0});
  CHECK(family_in_flight(family_info("zb-v"), 4, 8).empty());  // measured per schedule
  CHECK(family_in_flight(family_info("interleaved-1f1b"), 4, 8).empty());
  // One layer per stage of 1000 parameter bytes and 100 activation bytes under a 1500-byte
  // cap: 1F1B's first stage keeps 4 micro-batches (1400 bytes) and fits; GPipe's keeps all 8
  // (1800 bytes), which no cut meets.
  Profile profile = chain(4);
  profile.devices = {Device{1.0, 1500.0}};
  const PlanModel model = graph_model(profile, "capped", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  const std::vector<std::int32_t> placement = one_stage_per_rank_placement(4);
  const std::vector<double> gpipe = family_in_flight(family_info("gpipe"), 4, 8);
  const std::vector<double> one_f_one_b = family_in_flight(family_info("1f1b"), 4, 8);
  CHECK_NOTHROW(model.partition({placement, one_f_one_b}));
  CHECK_THAT(error_of([&] { (void)model.partition({placement, gpipe}); }), Catch::Contains("memory caps"));
  // compare_families still prices GPipe (on 1F1B's cut) and finds it does not fit.
  PlanRequest r;
  r.ranks = 4;
  r.microbatches = 8;
  r.families = {"gpipe", "1f1b"};
  const PlanResult plan = compare_families(model, r);
  CHECK_FALSE(named(plan, "gpipe").fits);
  CHECK(named(plan, "1f1b").fits);
}

TEST_CASE("a chosen DeviceSplit carries its schedule and cut, and runs through lower and simulate",
          "[plan][devices][issue26]") {
  std::vector<Layer> layers;
  for (int i = 0; i < 8; ++i) layers.push_back(Layer{"l" + std::to_string(i), 1.0 + i % 3, 1.0, 1.0, 1e6, 1e5, 1e4});
  Profile profile;
  profile.graph = LayerGraph(std::move(layers));
  profile.link = Interconnect{0.01, 1e7};
  profile.time_unit = "ms";
  DevicePlanOptions o;
  o.pipeline_sizes = {2, 4};
  const DevicePlan plan = plan_devices(profile, 4, 16, {}, o);
  REQUIRE(plan.chosen);
  const DeviceSplit& s = *plan.chosen;
  REQUIRE(s.family != nullptr);
  CHECK(s.schedule.ranks == s.pipeline);
  CHECK(s.schedule.microbatches == s.microbatches);
  CHECK(s.schedule.name == s.family->name);
  CHECK(static_cast<std::int32_t>(s.partition.stages.size()) == s.schedule.stages());
  const CostModel costs = cost_model_of(s, profile, o);
  const LoweredSchedule lowered = lower(s.schedule, lower_options_for(costs, s.schedule.stages(), s.schedule.microbatches));
  CHECK(validate(lowered).ok());
  const SimResult sim = simulate(lowered, costs);
  CHECK(sim.makespan == Approx(s.pipeline_time).epsilon(1e-12));
  for (const DeviceSplit& a : plan.alternatives) CHECK(a.schedule.ranks == a.pipeline);
}

TEST_CASE("bytes print one way", "[plan][issue26]") {
  CHECK(bytes_text(100.0) == "100 B");
  CHECK(bytes_text(1536.0) == "1.5 KiB");
  CHECK(bytes_text(6.09711e10) == "56.8 GiB");
  CHECK(bytes_text(std::numeric_limits<double>::infinity()) == "inf B");
  const PlanModel model = graph_model(chain(8, 1e9, 1e8), "big", {.ranks = 4, .microbatches = 8});
  PlanRequest r;
  r.ranks = 4;
  r.microbatches = 8;
  r.families = {"1f1b"};
  const PlanResult plan = compare_families(model, r);
  for (const std::string& text : {to_string(plan), cut_text(plan.partition)}) {
    INFO(text);
    CHECK_THAT(text, Catch::Contains("GiB") && !Catch::Contains("e+"));
  }
}

TEST_CASE("the family record answers accepts and why_not without building a schedule", "[plan][family][issue26]") {
  for (const FamilyInfo& f : schedule_families) {
    for (std::int32_t p = 1; p <= 5; ++p) {
      for (std::int32_t m = 1; m <= 12; ++m) {
        for (std::int32_t v = 1; v <= 4; ++v) {
          const ScheduleRequest r{p, m, v};
          INFO(f.name << " " << to_string(r));
          CHECK(f.accepts(r) == accepts(f.name, r));
          const std::string why = f.why_not(r);
          CHECK(why.empty() == f.accepts(r));
          if (!why.empty()) CHECK(why == error_of([&] { (void)make_schedule(f.name, r); }));
          CHECK(why_rejected(f.name, r) == why);
        }
      }
    }
  }
  CHECK_FALSE(family_info("1f1b").accepts({0, 4, 1}));
  CHECK_THAT(family_info("1f1b").why_not({0, 4, 1}), Catch::Contains("p=1 or more"));
}

TEST_CASE("results, skipped families and search candidates are keyed on the family record", "[plan][issue26]") {
  const PlanModel model = per_rank_cost_model(StageCost{1.0, 1.0, 1.0});
  PlanRequest r;
  r.ranks = 4;
  r.microbatches = 6;  // interleaved-1f1b wants m a multiple of p: skipped
  const PlanResult plan = compare_families(model, r);
  REQUIRE(!plan.schedules.empty());
  for (const ScheduleResult& s : plan.schedules) {
    REQUIRE(s.family != nullptr);
    CHECK(s.family->name == s.name);
  }
  REQUIRE(!plan.skipped.empty());
  for (const SkippedSchedule& s : plan.skipped) {
    REQUIRE(s.family != nullptr);
    CHECK(s.family->name == s.name);
    CHECK(s.reason == s.family->why_not({r.ranks, r.microbatches, s.chunks}));
  }
  const SearchedPlan searched = search_plan(model, r);
  std::size_t keyed = 0;
  for (const Candidate& c : searched.search.candidates) {
    if (c.kind == CandidateKind::greedy || c.kind == CandidateKind::v_block) {
      CHECK(c.family == nullptr);
      continue;
    }
    REQUIRE(c.family != nullptr);
    CHECK_THAT(c.name, Catch::StartsWith(std::string(c.family->name)));
    ++keyed;
  }
  CHECK(keyed > 0);
}

TEST_CASE("one count of stages per rank, one edit distance", "[plan][issue26]") {
  CHECK(stages_per_rank(one_stage_per_rank_placement(3), 3) == std::vector<std::int32_t>{1, 1, 1});
  CHECK(stages_per_rank(v_shape_placement(3), 3) == std::vector<std::int32_t>{2, 2, 2});
  const Schedule looped = make_schedule("interleaved-1f1b", {2, 4, 3});
  CHECK(stages_per_rank(looped.placement, 2) == chunks_per_rank(looped));
  CHECK(stage_weights(looped.placement, 2) == std::vector<double>(6, 1.0 / 3.0));
  CHECK_THAT(error_of([] { (void)stages_per_rank(std::vector<std::int32_t>{0, 2}, 2, "my placement"); }),
             Catch::StartsWith("my placement: stage 1 is placed on rank 2, outside 0..1"));
  // per_rank_cost_model counts a rank's chunks the same way: v chunks cost 1/v each.
  const Partition p = per_rank_cost_model(StageCost{6.0, 6.0, 6.0}).partition(looped.placement);
  for (const PartitionStage& s : p.stages) CHECK(s.forward == 2.0);
  CHECK(edit_distance("microbatches", "micro_batches") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("recalibrate_plan from runs of two shapes recovers the times and the fixed cost per step", "[plan][calibrate]") {
  // The truth: every time twice the profile's, and 1.5 ms per step that no timeline records.
  Profile profile = chain(4);
  profile.rows = 4;
  profile.time_unit = "ms";
  Profile truth = profile;
  std::vector<Layer> doubled = profile.graph.layers();
  for (Layer& l : doubled) {
    l.forward *= 2;
    l.backward_input *= 2;
    l.backward_weight *= 2;
  }
  truth.graph = LayerGraph(doubled);
  truth.fixed_costs.step = 1.5;
  const auto measure = [&](const Schedule& run) {
    const PlanModel real = graph_model(truth, "truth", {.ranks = run.ranks, .microbatches = run.microbatches});
    CostModel cost = cost_model_of(real.partition(run.placement), plan_cost_options(real, 0.5));
    cost.unit = "ms";
    const SimResult sim = simulate(run, cost);
    return MeasuredRun{{sim.timeline, sim.timeline}, 4, {sim.makespan, sim.makespan}};
  };
  DevicePlanOptions o;
  o.families = {"1f1b", "gpipe"};
  const Recalibration r = recalibrate_plan(
      profile, {measure(make_schedule("gpipe", ScheduleRequest{1, 2, 1})), measure(make_schedule("1f1b", ScheduleRequest{2, 8, 1}))},
      2, 32, {}, o);
  REQUIRE(r.fits.size() == 2);
  REQUIRE(r.cuts.size() == 2);
  CHECK(r.profile.fixed_costs.step == Approx(1.5).epsilon(1e-9));
  CHECK(r.profile.fixed_costs.action == Approx(0.0).margin(1e-6));
  for (std::size_t l = 0; l < 4; ++l) {
    CHECK(r.profile.graph.layer(l).forward == Approx(truth.graph.layer(l).forward));
    CHECK(r.profile.graph.layer(l).backward_input == Approx(truth.graph.layer(l).backward_input));
  }
  // A third shape, priced from the recalibrated profile, is the truth's step.
  const Schedule third = make_schedule("gpipe", ScheduleRequest{2, 4, 1});
  const auto price = [&](const Profile& p) {
    const PlanModel m = graph_model(p, "p", {.ranks = 2, .microbatches = 4});
    return simulate(third, cost_model_of(m.partition(third.placement), plan_cost_options(m, 0.5))).makespan;
  };
  CHECK(price(r.profile) == Approx(price(truth)).epsilon(1e-9));
  CHECK_THROWS_WITH(recalibrate_plan(profile, std::vector<MeasuredRun>{}, 2, 32, {}, o), Catch::Contains("no measured run"));

  // A short run whose one step stalled by 2 between two of its 4 actions, beside a long one of
  // 64 actions: the fixed cost per action stays near the long run's (0), not half the stall.
  MeasuredRun stalled = measure(make_schedule("gpipe", ScheduleRequest{1, 2, 1}));
  for (Timeline& t : stalled.steps) {
    for (Span& sp : t.spans) {
      if (sp.start > 0.0) {
        sp.start += 2.0;
        sp.end += 2.0;
      }
    }
  }
  for (double& t : stalled.step_times) t += 2.0;
  const Recalibration mixed =
      recalibrate_plan(profile, {stalled, measure(make_schedule("gpipe", ScheduleRequest{1, 32, 1}))}, 2, 32, {}, o);
  CHECK(mixed.fits[0].after.fixed_costs.action > 0.4);  // the short run alone: 2 / its 3 later actions' share
  CHECK(mixed.profile.fixed_costs.action < 0.01);
}

TEST_CASE("compare_families with memory policies: auto fits a cap no plain family meets, given runs the stages named",
          "[plan][compare][memory]") {
  // Activations dominate: the parameters fit any cap below, the stored activations do not.
  const PlanModel model = graph_model(chain(8, 1000.0, 1e6), "activation-heavy", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  request.families = {"gpipe", "1f1b"};
  const PlanResult plain = compare_families(model, request);
  double least = std::numeric_limits<double>::infinity();
  for (const ScheduleResult& r : plain.schedules) {
    least = std::min(least, *std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end()));
    CHECK_FALSE(r.memory);
  }
  request.cap.total_bytes = 0.75 * least;
  const PlanResult none = compare_families(model, request);
  CHECK_FALSE(none.recommended.index);

  request.memory_policy.mode = MemoryPolicyMode::automatic;
  const PlanResult with = compare_families(model, request);
  INFO(to_string(with));
  REQUIRE(with.recommended.index);
  for (const ScheduleResult& r : with.schedules) {
    REQUIRE(r.memory);
    CHECK(r.memory->chosen);
    CHECK(r.fits);
    CHECK(*std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end()) <= request.cap.total_bytes * (1.0 + 1e-9));
    CHECK(r.memory->plain_peak_bytes > request.cap.total_bytes);
    CHECK_THAT(r.memory->plain_fit_problem, Catch::Contains("> cap"));
    CHECK(r.makespan >= r.memory->plain_makespan * (1.0 - 1e-9));
    REQUIRE(r.memory->stages.size() == 4);
    // Rank 0 holds the most activations, so it must give some up; whatever a stage does, it
    // says on how many micro-batches, with what bytes and at what time.
    CHECK(r.memory->stages[0].policy.kind != MemoryPolicyKind::none);
    for (const StageMemoryCost& s : r.memory->stages) {
      if (s.policy.kind == MemoryPolicyKind::none) continue;
      CHECK(s.saved_bytes > 0.0);
      if (s.policy.recomputes()) CHECK(s.recompute_time > 0.0);
      if (s.policy.recomputes()) CHECK(s.microbatches == 8);
    }
    CHECK(validate(r.schedule).ok());
  }

  request.memory_policy.mode = MemoryPolicyMode::given;
  request.memory_policy.stages = {{0, MemoryPolicy::full_recompute()}, {1, MemoryPolicy::offload(0.5)}};
  request.cap.total_bytes = std::numeric_limits<double>::infinity();
  const PlanResult given = compare_families(model, request);
  const ScheduleResult& f = named(given, "1f1b");
  REQUIRE(f.memory);
  CHECK_FALSE(f.memory->chosen);
  CHECK(f.memory->stages[0].policy == MemoryPolicy::full_recompute());
  CHECK(f.memory->stages[0].recompute_time > 0.0);
  CHECK(f.memory->stages[1].policy == MemoryPolicy::offload(0.5));
  CHECK(f.memory->stages[1].copy_time > 0.0);
  CHECK(f.memory->stages[2].policy == MemoryPolicy::none());
  CHECK(f.peak_memory_bytes[0] < named(plain, "1f1b").peak_memory_bytes[0]);

  request.memory_policy.stages = {{4, MemoryPolicy::full_recompute()}};
  CHECK_THAT(error_of([&] { (void)compare_families(model, request); }),
             Catch::Contains("stage 4") && Catch::Contains("has 4 stages") && Catch::Contains("PlanRequest::memory_policy.stages"));
  CHECK_THAT(error_of([&] { (void)search_plan(model, request); }), Catch::Contains("PlanRequest::memory_policy.mode"));
}

TEST_CASE("layer-wise offload's saves count the checkpoints of the micro-batches whose copies were placed",
          "[plan][compare][memory]") {
  const PlanModel model = graph_model(chain(8, 1000.0, 1e6), "activation-heavy", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  request.families = {"1f1b"};
  request.memory_policy.mode = MemoryPolicyMode::given;
  request.memory_policy.host_link = Interconnect{0.0, 1e12};  // copies that take no time
  // Half a layer's activation recomputed, the rest (the checkpoints) offloaded. The last
  // stage's backward follows its forward at once: no copy of it can hide, so none is placed.
  const MemoryPolicy lwo = MemoryPolicy::layerwise_offload(5e5, 5e5, 1.0);
  request.memory_policy.stages = {{0, lwo}, {3, lwo}};
  const ScheduleResult r = compare_families(model, request).schedules.at(0);
  REQUIRE(r.memory);
  const auto offloads = [&r](std::int32_t stage) {
    std::int32_t n = 0;
    for (const auto& program : r.schedule.programs)
      for (const Action& a : program) n += a.op == Op::OFFLOAD && a.stage == stage;
    return n;
  };
  const StageMemoryCost& first = r.memory->stages[0];
  const StageMemoryCost& last = r.memory->stages[3];
  CHECK(first.microbatches == 8);
  CHECK(last.microbatches == 8);
  REQUIRE(offloads(0) > 0);
  CHECK(first.saved_bytes > 5e5);
  CHECK(offloads(3) == 0);
  CHECK(last.copy_time == 0.0);
  CHECK(last.saved_bytes == Approx(5e5));  // the recomputed part only: its checkpoints stay
}

TEST_CASE("search_plan with memory policies: a candidate over the byte cap climbs its stages' ladders",
          "[plan][search][memory]") {
  const PlanModel model = graph_model(chain(8, 1000.0, 1e6), "activation-heavy", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  const Partition cut = model.partition(one_stage_per_rank_placement(4));
  double act = 0.0;
  for (const PartitionStage& st : cut.stages) act = std::max(act, st.activation_bytes);
  const std::vector<double> fixed = static_bytes_per_rank(cut, 4);
  // Less than one micro-batch's activations on a rank: no plain schedule keeps to it, and
  // layer-wise recomputation (one layer of two held at a time) does.
  request.cap.total_bytes = *std::max_element(fixed.begin(), fixed.end()) + 0.9 * act;
  const SearchedPlan none = search_plan(model, request);
  INFO(none.plan.recommended.reason);
  REQUIRE_FALSE(none.plan.recommended.index);

  request.memory_policy.mode = MemoryPolicyMode::automatic;
  const SearchedPlan with = search_plan(model, request);
  INFO(to_string(with.plan));
  REQUIRE(with.plan.recommended.index == std::optional<std::size_t>(0));
  REQUIRE(with.plan.schedules.size() == 1);
  const ScheduleResult& pick = with.plan.schedules.front();
  REQUIRE(pick.memory);
  CHECK(pick.memory->chosen);
  CHECK(pick.valid);
  CHECK(pick.fits);
  for (const double b : pick.peak_memory_bytes) CHECK(b <= request.cap.total_bytes * (1.0 + 1e-9));
  CHECK(pick.memory->plain_peak_bytes > request.cap.total_bytes);
  CHECK(pick.makespan >= pick.memory->plain_makespan * (1.0 - 1e-9));
  CHECK(std::any_of(pick.memory->stages.begin(), pick.memory->stages.end(),
                    [](const StageMemoryCost& c) { return c.policy.kind != MemoryPolicyKind::none; }));
  CHECK(validate(pick.schedule).ok());
  CHECK_THAT(with.plan.recommended.reason, Catch::Contains("with memory policies") && Catch::Contains("no candidate fits plainly"));
  CHECK(with.search.why == with.plan.recommended.reason);
  // The candidates tried say what the policies gave them.
  CHECK(std::any_of(with.search.candidates.begin(), with.search.candidates.end(),
                    [](const Candidate& c) { return c.note.find("with memory policies: makespan") != std::string::npos; }));
  // As fast as compare_families' best with policies on the families the search also builds
  // on one stage per rank (their cuts are the search's).
  request.families = {"gpipe", "1f1b", "zb-h1"};
  const PlanResult families = compare_families(model, request);
  std::int32_t compared = 0;
  for (const ScheduleResult& r : families.schedules) {
    if (!r.fits || !r.memory || r.memory->partition) continue;
    ++compared;
    CHECK(pick.makespan <= r.makespan * (1.0 + 1e-9));
  }
  CHECK(compared > 0);
  request.families.clear();

  SECTION("a cap the plain winner keeps to: the plain search's answer") {
    request.cap.total_bytes = 1e12;
    PlanRequest plain_request = request;
    plain_request.memory_policy.mode = MemoryPolicyMode::none;
    const SearchedPlan a = search_plan(model, request), b = search_plan(model, plain_request);
    REQUIRE(a.plan.schedules.size() == 1);
    CHECK_FALSE(a.plan.schedules[0].memory);
    CHECK(a.plan == b.plan);
    CHECK(a.search.why == b.search.why);
  }
  SECTION("policies rank by the makespan, and need a budget of candidates") {
    request.objective.kind = ObjectiveKind::span;
    CHECK_THAT(error_of([&] { (void)search_plan(model, request); }),
               Catch::Contains("memory policies are chosen for the makespan") && Catch::Contains("PlanRequest::objective"));
    request.objective = {};
    request.memory_policy.search_candidates = 0;
    CHECK_THAT(error_of([&] { (void)search_plan(model, request); }), Catch::Contains("search_candidates is 0"));
  }
}

TEST_CASE("each result carries the cut it was priced on, and that cut prices it again to its makespan",
          "[plan][compare][cut]") {
  // Uneven layers, a link that costs, a fixed cost per action: a cut other than the priced one
  // (PlanResult::partition for a V, an even split) would give another makespan.
  Profile profile = chain(16);
  profile.link = Interconnect{0.05, 1e3};
  profile.fixed_costs.action = 0.01;
  const PlanModel model = graph_model(profile, "uneven chain", {.ranks = 4, .microbatches = 8});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  const PlanResult plan = compare_families(model, request);
  INFO(to_string(plan));
  const auto reprice = [&](const ScheduleResult& r) {
    const CostModel costs = cost_model_of(r.partition, plan_cost_options(model, request.weight_memory_fraction));
    const LoweredSchedule lowered = lower(r.schedule, lower_options_for(costs, r.schedule.stages(), r.schedule.microbatches));
    return simulate(lowered, costs).makespan;
  };
  const auto check_cut = [&](const ScheduleResult& r) {
    INFO(r.name);
    REQUIRE(static_cast<std::int32_t>(r.partition.stages.size()) == r.virtual_stages);
    std::size_t next = 0;
    for (std::size_t s = 0; s < r.partition.stages.size(); ++s) {
      CHECK(r.partition.stages[s].begin == next);  // contiguous, in model order, none empty
      CHECK(r.partition.stages[s].end > next);
      next = r.partition.stages[s].end;
      CHECK(r.partition.stages[s].rank == r.schedule.placement[s]);
    }
    CHECK(next == model.layers);
    CHECK(reprice(r) == Approx(r.makespan).epsilon(1e-12));
  };
  std::int32_t several_per_rank = 0;
  for (const ScheduleResult& r : plan.schedules) {
    if (!r.valid || !r.training) continue;
    REQUIRE_FALSE(r.memory);
    check_cut(r);
    if (r.chunks > 1) {
      ++several_per_rank;
      CHECK(r.partition != plan.partition);
    } else {
      CHECK(r.partition.stages.size() == plan.partition.stages.size());
    }
  }
  CHECK(several_per_rank >= 5);  // zb-v, v-half, v-min, dualpipev, interleaved-1f1b, ...
  // The V: rank 0 holds the first and the last stage.
  const ScheduleResult& zbv = named(plan, "zb-v");
  CHECK(zbv.partition.stages.front().rank == 0);
  CHECK(zbv.partition.stages.back().rank == 0);
  CHECK(zbv.partition.stages.back().end == model.layers);

  SECTION("the search's winner, whatever its placement") {
    const SearchedPlan searched = search_plan(model, request);
    REQUIRE(searched.plan.recommended_schedule() != nullptr);
    check_cut(*searched.plan.recommended_schedule());
  }
  SECTION("evaluate_schedule: the partition given") {
    const Schedule s = make_schedule("interleaved-1f1b", {4, 8, 2});
    const Partition cut = model.partition(s.placement);
    CHECK(evaluate_schedule(s, model, cut, request).partition == cut);
  }
}

TEST_CASE("a result priced on a cut made again under the cap carries that cut", "[plan][compare][cut][memory]") {
  // As in test_memory: a heavy first layer leaves no policy room on the family's cut.
  std::vector<Layer> layers(8);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    layers[i] = Layer{"layer " + std::to_string(i), 1.0, 1.0, 1.0, i == 0 ? 500.0 : 100.0, 100.0, 10.0};
  }
  Profile profile;
  profile.graph = LayerGraph(layers);
  profile.time_unit = "ms";
  const PlanModel model = graph_model(profile, "heavy first layer", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  request.families = {"1f1b"};
  request.cap.total_bytes = 650.0;
  request.memory_policy.mode = MemoryPolicyMode::automatic;
  const PlanResult plan = compare_families(model, request);
  INFO(to_string(plan));
  const ScheduleResult& r = plan.schedules.front();
  REQUIRE(r.memory);
  REQUIRE(r.memory->partition);
  CHECK(r.partition == *r.memory->partition);
  CHECK(r.partition.stages[0].end == 1);
  CHECK(plan.partition.stages[0].end == 2);
}

TEST_CASE("a first stage that runs its whole backward in BW is priced so, and only the first", "[plan][devices]") {
  Profile p = chain(4);
  p.rows = 1;
  const PlanModel split = graph_model(p, "split", {.ranks = 2});
  const Partition cut = split.partition(one_stage_per_rank_placement(2));
  const CostModel as_others = cost_model_of(cut, plan_cost_options(split, 0.5));
  p.first_stage_backward_in_bw = true;
  const PlanModel whole = graph_model(p, "whole", {.ranks = 2});
  CHECK(whole.first_stage_backward_in_bw);
  const CostModel first = cost_model_of(cut, plan_cost_options(whole, 0.5));
  REQUIRE(first.stages.size() == 2);
  CHECK(first.stages[0].backward_input == 0.0);
  // No layer has a measured B: BW takes BI + BW.
  CHECK(first.stages[0].backward_weight == as_others.stages[0].backward_input + as_others.stages[0].backward_weight);
  CHECK(first.stages[0].forward == as_others.stages[0].forward);
  CHECK(first.stages[1] == as_others.stages[1]);
  // With a measured B, BW takes it: the fused backward the stage really runs.
  std::vector<Layer> layers = p.graph.layers();
  for (Layer& l : layers) l.backward = 1.5 * l.backward_input;
  p.graph = LayerGraph(std::move(layers));
  const PlanModel measured_b = graph_model(p, "fused", {.ranks = 2});
  const CostModel fused = cost_model_of(measured_b.partition(one_stage_per_rank_placement(2)), plan_cost_options(measured_b, 0.5));
  REQUIRE(fused.stages[0].backward.has_value());
  CHECK(fused.stages[0].backward_weight == *fused.stages[0].backward);
  CHECK(fused.stages[0].backward_input == 0.0);
  CHECK(fused.stages[1].backward_input > 0.0);
  // plan_devices prices it too.
  DevicePlanOptions o;
  o.pipeline_sizes = {2};
  o.families = {"zb-h1"};
  const DevicePlan plan = plan_devices(p, 2, 8, {}, o);
  REQUIRE(plan.chosen);
  CHECK(cost_model_of(*plan.chosen, p, o).stages[0].backward_input == 0.0);
}

TEST_CASE("the profile's concurrent slowdown reaches every price, scaled by the replicas that share the host", "[plan][devices][shared]") {
  Profile p = chain(4);
  p.rows = 1;
  p.fixed_costs.concurrent_slowdown = {1.0, 1.5};
  const PlanModel model = graph_model(p, "shared", {.ranks = 2});
  CHECK(model.fixed_costs.concurrent_slowdown == p.fixed_costs.concurrent_slowdown);
  const CostModel cost = cost_model_of(model.partition(one_stage_per_rank_placement(2)), plan_cost_options(model, 0.5));
  CHECK(cost.fixed_costs.concurrent_slowdown == p.fixed_costs.concurrent_slowdown);
  DevicePlanOptions o;
  o.pipeline_sizes = {2};
  o.families = {"1f1b"};
  const DevicePlan plan = plan_devices(p, 4, 8, {}, o);  // p = 2 x d = 2
  REQUIRE(plan.chosen);
  REQUIRE(plan.chosen->replicas == 2);
  // Two replicas in step: while k ranks of one compute, 2k of the host's do.
  CHECK(cost_model_of(*plan.chosen, p, o).fixed_costs.concurrent_slowdown == std::vector<double>{1.5, 3.0});
  Profile unshared = p;
  unshared.fixed_costs.concurrent_slowdown.clear();
  const DevicePlan free = plan_devices(unshared, 4, 8, {}, o);
  REQUIRE(free.chosen);
  CHECK(plan.chosen->step_time > free.chosen->step_time);
  PlanCostOptions bad = plan_cost_options(model, 0.5);
  bad.fixed_costs.concurrent_slowdown = {0.9};
  CHECK_THROWS_WITH(cost_model_of(model.partition(one_stage_per_rank_placement(2)), bad),
                    Catch::Contains("PlanCostOptions::fixed_costs.concurrent_slowdown[0]"));
}
