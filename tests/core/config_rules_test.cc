// The rules of a legal configuration: each fires with its own message and rule key.
#include <gtest/gtest.h>

#include "core/config_rules.h"
#include "core/presets.h"

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
  c.config = {.tp = 2, .pp = 2, .dp = 4, .zero = 3, .micro_batch = 2, .vpp = 2, .sequence_parallel = true,
              .schedule = Schedule::kInterleaved};
  EXPECT_TRUE(c.check().ok()) << c.check().violation().message;
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
  c.config = {.dp = 16, .sequence_parallel = true};
  expect_broken(c.check(), rule::kSpNeedsTp, "sequence parallelism needs tp > 1");
  c.model.kv_heads = 8;
  c.config = {.tp = 4, .dp = 4, .sequence_parallel = true};
  expect_broken(c.check(), rule::kSpTokens, "sequence parallelism needs micro_batch·seq (30) divisible by tp 4");
  c.config.micro_batch = 2;
  EXPECT_TRUE(c.check().ok());
}

}  // namespace
}  // namespace loom
