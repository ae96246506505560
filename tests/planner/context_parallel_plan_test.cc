// The planner with context parallelism: which cp sizes the default search holds, a long-sequence
// search that only CP makes fit, and cp in every output format.
#include <algorithm>

#include <gtest/gtest.h>

#include "core/presets.h"
#include "planner/enumerate.h"
#include "planner/memory_model.h"
#include "planner/report.h"
#include "planner/search.h"
#include "planner/search_space.h"

namespace loom {
namespace {

TEST(ContextParallelPlan, TheDefaultSearchAddsCpFromSequencesOf8192Tokens) {
  EXPECT_EQ(default_cp_sizes(4096), std::vector<int>{1});
  EXPECT_EQ(default_cp_sizes(8192), (std::vector<int>{1, 2}));
  EXPECT_EQ(default_cp_sizes(12288), (std::vector<int>{1, 2}));  // 3072 tokens per rank at cp 4: too few
  EXPECT_EQ(default_cp_sizes(131072), (std::vector<int>{1, 2, 4, 8, 16, 32}));
  // Below the threshold the search is what it was: no configuration with cp > 1.
  const ModelSpec m = *model_preset("llama2-7b");
  const TrainingSpec t{.gpus = 16, .global_batch = 64, .seq_len = 4096};
  auto e = enumerate_configs(m, t, *cluster_preset("dgx-a100-80gb"), {});
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(std::none_of(e->legal.begin(), e->legal.end(), [](const ParallelConfig& c) { return c.cp > 1; }));
}

TEST(ContextParallelPlan, CpFlagsParseAsListsAndOneConfig) {
  ConfigText text;
  text.cp = "2,4";
  text.cp_comm = "ring,ulysses";  // the common names of p2p and a2a
  auto space = parse_search_space(text);
  ASSERT_TRUE(space.ok()) << space.error().message;
  EXPECT_EQ(space->cp, (std::vector<int>{2, 4}));
  EXPECT_EQ(space->cp_comm, (std::vector<CpComm>{CpComm::kP2P, CpComm::kA2A}));

  ConfigText one;
  one.cp = "4";
  one.tp = "2";
  auto c = parse_parallel_config(one, 16);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->dp, 2);  // 16 / (tp 2 · cp 4)
  EXPECT_EQ(c->cp_comm, CpComm::kP2P);
  one.cp_comm = "all_gather";
  EXPECT_EQ(parse_parallel_config(one, 16)->cp_comm, CpComm::kAllGather);
  one.cp = "1";  // nothing to exchange: said, not ignored
  auto no_cp = parse_parallel_config(one, 16);
  ASSERT_FALSE(no_cp.ok());
  EXPECT_EQ(no_cp.error().message, "--cp-comm: applies to --cp of 2 or more only (cp is 1)");
  one.cp = "3";
  auto bad = parse_parallel_config(one, 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("× cp 3"), std::string::npos) << bad.error().message;
}

// The default search tries the ring only; --cp-comm lists the kinds to compare.
TEST(ContextParallelPlan, TheDefaultSearchUsesTheRingCpCommAddsKinds) {
  const ModelSpec m = *model_preset("llama2-7b");  // 32 heads, 32 kv heads: a2a splits over tp·cp ≤ 32
  const TrainingSpec t{.gpus = 16, .global_batch = 64, .seq_len = 8192};
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  auto count = [&](const SearchSpace& space, CpComm kind) {
    auto e = enumerate_configs(m, t, cluster, space);
    EXPECT_TRUE(e.ok());
    return std::count_if(e->legal.begin(), e->legal.end(),
                         [&](const ParallelConfig& c) { return c.cp > 1 && c.cp_comm == kind; });
  };
  EXPECT_GT(count({}, CpComm::kP2P), 0);
  EXPECT_EQ(count({}, CpComm::kA2A), 0);
  SearchSpace both;
  both.cp_comm = {CpComm::kP2P, CpComm::kA2A};
  EXPECT_EQ(count(both, CpComm::kP2P), count({}, CpComm::kP2P));
  EXPECT_EQ(count(both, CpComm::kA2A), count({}, CpComm::kP2P));  // every head count divides here
}

// Under PyTorch's ring attention (torchtitan) the default search all-gathers K and V, torchtitan's
// default rotate method; --cp-comm p2p asks for the ring rotation; a2a is refused by its rule.
TEST(ContextParallelPlan, PyTorchsDefaultExchangeIsTheAllGather) {
  const ModelSpec m = *model_preset("llama2-7b");
  const TrainingSpec t{.gpus = 16, .global_batch = 64, .seq_len = 8192, .cp_attention = CpAttention::kPyTorch};
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  auto e = enumerate_configs(m, t, cluster, {});
  ASSERT_TRUE(e.ok());
  auto with = [&](const Enumeration& en, CpComm kind) {
    return std::count_if(en.legal.begin(), en.legal.end(),
                         [&](const ParallelConfig& c) { return c.cp > 1 && c.cp_comm == kind; });
  };
  EXPECT_GT(with(*e, CpComm::kAllGather), 0);
  EXPECT_EQ(with(*e, CpComm::kP2P), 0);
  SearchSpace ulysses;
  ulysses.cp_comm = {CpComm::kA2A};
  auto refused = enumerate_configs(m, t, cluster, ulysses);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(with(*refused, CpComm::kA2A), 0);
  EXPECT_TRUE(std::any_of(refused->rejected.begin(), refused->rejected.end(),
                          [](const auto& r) { return r.rule == rule::kCpPyTorchA2a; }));
}

// Llama 3 8B at 1M tokens on 8 DGX H100 nodes: without CP every layout runs out of memory (at tp 8
// the last stage still keeps fp32 logits of the whole sequence, 4·s·V/t bytes = 63 GiB, and a
// full-recompute stage a 1 GiB layer input per layer and micro-batch in flight); with CP the search
// offers layouts that fit. (At 128K tokens tp 2 with full recompute still fits without CP.)
TEST(ContextParallelPlan, A1MTokenSequenceFitsOnlyWithCp) {
  const ModelSpec m = *model_preset("llama3-8b");
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const TrainingSpec t{.gpus = 64, .global_batch = 64, .seq_len = 1 << 20};
  SearchSpace without;
  without.cp = {1};
  auto e = enumerate_configs(m, t, cluster, without);
  ASSERT_TRUE(e.ok()) << e.error().message;
  ASSERT_FALSE(e->legal.empty());
  for (const ParallelConfig& c : e->legal)
    ASSERT_FALSE(estimate_memory(m, t, c, cluster).fits) << describe(c) << " fits without CP";

  SearchSpace with;
  with.micro_batch = {1};  // one sequence of 1M tokens per micro-batch is all that can fit
  auto r = search_plans(m, t, cluster, with);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->plans.empty());
  for (const PlanRow& row : r->plans) {
    EXPECT_GT(row.config.cp, 1) << describe(row.config);
    EXPECT_EQ(row.config.world_size(), 64);
    EXPECT_TRUE(row.metrics.fits);
  }
  const Json j = format_json(m, *r, 1);
  EXPECT_EQ(j["plans"][0]["config"]["cp"].get<int>(), r->plans[0].config.cp);
  EXPECT_TRUE(j["plans"][0]["config"].contains("cp_comm"));
  EXPECT_TRUE(j["plans"][0]["exposed_comm"].contains("cp_s"));
}

