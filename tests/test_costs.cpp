// costs/: the one cost model. The time of each compute action (B is BI + BW unless the stage
// gives its own), the bytes and time of each transfer (the output of the lower stage of the
// boundary, latency + bytes / bandwidth), the per-micro-batch scale and the full table, and
// check_cost_model's rejections, each naming the field.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"

using namespace ppsched;

namespace {

Action act(Op op, std::int32_t stage, std::int32_t mb) { return Action{op, stage, mb, 0}; }

// Three stages with times and sizes of their own, all exactly representable.
CostModel three_stages() {
  CostModel c;
  c.unit = "ms";
  c.stages = {StageCost{1.0, 2.0, 0.5, 16.0, 100.0}, StageCost{1.5, 2.5, 0.75, 32.0, 200.0},
              StageCost{2.0, 3.0, 1.0, 64.0, 0.0}};
  c.link.latency = 0.25;
  c.link.bandwidth = 400.0;
  return c;
}

}  // namespace

TEST_CASE("uniform_costs: one entry for every stage, free communication, its unit", "[costs]") {
  const CostModel c = uniform_costs(1.0, 2.0, 3.0, "ms");
  CHECK(c.unit == "ms");
  REQUIRE(c.stages.size() == 1);
  CHECK(c.link.is_free());
  for (std::int32_t st : {0, 5, 63}) {
    const StageCost s = stage_cost(c, st, 3, 8);
    CHECK(s.forward == 1.0);
    CHECK(s.backward_input == 2.0);
    CHECK(s.backward_weight == 3.0);
  }
  CHECK(compute_time(c, act(Op::B, 7, 0), 8) == 5.0);
  CHECK(transfer_time(c, act(Op::SEND_F, 0, 0), 8) == 0.0);
  CHECK_NOTHROW(check_cost_model(c, 64, 8));
}

TEST_CASE("compute_time: each compute kind's time, B as BI + BW unless the stage gives it", "[costs]") {
  CostModel c = three_stages();
  CHECK(compute_time(c, act(Op::F, 1, 0), 4) == 1.5);
  CHECK(compute_time(c, act(Op::BI, 1, 0), 4) == 2.5);
  CHECK(compute_time(c, act(Op::BW, 1, 0), 4) == 0.75);
  CHECK(compute_time(c, act(Op::B, 1, 0), 4) == 3.25);
  c.stages[1].backward = 2.0;  // a fused backward, cheaper than its halves
  CHECK(compute_time(c, act(Op::B, 1, 0), 4) == 2.0);
  CHECK(compute_time(c, act(Op::BI, 1, 0), 4) == 2.5);  // the split halves keep their times
  CHECK(compute_time(c, act(Op::B, 0, 0), 4) == 2.5);   // other stages unchanged
  // Communication actions take no compute time.
  for (Op op : {Op::SEND_F, Op::RECV_F, Op::SEND_B, Op::RECV_B}) CHECK(compute_time(c, act(op, 1, 0), 4) == 0.0);
}

TEST_CASE("a transfer moves the lower stage's output, in latency + bytes / bandwidth", "[costs]") {
  const CostModel c = three_stages();
  // Boundary 0|1: stage 0's output, both ways (the gradient has the activation's size).
  CHECK(transfer_bytes(c, act(Op::SEND_F, 0, 0), 4) == 100.0);
  CHECK(transfer_bytes(c, act(Op::RECV_F, 1, 0), 4) == 100.0);
  CHECK(transfer_bytes(c, act(Op::SEND_B, 1, 0), 4) == 100.0);
  CHECK(transfer_bytes(c, act(Op::RECV_B, 0, 0), 4) == 100.0);
  // Boundary 1|2: stage 1's.
  CHECK(transfer_bytes(c, act(Op::SEND_F, 1, 2), 4) == 200.0);
  CHECK(transfer_bytes(c, act(Op::RECV_B, 1, 2), 4) == 200.0);
  CHECK(transfer_bytes(c, act(Op::RECV_F, 2, 2), 4) == 200.0);
  CHECK(transfer_bytes(c, act(Op::SEND_B, 2, 2), 4) == 200.0);
  CHECK(transfer_time(c, act(Op::SEND_F, 0, 0), 4) == 0.25 + 100.0 / 400.0);
  CHECK(transfer_time(c, act(Op::RECV_B, 1, 3), 4) == 0.25 + 200.0 / 400.0);
}

