// The pieces of bench/bench_accuracy_torch that are not timing (issue 27, item 4): the
// configuration list is what the bench and docs/accuracy.md say, each model's boundary shapes
// are what its children produce, and the profile the bench builds loads and cuts as the
// planner cuts it. No assertion depends on how fast anything ran.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ppsched/plan/plan.hpp>

#include "../bench/bench_accuracy_torch.hpp"

// After libtorch's headers: glog's CHECK, which they pull in, gives way to Catch's.
#include <catch2/catch.hpp>

TEST_CASE("bench_accuracy_torch: 21 configurations per model, the global batch split exactly", "[torch][accuracy]") {
  const std::vector<bench_torch::ConfigKey> configs = bench_torch::configurations(64);
  CHECK(configs.size() == 21);
  std::map<std::string, int> per_family;
  for (const bench_torch::ConfigKey& c : configs) {
    ++per_family[c.family + (c.ranks == 1 ? "/1" : "/2")];
    CHECK(c.microbatches * c.rows == 64);
    CHECK(c.ranks <= 2);  // no more busy ranks than the 2 cores the figures were taken on
    const ppsched::Schedule s = bench_torch::schedule_of(c.family, c.ranks, c.microbatches);
    CHECK(s.ranks == c.ranks);
    CHECK(s.microbatches == c.microbatches);
  }
  const std::map<std::string, int> expected{{"gpipe/1", 3}, {"1f1b/1", 3}, {"zb-h1/1", 3}, {"gpipe/2", 3},
                                            {"1f1b/2", 3}, {"zb-h1/2", 3}, {"interleaved-1f1b/2", 3}};
  CHECK(per_family == expected);
  CHECK_THROWS_WITH(bench_torch::make_model("lstm"), Catch::Contains("mlp, gpt, conv"));
}

TEST_CASE("bench_accuracy_torch: every model's boundaries, profile and cut", "[torch][accuracy]") {
  torch::set_num_threads(1);
  for (const std::string& name : bench_torch::model_names()) {
    INFO(name);
    const bench_torch::Model m = bench_torch::make_model(name);
    REQUIRE(m.boundary.size() == m.net->size() + 1);
    const torch::Tensor x = m.input(4);
    CHECK(m.input_shape(0, 4) == std::vector<std::int64_t>(x.sizes().begin(), x.sizes().end()));
    {
      const torch::NoGradGuard no_grad;
      torch::nn::Sequential net = m.net;
      const torch::Tensor y = net->forward(m.input(3));
      CHECK(m.output_shape(m.net->size() - 1, 3) == std::vector<std::int64_t>(y.sizes().begin(), y.sizes().end()));
    }
    const ppsched::Profile p = bench_torch::profile_of(m, {2, 4}, 0, 1).at(4);
    CHECK(p.graph.size() == m.net->size());  // one layer per child, in order
    CHECK(p.rows == 4);
    CHECK(p.graph.layer(0).points.size() == 2);
    for (std::size_t l = 0; l < p.graph.size(); ++l) CHECK(p.graph.layer(l).forward >= 0.0);
    // The planner's cut for 2 ranks covers every child once, in order.
    ppsched::GraphModelOptions g;
    g.ranks = 2;
    g.microbatches = 8;
    const ppsched::PlanModel model = ppsched::graph_model(ppsched::profile_at_rows(p, 8), name, g);
    const ppsched::PartitionPlan cut = model.partition(bench_torch::schedule_of("1f1b", 2, 8).placement);
    REQUIRE(cut.stages.size() == 2);
    CHECK(cut.stages[0].begin == 0);
    CHECK(cut.stages[1].begin == cut.stages[0].end);
    CHECK(cut.stages[1].end == m.net->size());
  }
}