TEST(ContextParallelPlan, TablesShowCpOnlyWhenAPlanUsesItCsvAlways) {
  const ModelSpec m = *model_preset("llama2-7b");
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const TrainingSpec t{.gpus = 8, .global_batch = 8, .seq_len = 8192};
  SearchSpace space;
  space.tp = {2};
  space.micro_batch = {1};
  space.zero = {1};
  space.pp = {1};
  space.recompute = {Recompute::kNone};
  auto r = search_plans(m, t, cluster, space);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ReportContext ctx;
  ctx.model = &m;
  ctx.cluster = &cluster;
  ctx.training = &t;
  const auto with_cp = std::find_if(r->plans.begin(), r->plans.end(), [](const PlanRow& p) { return p.config.cp > 1; });
  ASSERT_NE(with_cp, r->plans.end()) << "seq 8192 searches cp 2";
  const std::size_t all = r->plans.size();
  EXPECT_NE(format_table(ctx, *r, all).find("  CP  "), std::string::npos);
  EXPECT_NE(format_markdown(ctx, *r, all).find("| CP |"), std::string::npos);
  PlanResult only_cp1 = *r;
  std::erase_if(only_cp1.plans, [](const PlanRow& p) { return p.config.cp > 1; });
  ASSERT_FALSE(only_cp1.plans.empty());
  EXPECT_EQ(format_table(ctx, only_cp1, 0).find("  CP  "), std::string::npos);
  EXPECT_EQ(format_csv(ctx, only_cp1, 0).rfind("rank,TP,CP,PP,DP,", 0), 0u);
}

}  // namespace
}  // namespace loom