TEST_CASE("a per-micro-batch scale multiplies every time and size; a table overrides both", "[costs]") {
  CostModel c = three_stages();
  c.stages[2].backward = 4.0;
  c.microbatch_scale = {1.0, 2.0, 0.5};
  CHECK_NOTHROW(check_cost_model(c, 3, 3));
  const StageCost s = stage_cost(c, 2, 1, 3);
  CHECK(s.forward == 4.0);
  CHECK(s.backward_input == 6.0);
  CHECK(s.backward_weight == 2.0);
  CHECK(s.activation_bytes == 128.0);
  CHECK(s.output_bytes == 0.0);
  REQUIRE(s.backward.has_value());
  CHECK(*s.backward == 8.0);
  CHECK(compute_time(c, act(Op::F, 0, 2), 3) == 0.5);
  CHECK(transfer_bytes(c, act(Op::SEND_F, 0, 1), 3) == 200.0);

  // The full table: stage-major, index stage * microbatches + mb; the scale is ignored.
  CostModel t;
  t.microbatch_scale = {10.0, 10.0};
  for (std::int32_t st = 0; st < 2; ++st) {
    for (std::int32_t mb = 0; mb < 2; ++mb) t.per_microbatch.push_back(StageCost{1.0 + 10 * st + mb, 1.0, 1.0, 0.0, 8.0 * (mb + 1)});
  }
  CHECK_NOTHROW(check_cost_model(t, 2, 2));
  CHECK(compute_time(t, act(Op::F, 0, 0), 2) == 1.0);
  CHECK(compute_time(t, act(Op::F, 0, 1), 2) == 2.0);
  CHECK(compute_time(t, act(Op::F, 1, 0), 2) == 11.0);
  CHECK(compute_time(t, act(Op::F, 1, 1), 2) == 12.0);
  CHECK(transfer_bytes(t, act(Op::SEND_F, 0, 1), 2) == 16.0);
}

TEST_CASE("stage_cost outside the model's sizes is an error, not a read past the tables", "[costs]") {
  const CostModel c = three_stages();
  CHECK_THROWS_WITH(stage_cost(c, 3, 0, 4), Catch::Contains("has no costs for stage 3, micro-batch 0"));
  CHECK_THROWS_WITH(stage_cost(c, -1, 0, 4), Catch::Contains("has no costs for stage -1"));
  CHECK_THROWS_WITH(stage_cost(c, 0, 4, 4), Catch::Contains("micro-batch 4"));
  CostModel scaled = c;
  scaled.microbatch_scale = {1.0, 1.0};
  CHECK_THROWS_AS(stage_cost(scaled, 0, 2, 4), error);
  // RECV_F of stage 0 has no lower stage.
  CHECK_THROWS_AS(transfer_bytes(c, act(Op::RECV_F, 0, 0), 4), error);
}

