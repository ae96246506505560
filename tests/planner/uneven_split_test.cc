// Uneven pipeline splits through the planner: Llama 3.1 405B's published layouts are offered,
// memory per stage follows each stage's own layers, and the simulated step follows the bottleneck
// stage's layers (and the embedding and LM head beside them).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/partition.h"
#include "core/pipeline_split.h"
#include "core/presets.h"
#include "planner/enumerate.h"
#include "planner/memory_model.h"
#include "sim/simulator.h"

namespace loom {
namespace {

struct Llama405b {
  ModelSpec model = *model_preset("llama3-405b");
  ClusterSpec cluster = *cluster_preset("dgx-h100");
  TrainingSpec training{.gpus = 16384, .global_batch = 2048, .seq_len = 8192};
};

TEST(UnevenSplit, Llama405bOn16kH100OffersPp16AndThePublishedTp8Pp8Vp8Split) {
  Llama405b s;
  auto e = enumerate_configs(s.model, s.training, s.cluster, {});
  ASSERT_TRUE(e.ok()) << e.error().message;
  const auto offers = [&](auto pred) { return std::any_of(e->legal.begin(), e->legal.end(), pred); };
  // 126 layers do not divide by 16: PP 16 only through an uneven split.
  EXPECT_TRUE(offers([](const ParallelConfig& c) { return c.pp == 16 && !c.split.even(); }));
  EXPECT_FALSE(offers([](const ParallelConfig& c) { return c.pp == 16 && c.split.even(); }));
  // NVIDIA's recipe: embedding and loss counted as layers, (126 + 2) / (8 · 8) = 2 per chunk.
  EXPECT_TRUE(offers([](const ParallelConfig& c) {
    return c.tp == 8 && c.pp == 8 && c.vpp == 8 && c.schedule == Schedule::kInterleaved &&
           c.split == PipelineSplit{.account_for_embedding = true, .account_for_loss = true};
  }));
  for (const ParallelConfig& c : e->legal) {
    EXPECT_TRUE(check_config(s.model, s.training, s.cluster, c).ok()) << describe(c);
    const std::vector<int> layers = stage_layer_counts(s.model.layers, c);
    EXPECT_EQ(std::accumulate(layers.begin(), layers.end(), 0), s.model.layers) << describe(c);
  }
}

TEST(UnevenSplit, MemoryPerStageFollowsEachStagesLayers) {
  Llama405b s;
  ParallelConfig c{.tp = 8, .pp = 16, .dp = 128};
  c.split = {.first_stage_layers = 7, .last_stage_layers = 7};
  ASSERT_TRUE(check_config(s.model, s.training, s.cluster, c).ok());
  const MemoryReport r = estimate_memory(s.model, s.training, c, s.cluster);
  const double layer = layer_params_per_tp_rank(s.model, c.tp);
  ASSERT_EQ(r.stages.size(), 16u);
  EXPECT_EQ(r.stages[0].layers, 7);
  EXPECT_EQ(r.stages[1].layers, 8);
  EXPECT_EQ(r.stages[15].layers, 7);
  EXPECT_DOUBLE_EQ(r.stages[1].param_count, 8 * layer);
  EXPECT_DOUBLE_EQ(r.stages[0].param_count - stage_params(s.model, c, 0).embedding, 7 * layer);
  // Activations: stage 1 keeps its 8 layers' worth for each micro-batch in flight, and at the end of a
  // forward its output (b·s·h bf16 values on every TP rank: no SP here) until the send takes it.
  const StageMemory& middle = r.stages[1];
  ASSERT_FALSE(c.sequence_parallel);
  const double output = 2.0 * s.training.seq_len * s.model.hidden;
  EXPECT_NEAR(middle.activations_bytes, 8 * middle.activation_bytes_per_layer * middle.micro_batches_in_flight + output,
              1e-9 * middle.activations_bytes);
}

// Llama 3 8B (32 layers, a 128k-vocabulary LM head worth about 2.4 layers) on TP 2 · PP 4.
double step_time(PipelineSplit split) {
  const ModelSpec m = *model_preset("llama3-8b");
  const TrainingSpec t{.gpus = 8, .global_batch = 32, .seq_len = 4096};
  ParallelConfig c{.tp = 2, .pp = 4, .dp = 1};
  c.split = split;
  auto r = sim::simulate(m, t, c, *cluster_preset("dgx-h100"));
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r->step_time_s : 0.0;
}

TEST(UnevenSplit, AHeavierBottleneckStageMakesTheStepSlowerAndALighterOneFaster) {
  const double even = step_time({});  // 8, 8, 8, 8 + the LM head on the last stage
  // 11, 7, 7, 7: the first stage's 11 layers outweigh the last stage's 8 and the head.
  EXPECT_GT(step_time({.first_stage_layers = 11}), 1.05 * even);
  // 9, 9, 9, 5 + head: the last stage is no longer the bottleneck, and no stage carries 10.4 layers' work.
  EXPECT_LT(step_time({.last_stage_layers = 5}), 0.97 * even);
}

}  // namespace
}  // namespace loom
