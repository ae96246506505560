// Enumeration: every legal configuration and only those; each rejection keeps its reason.
#include <algorithm>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "core/pipeline_split.h"
#include "core/presets.h"
#include "planner/enumerate.h"
#include "planner/search_space.h"

namespace loom {
namespace {

struct Gpt3Case {
  ModelSpec model = *model_preset("gpt3-175b");
  ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  TrainingSpec training;
  Gpt3Case() {
    training.gpus = 1024;
    training.global_batch = 1536;
    training.seq_len = 2048;
  }
};

bool has_reason(const Enumeration& e, const std::string& text) {
  return std::any_of(e.rejected.begin(), e.rejected.end(), [&](const Rejection& r) { return r.reason == text; });
}

TEST(Enumerate, EveryLegalConfigObeysTheRules) {
  Gpt3Case s;
  auto e = enumerate_configs(s.model, s.training, s.cluster, {});
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_GT(e->legal.size(), 1000u);
  for (const auto& c : e->legal) {
    EXPECT_EQ(c.world_size(), 1024);
    EXPECT_EQ(s.model.heads % c.tp, 0);
    EXPECT_LE(c.tp, 8);
    // Every chunk of the split holds a layer, and the stages hold them all (core/pipeline_split.h).
    const std::vector<int> chunks = virtual_stage_layers(s.model.layers, c);
    EXPECT_GE(*std::min_element(chunks.begin(), chunks.end()), 1) << describe(c);
    EXPECT_EQ(std::accumulate(chunks.begin(), chunks.end(), 0), s.model.layers) << describe(c);
    if (c.split.even()) {
      EXPECT_EQ(s.model.layers % (c.pp * c.vpp), 0);
    }
    EXPECT_EQ(s.training.global_batch % (static_cast<long long>(c.dp) * c.micro_batch), 0);
    if (c.vpp > 1) {
      EXPECT_EQ(c.schedule, Schedule::kInterleaved);
    }
    EXPECT_TRUE(check_config(s.model, s.training, s.cluster, c).ok()) << describe(c);
    if (c.sequence_parallel) {
      EXPECT_GT(c.tp, 1);
    }
    // FlashAttention makes selective recompute identical to none, so it is not listed twice.
    EXPECT_NE(c.recompute, Recompute::kSelective);
  }
  const auto has = [&](int tp, int pp, int dp) {
    return std::any_of(e->legal.begin(), e->legal.end(),
                       [&](const ParallelConfig& c) { return c.tp == tp && c.pp == pp && c.dp == dp; });
  };
  EXPECT_TRUE(has(8, 16, 8));  // the seeds' 3D layout of 175B on 1024 GPUs
  // ZeRO-2/3 shard gradients and parameters inside a pipeline too (torchtitan's FSDP2 with PP).
  EXPECT_TRUE(
      std::any_of(e->legal.begin(), e->legal.end(), [](const ParallelConfig& c) { return c.zero == 3 && c.pp > 1; }));
}

TEST(Enumerate, RejectionsKeepTheirReasons) {
  Gpt3Case s;
  s.training.allow_cross_node_tp = true;
  auto e = enumerate_configs(s.model, s.training, s.cluster, {});
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(has_reason(*e, "heads 96 not divisible by tp 64"));
  EXPECT_TRUE(has_reason(*e, "layers 96 not divisible by pp 64"));
  s.training.allow_cross_node_tp = false;
  auto strict = enumerate_configs(s.model, s.training, s.cluster, {});
  EXPECT_TRUE(has_reason(*strict, "tp 16 spans nodes of 8 GPUs (pass --allow-cross-node-tp to allow)"));
}

TEST(Enumerate, RestrictionsAreRespected) {
  Gpt3Case s;
  SearchSpace space;
  space.tp = {8};
  space.pp = {16};
  space.zero = {1};
  space.schedule = {Schedule::kInterleaved};
  space.vpp = {2, 3};
  auto e = enumerate_configs(s.model, s.training, s.cluster, space);
  ASSERT_TRUE(e.ok()) << e.error().message;
  ASSERT_FALSE(e->legal.empty());
  for (const auto& c : e->legal) {
    EXPECT_EQ(c.tp, 8);
    EXPECT_EQ(c.pp, 16);
    EXPECT_EQ(c.zero, 1);
    EXPECT_EQ(c.schedule, Schedule::kInterleaved);
    EXPECT_TRUE(c.vpp == 2 || c.vpp == 3);
  }
  // 96 layers over 16 stages is 6 per stage: vpp 2 and 3 divide it.
  EXPECT_TRUE(std::any_of(e->legal.begin(), e->legal.end(), [](const ParallelConfig& c) { return c.vpp == 3; }));
}

// ZeRO-3 comes with and without HSDP: by default one node's dp ranks as the shard group; with
// --shard-group only the groups listed (dp itself meaning plain ZeRO-3), illegal ones rejected
// with the rule's reason. Other ZeRO stages are unaffected.
TEST(Enumerate, Zero3ComesWithAndWithoutAShardGroup) {
  const ModelSpec m = *model_preset("llama2-7b");
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  TrainingSpec t{.gpus = 64, .global_batch = 256, .seq_len = 4096};
  SearchSpace space;
  space.tp = {2};
  space.pp = {1};
  auto e = enumerate_configs(m, t, cluster, space);
  ASSERT_TRUE(e.ok()) << e.error().message;
  std::set<int> groups;
  for (const auto& c : e->legal) {
    if (c.zero < 3) {
      EXPECT_EQ(c.shard_group, 0) << describe(c);
    } else {
      groups.insert(c.shard_group);
    }
  }
  EXPECT_EQ(groups, (std::set<int>{0, 4}));  // 8 GPUs per node / tp 2 = 4 dp ranks per node
  space.shard_group = {2, 5, 32};
  e = enumerate_configs(m, t, cluster, space);
  ASSERT_TRUE(e.ok()) << e.error().message;
  groups.clear();
  for (const auto& c : e->legal)
    if (c.zero == 3) groups.insert(c.shard_group);
  EXPECT_EQ(groups, (std::set<int>{0, 2}));  // 32 = dp: plain ZeRO-3; 5 does not divide 32
  EXPECT_TRUE(has_reason(*e, "shard group 5 must divide dp 32 and lie between 2 and dp/2 (dp itself is plain ZeRO-3)"));
}

// An MoE model's search covers every expert-parallel size dividing both its experts and dp·cp (with
// ZeRO-0/1/2 only); a dense model's stays at ep 1; --ep restricts it.
TEST(Enumerate, ExpertParallelSizesForMixtureOfExpertsModels) {
  ModelSpec m = *model_preset("llama2-7b");
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  TrainingSpec t{.gpus = 32, .global_batch = 64, .seq_len = 4096};
  SearchSpace space;
  space.tp = {2};
  space.pp = {1};
  auto eps = [&](const SearchSpace& s) {
    auto e = enumerate_configs(m, t, cluster, s);
    EXPECT_TRUE(e.ok()) << e.error().message;
    std::set<int> out;
    for (const auto& c : e->legal) {
      out.insert(c.ep);
      if (c.ep > 1) {
        EXPECT_LT(c.zero, 3) << describe(c);
      }
    }
    return out;
  };
  EXPECT_EQ(eps(space), (std::set<int>{1}));
  m.moe.experts = 8;
  m.moe.experts_per_token = 2;
  m.moe.expert_ffn = 2048;
  EXPECT_EQ(eps(space), (std::set<int>{1, 2, 4, 8}));  // dp 16, 8 experts
  space.ep = {4};
  EXPECT_EQ(eps(space), (std::set<int>{4}));
}

// Under TP an MoE model's search also tries whole experts (etp 1), only with SP, and then EP sizes
// dividing tp·dp (here 16 = tp 2 × dp 8) as well as dp; --etp restricts it.
TEST(Enumerate, ExpertTensorParallelOneFoldsEpOverTpRanks) {
  ModelSpec m = *model_preset("llama2-7b");
  m.moe.experts = 16;
  m.moe.experts_per_token = 2;
  m.moe.expert_ffn = 2048;
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  TrainingSpec t{.gpus = 16, .global_batch = 64, .seq_len = 4096};
  SearchSpace space;
  space.tp = {2};
  space.pp = {1};
  auto layouts = [&](const SearchSpace& s) {
    auto e = enumerate_configs(m, t, cluster, s);
    EXPECT_TRUE(e.ok()) << e.error().message;
    std::set<std::pair<int, int>> out;  // (etp, ep)
    for (const auto& c : e->legal) {
      out.insert({c.expert_tp(), c.ep});
      if (c.expert_tp() == 1) {
        EXPECT_TRUE(c.sequence_parallel) << describe(c);
      }
    }
    return out;
  };
  const auto both = layouts(space);
  EXPECT_TRUE(both.count({2, 8}));  // dp 8: experts split over TP, EP up to 8
  EXPECT_FALSE(both.count({2, 16}));
  EXPECT_TRUE(both.count({1, 16}));  // whole experts: EP 16 over tp 2 × dp 8
  space.etp = {1};
  for (const auto& [etp, ep] : layouts(space)) EXPECT_EQ(etp, 1);
  space.etp = {2};  // = tp: the default
  for (const auto& [etp, ep] : layouts(space)) EXPECT_EQ(etp, 2);
  // As typed: "tp" names the default whatever the TP size (its help says so).
  ConfigText text;
  text.tp = "2";
  text.pp = "1";
  text.etp = "tp";
  auto typed = parse_search_space(text);
  ASSERT_TRUE(typed.ok()) << typed.error().message;
  EXPECT_EQ(layouts(*typed), layouts(space));
  text.etp = "tp,1";
  typed = parse_search_space(text);
  ASSERT_TRUE(typed.ok()) << typed.error().message;
  EXPECT_EQ(layouts(*typed), both);
  text.etp = "0";
  EXPECT_FALSE(parse_search_space(text).ok());
}

TEST(Enumerate, NoUsableLayoutIsAnError) {
  Gpt3Case s;
  // 96 heads and a batch of 1536 do not divide by 97, and 97 stages are more than the 96 layers
  // (7 GPUs no longer do: a pinned first stage splits 96 layers as 12 + 6 × 14).
  s.training.gpus = 97;
  auto e = enumerate_configs(s.model, s.training, s.cluster, {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("no parallel layout of 97 GPUs"), std::string::npos) << e.error().message;
}

// When every layout is refused, the error leads with the rule that refused the most of them, not the
// first one tried: with megatron-core's stack, zero-bubble at pp 5 is refused for every split but the
// even one, which 96 layers cannot make. It led with "layers 96 not divisible by pp 5", as if a split
// were what stood in the way.
TEST(Enumerate, NoUsableLayoutNamesTheReasonMostLayoutsShare) {
  Gpt3Case s;
  s.training.gpus = 1280;
  s.training.framework = "megatron-core";
  SearchSpace space;
  space.pp = {5};
  space.schedule = {Schedule::kZeroBubble};
  auto e = enumerate_configs(s.model, s.training, s.cluster, space);
  ASSERT_FALSE(e.ok());
  const std::string& message = e.error().message;
  EXPECT_EQ(
      message.rfind("no parallel layout of 1280 GPUs can run gpt3-175b: megatron-core: the zero-bubble schedule", 0), 0)
      << message;
  EXPECT_NE(message.find("more like it;"), std::string::npos) << message;
  EXPECT_NE(message.find("for other reasons, first: layers 96 not divisible by pp 5"), std::string::npos) << message;
}

// Size lists whose products never make the GPUs: no layout is even tried, so no rule rejected one; the
// error names the flags and their values (it said "no reason recorded").
TEST(Enumerate, SizeListsThatNeverMakeTheGpusAreNamed) {
  Gpt3Case s;
  SearchSpace tp3;
  tp3.tp = {3};
  auto e = enumerate_configs(s.model, s.training, s.cluster, tp3);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message,
            "no parallel layout of 1024 GPUs can run gpt3-175b: --tp 3: no tp·cp·pp·dp of these sizes is 1024");
  SearchSpace both;
  both.tp = {8, 16};
  both.pp = {3};
  both.dp = {5, 7};
  e = enumerate_configs(s.model, s.training, s.cluster, both);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("--tp 8,16 --pp 3 --dp 5,7: no tp·cp·pp·dp of these sizes is 1024"),
            std::string::npos)
      << e.error().message;
}

TEST(Enumerate, RejectionsCarryTheCoreRuleAndItsKey) {
  Gpt3Case s;
  SearchSpace space;
  space.tp = {8};
  space.pp = {16, 64};
  space.vpp = {1, 4};
  auto e = enumerate_configs(s.model, s.training, s.cluster, space);
  ASSERT_TRUE(e.ok()) << e.error().message;
  const auto rejected_by = [&](std::string_view rule, const std::string& reason) {
    return std::any_of(e->rejected.begin(), e->rejected.end(),
                       [&](const Rejection& r) { return r.rule == rule && r.reason == reason; });
  };
  EXPECT_TRUE(rejected_by(rule::kLayersPp, "layers 96 not divisible by pp 64"));
  EXPECT_TRUE(rejected_by(rule::kLayersPpVpp, "layers 96 not divisible by pp 16 × vpp 4"));
  EXPECT_TRUE(rejected_by(rule::kVppNeedsInterleaved, "vpp 4 needs the interleaved schedule, not gpipe"));
  for (const Rejection& r : e->rejected) {
    const RuleStatus core = check_config(s.model, s.training, s.cluster, r.config);
    ASSERT_FALSE(core.ok()) << describe(r.config);
    EXPECT_EQ(core.violation().rule, r.rule) << describe(r.config);
  }
}

}  // namespace
}  // namespace loom