TEST_CASE("check_cost_model names the field it rejects", "[costs]") {
  const CostModel good = three_stages();
  CHECK_NOTHROW(check_cost_model(good, 3, 4));
  CHECK_THROWS_WITH(check_cost_model(good, 4, 4), Catch::Contains("has 3 stage costs for a schedule of 4 stages"));

  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* field;
    void (*spoil)(CostModel&);
  };
  const std::vector<Case> cases = {
      {"stages[1].forward", [](CostModel& c) { c.stages[1].forward = -1.0; }},
      {"stages[0].backward_input", [](CostModel& c) { c.stages[0].backward_input = std::nan(""); }},
      {"stages[2].backward_weight", [](CostModel& c) { c.stages[2].backward_weight = std::numeric_limits<double>::infinity(); }},
      {"stages[2].activation_bytes", [](CostModel& c) { c.stages[2].activation_bytes = -0.5; }},
      {"stages[0].output_bytes", [](CostModel& c) { c.stages[0].output_bytes = -8.0; }},
      {"stages[1].backward", [](CostModel& c) { c.stages[1].backward = -2.0; }},
      {"link.latency", [](CostModel& c) { c.link.latency = -0.1; }},
      {"link.bandwidth", [](CostModel& c) { c.link.bandwidth = 0.0; }},
      {"weight_memory_fraction", [](CostModel& c) { c.weight_memory_fraction = -0.5; }},
      {"weight_memory_fraction", [](CostModel& c) { c.weight_memory_fraction = std::numeric_limits<double>::infinity(); }},
      {"fb_overlap", [](CostModel& c) { c.fb_overlap = -0.25; }},
      {"microbatch_scale", [](CostModel& c) { c.microbatch_scale = {1.0, 1.0}; }},
      {"microbatch_scale[3]", [](CostModel& c) { c.microbatch_scale = {1.0, 1.0, 1.0, -1.0}; }},
      {"per_microbatch", [](CostModel& c) { c.per_microbatch.assign(11, StageCost{}); }},
      {"per_microbatch[5] (stage 1, micro-batch 1)",
       [](CostModel& c) {
         c.per_microbatch.assign(12, StageCost{});
         c.per_microbatch[5].forward = -1.0;
       }},
  };
  for (const Case& k : cases) {
    CostModel c = good;
    k.spoil(c);
    INFO(k.field);
    CHECK_THROWS_WITH(check_cost_model(c, 3, 4), Catch::Contains(k.field));
    CHECK_THROWS_AS(check_cost_model(c, 3, 4), error);
  }
  // Infinite bandwidth is free transfers, allowed; NaN bandwidth is not.
  CostModel free_link = good;
  free_link.link.bandwidth = inf;
  CHECK_NOTHROW(check_cost_model(free_link, 3, 4));
  CostModel nan_link = good;
  nan_link.link.bandwidth = nan;
  CHECK_THROWS_WITH(check_cost_model(nan_link, 3, 4), Catch::Contains("link.bandwidth"));
  // The bounds of the two fractions are allowed, and a BI that holds more than its F left
  // (weight_memory_fraction above 1, as the libtorch adapter's) is a cost model too.
  CostModel edges = good;
  edges.weight_memory_fraction = 1.0;
  edges.fb_overlap = 1.0;
  CHECK_NOTHROW(check_cost_model(edges, 3, 4));
  edges.weight_memory_fraction = 2.0;
  CHECK_NOTHROW(check_cost_model(edges, 3, 4));
}

TEST_CASE("finite costs whose sums overflow are rejected, naming the largest value", "[costs]") {
  CostModel c = three_stages();
  c.stages[1].forward = std::numeric_limits<double>::max() / 2;
  CHECK_THROWS_WITH(check_cost_model(c, 3, 4),
                    Catch::Contains("times add up past the largest double") && Catch::Contains("stages[1].forward"));
  CostModel bytes = three_stages();
  bytes.stages[2].activation_bytes = std::numeric_limits<double>::max() / 2;
  CHECK_THROWS_WITH(check_cost_model(bytes, 3, 4),
                    Catch::Contains("activation bytes add up") && Catch::Contains("stages[2].activation_bytes"));
}

TEST_CASE("every compute action pays the fixed cost per action once, every transfer the fixed cost per transfer", "[costs][overhead]") {
  CostModel c = three_stages();
  c.fixed_costs.action = 0.125;
  c.fixed_costs.transfer = 0.5;
  CHECK(compute_time(c, act(Op::F, 0, 0), 1) == 1.0 + 0.125);
  CHECK(compute_time(c, act(Op::BI, 0, 0), 1) == 2.0 + 0.125);
  CHECK(compute_time(c, act(Op::BW, 0, 0), 1) == 0.5 + 0.125);
  CHECK(compute_time(c, act(Op::B, 0, 0), 1) == 2.5 + 0.125);  // one action: the fixed cost once
  CHECK(transfer_time(c, act(Op::SEND_F, 0, 0), 1) == 0.25 + 100.0 / 400.0 + 0.5);
  CHECK(transfer_time(c, act(Op::RECV_B, 0, 0), 1) == 0.25 + 100.0 / 400.0 + 0.5);
  CHECK_NOTHROW(check_cost_model(c, 3, 4));
  c.fixed_costs.action = -1.0;
  try {
    check_cost_model(c, 3, 4);
    FAIL("a negative fixed_costs.action passed");
  } catch (const ppsched::error& e) {
    CHECK_THAT(e.what(), Catch::Contains("(at fixed_costs.action)"));
  }
  c.fixed_costs.action = 0.0;
  c.fixed_costs.transfer = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(check_cost_model(c, 3, 4), Catch::Contains("(at fixed_costs.transfer)"));
  c.fixed_costs.transfer = 0.0;
  c.fixed_costs.step = -0.5;
  CHECK_THROWS_WITH(check_cost_model(c, 3, 4), Catch::Contains("(at fixed_costs.step)"));
}
