// ZeRO-3's limited prefetch (sim/zero3_prefetch.h): hand-worked timelines, and what it does to DeepSpeed's
// module-by-module gathers against FSDP's layer-by-layer ones.
#include "sim/zero3_prefetch.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/framework.h"
#include "core/presets.h"
#include "core/units.h"
#include "sim/cost_model.h"
#include "sim/simulator.h"

namespace loom::sim {
namespace {

// One unit ahead, a pair of units takes max(c_i, g_{i+1}). Units c = 4, 1, 4, 4 and gathers of 3 each:
// 4 + 3 + 4 + 4 = 15 a layer (the last unit of the pass has no gather after it: still 4), against 13 of
// compute and 12 of gathers a layer. Two layers: 30 against max(26, 21) = 26, a wait of 4.
TEST(Zero3Prefetch, OneUnitAheadWaitsWhereAGatherOutlastsTheComputeBeforeIt) {
  const std::vector<Zero3Step> layer = {{4, 3, 10}, {1, 3, 10}, {4, 3, 10}, {4, 3, 10}};
  EXPECT_DOUBLE_EQ(zero3_prefetch_wait_s(layer, 2, 0), 4.0);
  EXPECT_DOUBLE_EQ(zero3_prefetch_wait_s(layer, 1, 0), 2.0);
  EXPECT_DOUBLE_EQ(zero3_prefetch_wait_s(layer, 0, 0), 0.0);
}

// Deeper prefetch hides it: at the hook of the first unit, 20 elements issue units 1 and 2 back to back
// (arriving at 3 and 6), so unit 2's gather ran beside units 0 and 1 (5 of compute) and waits 1; from then
// on each hook issues two more and the channel runs ahead of the compute.
TEST(Zero3Prefetch, ABucketOfSeveralUnitsPrefetchesFurther) {
  const std::vector<Zero3Step> layer = {{4, 3, 10}, {1, 3, 10}, {4, 3, 10}, {4, 3, 10}};
  const double one = zero3_prefetch_wait_s(layer, 2, 0);
  const double two = zero3_prefetch_wait_s(layer, 2, 20);
  EXPECT_DOUBLE_EQ(two, 1.0);
  EXPECT_LT(two, one);
  // Every gather issued at once: the channel's own pace is what is left, the same wait of 1.
  EXPECT_DOUBLE_EQ(zero3_prefetch_wait_s(layer, 2, 1e12), 1.0);
  // A bucket smaller than one unit still prefetches that unit, as DeepSpeed's loop does.
  EXPECT_DOUBLE_EQ(zero3_prefetch_wait_s(layer, 2, 5), one);
}

// Units alike lose nothing while the compute hides the gathers: n·max(c, g) is max(n·c, n·g), which the
// step graph already charges. Where the gathers outlast the compute the channel paces the pass, and its
// last unit still computes after its gather: 47 gathers of 5 after the first, then 3.
TEST(Zero3Prefetch, UnitsAlikeWaitOnlyForTheLastUnitWhenTheGathersPaceThePass) {
  EXPECT_DOUBLE_EQ(zero3_prefetch_wait_s(std::vector<Zero3Step>{{5, 3, 1}}, 48, 0), 0.0);
  EXPECT_DOUBLE_EQ(zero3_prefetch_wait_s(std::vector<Zero3Step>{{3, 5, 1}}, 48, 0), 3.0);
}

// GPT-3 175B with ZeRO-3 and no TP over 1,536 A100s, full recompute, as DeepSpeed runs it (Narayanan et al.'s
// ZeRO-3 comparison).
struct Gpt3UnderDeepSpeed {
  Gpt3UnderDeepSpeed() { apply_framework(**find_framework("deepspeed"), training); }
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("gpt3-175b");
  const CollectiveModel collectives{cluster};
  const ParallelConfig c{.tp = 1, .pp = 1, .dp = 1536, .zero = 3, .micro_batch = 1, .recompute = Recompute::kFull};
  TrainingSpec training{.gpus = 1536, .global_batch = 1536, .seq_len = 2048};
};

// GPT-3 175B without TP over 1,536 A100s, full recompute (Narayanan et al.'s ZeRO-3 comparison): DeepSpeed's
// hooks gather each linear module one ahead, and the attention projection's compute (a twelfth of the
// layer's GEMMs) cannot hide fc1's gather. The same run with FSDP's layer units waits for nothing more.
TEST(Zero3Prefetch, DeepSpeedsModulesStallTheComputeWhereFsdpsLayersDoNot) {
  const Gpt3UnderDeepSpeed run;
  const auto& [cluster, m, collectives, c, t] = run;
  ASSERT_EQ(t.zero3_unit, Zero3Unit::kModule);
  ASSERT_EQ(t.zero3_prefetch_elements, 5e7);
  const CostModel deepspeed(m, t, c, cluster, collectives);
  const double forward = deepspeed.zero3_prefetch_wait_s(0, 0, false);
  const double backward = deepspeed.zero3_prefetch_wait_s(0, 0, true);
  // About 7 ms a layer in the forward (41 against 34: sim/zero3_prefetch.h), in each of 96 layers.
  EXPECT_GT(forward, 96 * 0.005);
  EXPECT_LT(forward, 96 * 0.009);
  // The backward's recomputed forward meets the gathers as the forward does; its gradients hide the next
  // layer's first gather.
  EXPECT_GT(backward, 0.5 * forward);
  EXPECT_LT(backward, 1.5 * forward);
  // The wait is in the pass's time and named DP communication.
  const ChunkCost chunk = deepspeed.chunk(0, 0, false);
  EXPECT_DOUBLE_EQ(chunk.forward.dp_comm_exposed_s, forward);
  EXPECT_DOUBLE_EQ(chunk.backward.dp_comm_exposed_s, backward);
  const auto step = simulate(m, t, c, cluster);
  ASSERT_TRUE(step.ok()) << step.error().message;
  EXPECT_GT(step->exposed.dp_s, forward + backward - 1e-9);

  // Prefetching every module without limit: the channel paces the pass (its gathers, 34 ms a layer,
  // outlast its compute), a wait of one unit's compute, and a faster step.
  TrainingSpec deep = t;
  deep.zero3_prefetch_elements = 1e15;
  EXPECT_LT(CostModel(m, deep, c, cluster, collectives).zero3_prefetch_wait_s(0, 0, false), 0.02);
  EXPECT_LT(simulate(m, deep, c, cluster)->step_time_s, step->step_time_s - 0.5);

  // FSDP's layers: the compute hides every gather, one ahead as well as all at once.
  TrainingSpec fsdp = t;
  fsdp.zero3_unit = Zero3Unit::kLayer;
  fsdp.zero3_prefetch_elements = 0;
  const CostModel layers(m, fsdp, c, cluster, collectives);
  EXPECT_DOUBLE_EQ(layers.zero3_prefetch_wait_s(0, 0, false), 0.0);
  EXPECT_DOUBLE_EQ(layers.zero3_prefetch_wait_s(0, 0, true), 0.0);

  // No ZeRO-3, no gathers to wait for.
  const ParallelConfig zero1{.tp = 1, .pp = 1, .dp = 1536, .zero = 1, .micro_batch = 1, .recompute = Recompute::kFull};
  EXPECT_DOUBLE_EQ(CostModel(m, t, zero1, cluster, collectives).zero3_prefetch_wait_s(0, 0, false), 0.0);
}

// The SMs a collective holds (collective_sm_fraction, 0.222 on this cluster) slow the GEMMs beside it, not
// a wait for a gather, which computes nothing. The forward of GPT-3 175B over 1,536 ranks: its gathers run
// beside all of it (3.3 s against 3.1 s of compute), so without that distinction it would be lengthened by
// the fraction of its waits as well.
TEST(Zero3Prefetch, AWaitForAGatherIsNotSlowedByTheSmsTheGatherHolds) {
  const Gpt3UnderDeepSpeed run;
  const auto& [cluster, m, collectives, c, t] = run;
  const double fraction = cluster.compute.collective_sm_fraction;
  ASSERT_GT(fraction, 0.1);
  const auto r = simulate(m, t, c, cluster, SimOptions{.keep_graph = true});
  ASSERT_TRUE(r.ok()) << r.error().message;
  int passes = 0;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(r->graph.size()); ++i) {
    const Op& op = r->graph.op(i);
    if (op.kind != OpKind::kForward && op.kind != OpKind::kBackward) continue;
    const PassCost& pass = op.kind == OpKind::kForward ? r->chunk_costs[0][0].forward : r->chunk_costs[0][0].backward;
    const double compute = pass.seconds - pass.dp_comm_exposed_s;
    ASSERT_GT(pass.dp_comm_exposed_s, 0.01 * compute);
    const double lengthened = ns_to_s(op.duration) - pass.seconds;
    EXPECT_LE(lengthened, fraction * compute + 1e-6) << (op.kind == OpKind::kForward ? "forward" : "backward");
    if (op.kind == OpKind::kForward) {
      EXPECT_GT(lengthened, 0.95 * fraction * compute);
    }
    ++passes;
  }
  EXPECT_EQ(passes, 2);
}

// DeepSpeed never partitions a parameter below its persistence threshold (1e5 elements): GPT-3 175B's norms
// and biases (at most 49,152 elements each) are gathered by no one, so its layer gathers just the four
// linear modules' weights.
TEST(Zero3Prefetch, ParametersBelowThePersistenceThresholdAreNeverGathered) {
  const Gpt3UnderDeepSpeed run;
  const auto& [cluster, m, collectives, c, t] = run;
  const CostModel cost(m, t, c, cluster, collectives);
  const double h = m.hidden;
  double modules = 0;
  for (double params : {3 * h * h, h * h, 4 * h * h, 4 * h * h})
    modules += cost.shard_collective_s(Collective::kAllGather, 2 * params);
  // The chunk is the whole model: its layers, and the embedding and head as units of their own.
  const double embedding = cost.shard_collective_s(Collective::kAllGather, 2.0 * h * (50257 + 2048));
  const double chunk = cost.zero3_collective_s(Collective::kAllGather, 0, 0);
  EXPECT_NEAR(chunk, m.layers * modules + embedding + cost.shard_collective_s(Collective::kAllGather, 2.0 * 2 * h),
              0.002 * chunk);
}

}  // namespace
}  // namespace loom::sim
