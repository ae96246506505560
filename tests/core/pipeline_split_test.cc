// The one definition of a pipeline split: layers per pipeline rank and model chunk under Megatron-LM's
// settings (pinned first/last stage, embedding and loss as layers) or a list, the rule each impossible split
// breaks, and the candidates the planner tries.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/config_rules.h"
#include "core/pipeline_split.h"
#include "core/presets.h"

namespace loom {
namespace {

ModelSpec with_layers(int layers) {
  ModelSpec m = *model_preset("gpt-tiny");
  m.layers = layers;
  return m;
}

ParallelConfig pipeline(int pp, int vpp, PipelineSplit split) {
  ParallelConfig c;
  c.pp = pp;
  c.vpp = vpp;
  c.schedule = vpp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  c.split = split;
  return c;
}

std::vector<int> repeated(std::vector<std::pair<int, int>> runs) {
  std::vector<int> out;
  for (auto [value, count] : runs) out.insert(out.end(), count, value);
  return out;
}

void expect_rule(const ModelSpec& m, const ParallelConfig& c, std::string_view rule, const std::string& message) {
  RuleStatus s = check_split_stages(m, c, StageSplit::kEven);
  if (s) s = check_split_chunks(m, c, StageSplit::kEven);
  ASSERT_FALSE(s.ok()) << describe(c);
  EXPECT_EQ(s.violation().rule, rule);
  EXPECT_EQ(s.violation().message, message);
}

TEST(PipelineSplit, TheEvenSplitGivesEveryStageTheSameLayers) {
  const ParallelConfig c = pipeline(8, 1, {});
  EXPECT_EQ(stage_layer_counts(96, c), repeated({{12, 8}}));
  EXPECT_EQ(stage_layers_label(stage_layer_counts(96, c)), "12x8");
}

TEST(PipelineSplit, PinnedFirstAndLastStagesLeaveTheRestToTheMiddleStages) {
  // Llama 3.1 405B on PP 16: 126 layers, 7 on each end and 8 on the 14 middle stages.
  const ParallelConfig c = pipeline(16, 1, {.first_stage_layers = 7, .last_stage_layers = 7});
  EXPECT_EQ(stage_layer_counts(126, c), repeated({{7, 1}, {8, 14}, {7, 1}}));
  EXPECT_EQ(stage_layers_label(stage_layer_counts(126, c)), "7/8x14/7");
  EXPECT_TRUE(check_split_stages(with_layers(126), c, StageSplit::kEven).ok());
  EXPECT_TRUE(check_split_chunks(with_layers(126), c, StageSplit::kEven).ok());
}

TEST(PipelineSplit, APinnedStageSplitsItsLayersEvenlyOverItsChunks) {
  // 28 layers, pp 4, vpp 2: the first stage's 4 layers are 2 per chunk, the middle ones' 20 are 5 per chunk.
  const ParallelConfig c = pipeline(4, 2, {.first_stage_layers = 4, .last_stage_layers = 4});
  EXPECT_EQ(virtual_stage_layers(28, c), (std::vector<int>{2, 5, 5, 2, 2, 5, 5, 2}));
  EXPECT_EQ(first_layer_of(28, c, 4), 14);
}

TEST(PipelineSplit, EmbeddingAndLossCountAsALayerOnTheFirstAndLastChunk) {
  // NVIDIA's Llama 3.1 405B recipe: TP 8 · PP 8 · VP 8, (126 + 2) / 64 = 2 layers per chunk.
  const ParallelConfig c = pipeline(8, 8, {.account_for_embedding = true, .account_for_loss = true});
  const std::vector<int> v = virtual_stage_layers(126, c);
  EXPECT_EQ(v.front(), 1);
  EXPECT_EQ(v.back(), 1);
  EXPECT_EQ(std::accumulate(v.begin(), v.end(), 0), 126);
  EXPECT_EQ(stage_layer_counts(126, c), repeated({{15, 1}, {16, 6}, {15, 1}}));
  EXPECT_EQ(chunk_layers(126, c, 7, 7), 1);
  EXPECT_EQ(chunk_layers(126, c, 0, 1), 2);
  EXPECT_EQ(max_stage_layers(126, c), 16);
  EXPECT_TRUE(check_split_chunks(with_layers(126), c, StageSplit::kEven).ok());
}

TEST(PipelineSplit, TheExecutorsDefaultPutsLeftoverLayersOnTheEarliestChunks) {
  EXPECT_EQ(stage_layer_counts(12, pipeline(8, 1, {})), repeated({{2, 4}, {1, 4}}));
  EXPECT_FALSE(check_split_stages(with_layers(12), pipeline(8, 1, {}), StageSplit::kEven).ok());
  EXPECT_TRUE(check_split_stages(with_layers(12), pipeline(8, 1, {}), StageSplit::kUneven).ok());
}

TEST(PipelineSplit, EachImpossibleSplitNamesTheRuleItBreaks) {
  const ModelSpec m = with_layers(126);
  expect_rule(m, pipeline(16, 1, {.first_stage_layers = 7, .account_for_loss = true}), rule::kSplitExclusive,
              "first/last stage layers cannot be combined with counting the embedding or loss as a layer");
  expect_rule(m, pipeline(1, 1, {.first_stage_layers = 7}), rule::kPinnedNeedsPp,
              "first/last stage layers need pp of at least 2");
  expect_rule(m, pipeline(16, 1, {.first_stage_layers = 6, .last_stage_layers = 7}), rule::kPinnedLayers,
              "layers 126 − first stage 6 − last stage 7 = 113 do not split evenly over the 14 middle stages");
  expect_rule(m, pipeline(16, 2, {.first_stage_layers = 7, .last_stage_layers = 7}), rule::kPinnedVpp,
              "a pinned stage's 7 layers not divisible by vpp 2");
  expect_rule(m, pipeline(16, 1, {.account_for_embedding = true}), rule::kAccountedLayers,
              "layers 126 + embedding = 127 not divisible by pp 16");
  expect_rule(m, pipeline(2, 3, {.account_for_embedding = true, .account_for_loss = true}), rule::kAccountedLayers,
              "layers 126 + embedding + loss = 128 not divisible by pp 2 × vpp 3");
  expect_rule(with_layers(14), pipeline(16, 1, {.account_for_embedding = true, .account_for_loss = true}),
              rule::kEmptyChunk,
              "counting the embedding/loss as a layer leaves the first model chunk without a layer (1 per chunk)");
  expect_rule(m, pipeline(16, 1, {}), rule::kLayersPp, "layers 126 not divisible by pp 16");
}

// Every stage's layers listed (`--stage-layers`, torchtitan's split points): each rank gets its count,
// split evenly over its chunks; middle stages need not be alike.
TEST(PipelineSplit, AListedSplitGivesEachStageItsCount) {
  const ParallelConfig c = pipeline(4, 1, {.stage_layers = {8, 9, 8, 7}});
  EXPECT_EQ(stage_layer_counts(32, c), (std::vector<int>{8, 9, 8, 7}));
  EXPECT_EQ(first_layer_of(32, c, 2), 17);
  EXPECT_EQ(max_stage_layers(32, c), 9);
  EXPECT_TRUE(check_split_stages(with_layers(32), c, StageSplit::kEven).ok());
  EXPECT_TRUE(check_split_chunks(with_layers(32), c, StageSplit::kEven).ok());
  EXPECT_EQ(describe(c.split), "stages8/9/8/7");
  const ParallelConfig v = pipeline(4, 2, {.stage_layers = {6, 10, 10, 6}});
  EXPECT_EQ(virtual_stage_layers(32, v), (std::vector<int>{3, 5, 5, 3, 3, 5, 5, 3}));
  EXPECT_EQ(chunk_layers(32, v, 1, 1), 5);
  EXPECT_TRUE(check_split_chunks(with_layers(32), v, StageSplit::kEven).ok());
}

TEST(PipelineSplit, EachImpossibleListNamesTheRuleItBreaks) {
  const ModelSpec m = with_layers(32);
  expect_rule(m, pipeline(2, 1, {.stage_layers = {14, 17}}), rule::kListedLayers,
              "stage layers 14/17 add up to 31 but gpt-tiny has 32 layers");
  expect_rule(m, pipeline(4, 1, {.stage_layers = {14, 18}}), rule::kListedStages,
              "stage layers 14/18 name 2 stages but pp is 4");
  expect_rule(m, pipeline(2, 1, {.stage_layers = {0, 32}}), rule::kEmptyChunk,
              "stage layers 0/32 leave a stage without a layer");
  expect_rule(m, pipeline(2, 1, {.first_stage_layers = 14, .stage_layers = {14, 18}}), rule::kListedExclusive,
              "stage layers listed cannot be combined with first/last stage layers or counting the embedding or loss "
              "as a layer");
  expect_rule(m, pipeline(4, 2, {.stage_layers = {7, 9, 9, 7}}), rule::kPinnedVpp,
              "stage 0's 7 layers not divisible by vpp 2");
}

TEST(PipelineSplit, ThePlannerTriesTheEvenSplitAccountingAndLighterEnds) {
  const std::vector<PipelineSplit> s = candidate_splits(126, 16);
  EXPECT_EQ(s.front(), PipelineSplit{});
  auto has = [&](PipelineSplit x) { return std::find(s.begin(), s.end(), x) != s.end(); };
  EXPECT_TRUE(has({.account_for_embedding = true, .account_for_loss = true}));
  EXPECT_TRUE(has({.first_stage_layers = 7, .last_stage_layers = 7}));
  for (const PipelineSplit& x : s) {
    // Pinned ends are lighter than the middle stages, never heavier.
    if (!x.pinned()) continue;
    const std::vector<int> counts = stage_layer_counts(126, pipeline(16, 1, x));
    if (x.first_stage_layers) {
      EXPECT_LT(counts.front(), counts[1]);
    }
    if (x.last_stage_layers) {
      EXPECT_LT(counts.back(), counts[1]);
    }
  }
  EXPECT_EQ(candidate_splits(126, 1).size(), 1u);
}

}  // namespace
}  // namespace loom
