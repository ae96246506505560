// The rules of a legal configuration: each fires with its own message and rule key, and the
// planner's enumeration, the simulator and the executor's check agree on a grid of configurations.
#include <gtest/gtest.h>

#include <set>

#include <fmt/format.h>

#include "core/config_rules.h"
#include "core/presets.h"
#include "exec/model/gpt_layout.h"
#include "planner/enumerate.h"
#include "sim/simulator.h"

namespace loom {
namespace {

ModelSpec small_model(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn) {
  ModelSpec m = *model_preset("gpt-tiny");
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn_hidden = ffn;
  m.seq_len = 64;
  return m;
}

// 12 layers, 8 heads over 2 key/value groups, an MLP of 100 (not divisible by 8).
struct Case {
  ModelSpec model = small_model("grid", 12, 64, 8, 2, 100);
  ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  TrainingSpec training;
  ParallelConfig config;
  Case() {
    training.gpus = 16;
    training.global_batch = 32;
    training.seq_len = 30;
    config.dp = 16;
  }
  RuleStatus check() const { return check_config(model, training, cluster, config); }
};

void expect_broken(const RuleStatus& status, std::string_view rule, const std::string& message) {
  ASSERT_FALSE(status.ok()) << "expected '" << message << "'";
  EXPECT_EQ(status.violation().rule, rule);
  EXPECT_EQ(status.violation().message, message);
}

TEST(ConfigRules, ALegalConfigurationPassesEveryRule) {
  Case c;
  EXPECT_TRUE(c.check().ok());
  c.config = {.tp = 2,
              .pp = 2,
              .dp = 4,
              .zero = 3,
              .micro_batch = 2,
              .vpp = 2,
              .sequence_parallel = true,
              .schedule = Schedule::kInterleaved};
  EXPECT_TRUE(c.check().ok()) << c.check().violation().message;
}

// Expert parallelism: routed experts to split, ep dividing them and the dp·cp group, and ZeRO-1/2 only.
TEST(ConfigRules, ExpertParallelismSplitsRoutedExpertsOverTheDataParallelGroup) {
  Case c;
  c.config.ep = 2;
  expect_broken(c.check(), rule::kEpNeedsMoe, "ep 2 needs a mixture-of-experts model; grid has no routed experts");
  c.model.moe.experts = 6;
  c.model.moe.experts_per_token = 2;
  c.model.moe.expert_ffn = 32;
  EXPECT_TRUE(c.check().ok()) << c.check().violation().message;
  c.config.ep = 4;
  expect_broken(c.check(), rule::kEpExperts, "6 experts are not divisible by ep 4");
  c.model.moe.experts = 12;
  c.config.ep = 12;
  expect_broken(c.check(), rule::kEpGradRanks,
                "ep 12 must divide dp·cp = 16 (expert-parallel ranks come from the data-parallel group)");
  c.config.ep = 4;
  c.config.zero = 2;
  EXPECT_TRUE(c.check().ok()) << c.check().violation().message;
  c.config.zero = 3;
  expect_broken(c.check(), rule::kEpZero3,
                "ep 4 with ZeRO-3 is not modelled: experts' states are sharded by ZeRO-1/2 over the "
                "expert-data-parallel group");
  c.config.zero = 1;
  c.config.ep = 0;
  expect_broken(c.check(), rule::kSizes, "ep 0 must be at least 1");
}

// Expert TP: tp (0, the default) or 1, whole experts, which needs SP (each TP rank routes its own
// tokens) and lets EP fold over the TP ranks: ep divides tp·dp·cp then.
TEST(ConfigRules, ExpertTensorParallelismIsTpOrOneAndFoldsEpOverTpRanks) {
  Case c;
  c.config.tp = 2;
  c.config.dp = 8;
  c.config.etp = 1;
  expect_broken(c.check(), rule::kEpNeedsMoe, "etp 1 needs a mixture-of-experts model; grid has no routed experts");
  c.model.moe.experts = 16;
  c.model.moe.experts_per_token = 2;
  c.model.moe.expert_ffn = 32;
  expect_broken(c.check(), rule::kEtpNeedsSp,
                "etp 1 below tp 2 needs sequence parallelism (each TP rank routes its own tokens to whole experts)");
  c.config.sequence_parallel = true;
  EXPECT_TRUE(c.check().ok()) << c.check().violation().message;
  c.config.ep = 16;  // over tp 2 × dp 8: more than dp alone allows
  EXPECT_TRUE(c.check().ok()) << c.check().violation().message;
  EXPECT_EQ(c.config.expert_grad_ranks(), 1);
  c.config.etp = 0;
  expect_broken(c.check(), rule::kEpGradRanks,
                "ep 16 must divide dp·cp = 8 (expert-parallel ranks come from the data-parallel group)");
  c.config.etp = 3;
  c.config.ep = 2;
  expect_broken(c.check(), rule::kEtp, "etp 3 must be 1 or tp 2 (experts split over TP or whole)");
  c.config.etp = 2;  // the same as the default
  EXPECT_TRUE(c.check().ok()) << c.check().violation().message;
  c.config.etp = 1;
  c.config.ep = 1;
  c.config.zero = 3;
  expect_broken(c.check(), rule::kEpZero3,
                "etp 1 with ZeRO-3 is not modelled: experts' states are sharded by ZeRO-1/2 over the "
                "expert-data-parallel group");
}

// The expert grid orders etp, ep, edp over a stage's tp·cp·dp ranks (Megatron-core's expert rank
// generator): with etp = tp a rank's EP rank is its dp rank mod ep; with etp 1 EP runs over TP first.
TEST(ConfigRules, ExpertGridCoordinates) {
  const ParallelConfig split{.tp = 2, .pp = 2, .dp = 4, .ep = 2};
  EXPECT_EQ(split.expert_grad_ranks(), 2);
  for (int r = 0; r < split.world_size(); ++r) {
    const RankCoords rc = rank_coords(split, r);
    const ExpertCoords ec = expert_coords(split, r);
    EXPECT_EQ(ec.etp_rank, rc.tp_rank);
    EXPECT_EQ(ec.ep_rank, rc.dp_rank % 2);
    EXPECT_EQ(ec.edp_rank, rc.dp_rank / 2);
  }
  const ParallelConfig folded{.tp = 2, .pp = 2, .dp = 4, .sequence_parallel = true, .ep = 4, .etp = 1};
  EXPECT_EQ(folded.expert_grad_ranks(), 2);
  EXPECT_EQ(expert_coords(folded, 1).ep_rank, 1);   // tp rank 1 of dp rank 0
  EXPECT_EQ(expert_coords(folded, 2).ep_rank, 2);   // tp rank 0 of dp rank 1
  EXPECT_EQ(expert_coords(folded, 5).edp_rank, 1);  // dp rank 2
  EXPECT_EQ(expert_coords(folded, 9).ep_rank, 1);   // the second stage starts over
}

TEST(ConfigRules, SizesAndWorldSize) {
  Case c;
  c.config.micro_batch = 0;
  expect_broken(c.check(), rule::kSizes, "tp 1, pp 1, dp 16, micro-batch 0 and vpp 1 must each be at least 1");
  c.config.micro_batch = 1;
  c.config.dp = 8;
  expect_broken(c.check(), rule::kWorldSize, "tp 1 × pp 1 × dp 8 = 8 but --gpus is 16");
}

TEST(ConfigRules, TensorParallelSplitsHeadsGroupsAndMlp) {
  Case c;
  c.model.heads = 6;
  c.model.hidden = 48;
  c.config = {.tp = 4, .dp = 4};
  expect_broken(c.check(), rule::kHeadsTp, "heads 6 not divisible by tp 4");
  c.model = small_model("grid", 12, 64, 8, 2, 100);
  expect_broken(c.check(), rule::kKvHeadsTp, "kv_heads 2 not divisible by tp 4 (query groups must split evenly)");
  c.model.kv_heads = 8;
  c.config = {.tp = 8, .dp = 2};
  expect_broken(c.check(), rule::kFfnTp, "ffn_hidden 100 not divisible by tp 8");
  c.model.ffn_hidden = 256;
  c.cluster.gpus_per_node = 4;
  expect_broken(c.check(), rule::kTpSpansNodes, "tp 8 spans nodes of 4 GPUs (pass --allow-cross-node-tp to allow)");
  c.training.allow_cross_node_tp = true;
  EXPECT_TRUE(c.check().ok());
}

TEST(ConfigRules, LayersAndBatchSplitOverStagesReplicasAndMicroBatches) {
  Case c;
  c.config = {.pp = 8, .dp = 2};
  expect_broken(c.check(), rule::kLayersPp, "layers 12 not divisible by pp 8");
  EXPECT_TRUE(check_config(c.model, c.training, c.config, StageSplit::kUneven).ok());
  c.config = {.pp = 16, .dp = 1};
  expect_broken(check_config(c.model, c.training, c.config, StageSplit::kUneven), rule::kStagesExceedLayers,
                "pp 16 is more pipeline stages than the 12 layers of grid");
  c.training.global_batch = 24;
  c.config = {.dp = 16};
  expect_broken(c.check(), rule::kBatchDp, "global batch 24 not divisible by dp 16");
  c.training.global_batch = 48;
  c.config.micro_batch = 2;
  expect_broken(c.check(), rule::kBatchMicroBatch, "global batch 48 not divisible by dp 16 × micro-batch 2");
  // The step graph's size: 2^21 forward passes are simulated, one more micro-batch's are not.
  c.training.gpus = 4;
  c.config = {.pp = 4, .dp = 1, .micro_batch = 1};
  c.training.global_batch = kMaxSimulatedPasses / 4;
  EXPECT_TRUE(c.check().ok());
  c.training.global_batch += 1;
  expect_broken(c.check(), rule::kTooManyPasses,
                "524289 micro-batches × pp 4 × vpp 1 = 2097156 forward passes a step, more than the 2097152 Loom "
                "simulates (a larger micro-batch or dp has fewer)");
}

TEST(ConfigRules, SchedulesAndInterleaving) {
  Case c;
  c.config = {.pp = 4, .dp = 4, .vpp = 3};
  expect_broken(c.check(), rule::kVppNeedsInterleaved, "vpp 3 needs the interleaved schedule, not 1f1b");
  c.config = {.dp = 16, .schedule = Schedule::kInterleaved};
  expect_broken(c.check(), rule::kInterleavedNeedsPp, "the interleaved schedule needs pp of at least 2");
  c.config = {.pp = 4, .dp = 4, .vpp = 2, .schedule = Schedule::kInterleaved};
  expect_broken(c.check(), rule::kLayersPpVpp, "layers 12 not divisible by pp 4 × vpp 2");
  EXPECT_TRUE(check_config(c.model, c.training, c.config, StageSplit::kUneven).ok());
  c.config.vpp = 4;
  expect_broken(check_config(c.model, c.training, c.config, StageSplit::kUneven), rule::kChunksExceedLayers,
                "pp 4 × vpp 4 is more model chunks than the 12 layers of grid");
  c.config = {.pp = 4, .dp = 4, .micro_batch = 4, .vpp = 3, .schedule = Schedule::kInterleaved};
  expect_broken(c.check(), rule::kInterleavedMicroBatches,
                "interleaved schedule needs micro-batches (2) divisible by pp (4)");
  // Interleaving with one chunk per stage is a schedule of its own (its warm-up is 1F1B's doubled).
  c.config.micro_batch = 2;
  c.config.vpp = 1;
  EXPECT_TRUE(c.check().ok());
}

TEST(ConfigRules, ZeroStagesAndSequenceParallelism) {
  Case c;
  c.config.zero = 4;
  expect_broken(c.check(), rule::kZeroStage, "ZeRO stage 4 does not exist (0 to 3)");
  // ZeRO-2/3 with pipeline parallelism is legal (FSDP2 with PP in torchtitan; Loom's executor).
  c.config = {.pp = 2, .dp = 8, .zero = 3};
  EXPECT_TRUE(c.check().ok());
  // HSDP: a shard group is ZeRO-3's and a proper divisor of dp.
  c.config = {.pp = 2, .dp = 8, .zero = 3, .shard_group = 4};
  EXPECT_TRUE(c.check().ok());
  c.config.shard_group = 3;
  expect_broken(c.check(), rule::kShardGroup,
                "shard group 3 must divide dp 8 and lie between 2 and dp/2 (dp itself is plain ZeRO-3)");
  c.config.shard_group = 8;
  expect_broken(c.check(), rule::kShardGroup,
                "shard group 8 must divide dp 8 and lie between 2 and dp/2 (dp itself is plain ZeRO-3)");
  c.config = {.pp = 2, .dp = 8, .zero = 2, .shard_group = 4};
  expect_broken(c.check(), rule::kShardGroup, "shard group 4 needs ZeRO-3 (HSDP shards ZeRO-3's states), not ZeRO-2");
  c.config = {.dp = 16, .sequence_parallel = true};
  expect_broken(c.check(), rule::kSpNeedsTp, "sequence parallelism needs tp > 1");
  c.model.kv_heads = 8;
  c.config = {.tp = 4, .dp = 4, .sequence_parallel = true};
  expect_broken(c.check(), rule::kSpTokens, "sequence parallelism needs micro_batch·seq (30) divisible by tp 4");
  c.config.micro_batch = 2;
  EXPECT_TRUE(c.check().ok());
}

TEST(ConfigRules, ExecutorAddsOnlyItsOwnLimits) {
  Case c;
  c.config = {.pp = 8, .dp = 2};  // 12 layers over 8 stages: uneven, which the executor runs
  EXPECT_TRUE(exec::check_runnable(c.model, c.training, c.config).ok());
  c.config.schedule = Schedule::kZeroBubble;  // B and W passes apart, as the simulator's
  EXPECT_TRUE(exec::check_runnable(c.model, c.training, c.config).ok());
  c.config.recompute = Recompute::kOp;  // torchtitan's op-level SAC, with flash attention
  EXPECT_TRUE(exec::check_runnable(c.model, c.training, c.config).ok());
  c.config.recompute = Recompute::kNone;
  c.model.mtp_layers = 1;  // planned and simulated, not run
  expect_broken(exec::check_runnable(c.model, c.training, c.config), exec::rule::kModelShape,
                "the executor does not run multi-token prediction (mtp_layers) yet");
  c.model.mtp_layers = 0;
  c.model.qk_norm = QkNorm::kPerHead;  // each TP rank normalises its own heads
  c.config = {.tp = 2, .pp = 4, .dp = 2};
  EXPECT_TRUE(exec::check_runnable(c.model, c.training, c.config).ok());
  c.model.qk_norm = QkNorm::kFullWidth;  // one mean square over every head: the TP ranks' all-reduce is not run
  expect_broken(exec::check_runnable(c.model, c.training, c.config), exec::rule::kModelShape,
                "the executor runs full-width QK-norm (OLMo 2) at tp 1 only");
  c.config = {.pp = 8, .dp = 2};
  EXPECT_TRUE(exec::check_runnable(c.model, c.training, c.config).ok());
  c.model.qk_norm = QkNorm::kNone;
  c.training.seq_len = 65;
  expect_broken(exec::check_runnable(c.model, c.training, c.config), exec::rule::kSeqLen,
                "sequence length 65 must be between 1 and the model's 64");
}

// --- One grid, three components -------------------------------------------------------------

struct GridCase {
  ModelSpec model;
  TrainingSpec training;
};

// What loom plan says about one configuration: legal, or the reason of its one rejection.
RuleStatus planner_verdict(const GridCase& g, const ClusterSpec& cluster, const ParallelConfig& c) {
  SearchSpace space;
  space.tp = {c.tp};
  space.pp = {c.pp};
  space.dp = {c.dp};
  space.zero = {c.zero};
  space.micro_batch = {c.micro_batch};
  space.vpp = {c.vpp};
  space.recompute = {c.recompute};
  space.sequence_parallel = {c.sequence_parallel};
  space.schedule = {c.schedule};
  space.shard_group = {c.shard_group};
  space.split = c.split;
  auto e = enumerate_configs(g.model, g.training, cluster, space);
  if (e && e->legal.size() == 1 && e->legal.front() == c) return {};
  if (e) return RuleViolation{"unexpected", fmt::format("{} legal configurations", e->legal.size())};
  return RuleViolation{"from enumerate", e.error().message};
}

bool is_even_split_rule(std::string_view rule) { return rule == rule::kLayersPp || rule == rule::kLayersPpVpp; }

void expect_agreement(const GridCase& g, const ClusterSpec& cluster, const ParallelConfig& c, int& legal,
                      std::set<std::string>& rules) {
  const RuleStatus core = check_config(g.model, g.training, cluster, c);
  if (!core) rules.insert(core.violation().rule);
  const std::string label = describe(c);
  // The planner: the same legal set, and the same first broken rule.
  const RuleStatus plan = planner_verdict(g, cluster, c);
  if (core) {
    EXPECT_TRUE(plan.ok()) << label << ": " << plan.violation().message;
  } else {
    ASSERT_FALSE(plan.ok()) << label;
    EXPECT_EQ(plan.violation().message, fmt::format("no parallel layout of {} GPUs can run {}: {}", g.training.gpus,
                                                    g.model.name, core.violation().message));
  }
  // The simulator: simulates what is legal, refuses the rest with the rule's message.
  auto sim = sim::simulate(g.model, g.training, c, cluster);
  EXPECT_EQ(sim.ok(), core.ok()) << label << ": " << (sim ? "" : sim.error().message);
  if (!sim && !core) {
    EXPECT_EQ(sim.error().message, core.violation().message) << label;
  }
  // The executor: runs what is legal (zero-bubble included); refuses the rest by the same rule, except
  // uneven stages, which it runs while every model chunk has a layer.
  const RuleStatus run = exec::check_runnable(g.model, g.training, c);
  if (core) {
    legal++;
    EXPECT_TRUE(run.ok()) << label << ": " << run.violation().message;
  } else if (!is_even_split_rule(core.violation().rule)) {
    ASSERT_FALSE(run.ok()) << label;
    EXPECT_EQ(run.violation().rule, core.violation().rule) << label;
  } else if (!run.ok()) {
    EXPECT_FALSE(is_even_split_rule(run.violation().rule)) << label;
    if (c.pp * c.vpp <= g.model.layers) {
      EXPECT_NE(run.violation().rule, rule::kChunksExceedLayers) << label;
    }
  }
}

TEST(ConfigRules, PlannerSimulatorAndExecutorAgreeOnAGrid) {
  ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  std::vector<GridCase> cases(2);
  // 12 layers and 8 heads on 16 GPUs, 30-token sequences: sequence parallelism splits them unevenly at tp 4.
  cases[0].model = small_model("grid-a", 12, 64, 8, 8, 256);
  cases[0].training = {.gpus = 16, .global_batch = 32, .seq_len = 30};
  // 10 layers, 12 heads in 4 groups, an odd MLP split, on 12 GPUs with a batch of 18.
  cases[1].model = small_model("grid-b", 10, 96, 12, 4, 770);
  cases[1].training = {.gpus = 12, .global_batch = 18, .seq_len = 64};
  std::set<std::string> rules;
  for (GridCase& g : cases) {
    g.training.allow_cross_node_tp = true;  // the simulator costs any placement; tested above
    int legal = 0;
    for (int tp = 1; tp <= g.training.gpus; ++tp)
      for (int pp = 1; tp * pp <= g.training.gpus; ++pp) {
        if (g.training.gpus % (tp * pp) != 0) continue;
        for (int zero : {0, 1, 2, 3})
          for (int mb : {1, 2, 3, 4})
            for (int vpp : {1, 2, 3})
              for (bool sp : {false, true})
                for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubble}) {
                  const ParallelConfig c{.tp = tp,
                                         .pp = pp,
                                         .dp = g.training.gpus / (tp * pp),
                                         .zero = zero,
                                         .micro_batch = mb,
                                         .vpp = vpp,
                                         .sequence_parallel = sp,
                                         .schedule = s};
                  expect_agreement(g, cluster, c, legal, rules);
                }
      }
    EXPECT_GT(legal, 100) << g.model.name;
  }
  // Every rule that does not need sizes below 1, a wrong GPU count or a ZeRO stage past 3 was broken somewhere.
  const std::set<std::string> expected = {std::string(rule::kHeadsTp),
                                          std::string(rule::kKvHeadsTp),
                                          std::string(rule::kFfnTp),
                                          std::string(rule::kLayersPp),
                                          std::string(rule::kBatchDp),
                                          std::string(rule::kBatchMicroBatch),
                                          std::string(rule::kLayersPpVpp),
                                          std::string(rule::kVppNeedsInterleaved),
                                          std::string(rule::kInterleavedNeedsPp),
                                          std::string(rule::kInterleavedMicroBatches),
                                          std::string(rule::kSpNeedsTp),
                                          std::string(rule::kSpTokens)};
  EXPECT_EQ(rules, expected);
}

}  // namespace
}  // namespace loom
