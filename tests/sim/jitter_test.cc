// Kernel jitter (sim/jitter.h): the expected maximum of N normal draws against the numerically
// integrated values of ../shared/reference/collectives-at-scale.md §5, and what a stated per-kernel
// variability adds to a step: nothing at 0, the TP groups' waits growing with tp, the world's wait
// growing with the number of TP groups.
#include <gtest/gtest.h>

#include <cmath>

#include "core/presets.h"
#include "sim/jitter.h"
#include "sim/simulator.h"

namespace loom::sim {
namespace {

TEST(Jitter, ExpectedMaximumOfNormalsMatchesTheIntegratedValues) {
  EXPECT_EQ(expected_max_normal(1), 0.0);
  EXPECT_NEAR(expected_max_normal(2), 1.0 / std::sqrt(M_PI), 1e-9);  // exact
  EXPECT_NEAR(expected_max_normal(8), 1.42, 0.005);
  EXPECT_NEAR(expected_max_normal(64), 2.34, 0.005);
  EXPECT_NEAR(expected_max_normal(1024), 3.25, 0.005);
  EXPECT_NEAR(expected_max_normal(16384), 3.97, 0.005);
}

// LLaMA-2 7B, TP 8, data-parallel over 1, 64 and 2048 nodes of DGX H100 (8, 512 and 16,384 GPUs),
// the same per-replica work (global batch 4 sequences per replica).
TEST(Jitter, AStatedKernelVariabilityCostsMoreWithTpAndWithScale) {
  const ModelSpec m = *model_preset("llama2-7b");
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  auto step = [&](int gpus, int tp, double cv) {
    TrainingSpec t{.gpus = gpus, .global_batch = 4LL * gpus / tp, .seq_len = 4096};
    t.kernel_cv = cv;
    const ParallelConfig c{.tp = tp, .dp = gpus / tp, .zero = 1, .micro_batch = 1, .sequence_parallel = tp > 1};
    auto r = simulate(m, t, c, cluster);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return *r;
  };
  const SimResult even = step(8, 8, 0.0);
  EXPECT_EQ(even.jitter_s, 0.0);
  const SimResult small = step(8, 8, 0.05), mid = step(512, 8, 0.05), large = step(16384, 8, 0.05);
  // The TP groups' waits: k(8)·c of the compute, the same at every scale; the world's wait grows.
  EXPECT_GT(small.jitter_s, 0.0);
  EXPECT_NEAR(small.step_time_s - small.jitter_s, even.step_time_s, 1e-12);
  EXPECT_LT(small.jitter_s, mid.jitter_s);
  EXPECT_LT(mid.jitter_s, large.jitter_s);
  // Bounded: the whole-step spread is far smaller than the step (many kernels average out), so most of
  // the cost is the TP groups' waits, k(8) · 5 % ≈ 7 % of the compute.
  EXPECT_LT(small.jitter_s, 0.08 * even.step_time_s);
  EXPECT_GT(small.jitter_s, 0.03 * even.step_time_s);
  // Without TP only the step's end waits: much less.
  EXPECT_LT(step(8, 1, 0.05).jitter_s, 0.2 * small.jitter_s);
}

// Persistent per-GPU variation: the world waits for its slowest GPU, so the cost is k(N)·σ of a stage's
// compute and keeps growing with N (unlike i.i.d. kernel noise, which averages out over a step).
TEST(Jitter, PersistentGpuVariationGrowsWithTheWorldAsTheExpectedMaximum) {
  const ModelSpec m = *model_preset("llama2-7b");
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  auto step = [&](int gpus, int pp, double gpu_cv, double kernel_cv = 0.0) {
    const int tp = 8;
    TrainingSpec t{.gpus = gpus, .global_batch = 4LL * gpus / (tp * pp), .seq_len = 4096};
    t.gpu_cv = gpu_cv;
    t.kernel_cv = kernel_cv;
    const ParallelConfig c{
        .tp = tp, .pp = pp, .dp = gpus / (tp * pp), .zero = 1, .micro_batch = 1, .sequence_parallel = true};
    SimOptions options;
    options.keep_graph = true;
    auto r = simulate(m, t, c, cluster, options);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return *r;
  };
  const SimResult even = step(8, 1, 0.0);
  EXPECT_EQ(even.jitter_s, 0.0);
  const SimResult small = step(8, 1, 0.02), mid = step(512, 1, 0.02), large = step(16384, 1, 0.02);
  EXPECT_NEAR(small.step_time_s - small.jitter_s, even.step_time_s, 1e-12);
  // The same per-GPU work at every scale: the cost scales exactly as k(N).
  EXPECT_NEAR(mid.jitter_s / small.jitter_s, expected_max_normal(512) / expected_max_normal(8), 1e-9);
  EXPECT_NEAR(large.jitter_s / small.jitter_s, expected_max_normal(16384) / expected_max_normal(8), 1e-9);
  // k(N)·σ of the stage's compute, recomputed here from the kept pass costs.
  double compute = 0;
  for (const ChunkCost& c : small.chunk_costs[0])
    for (const PassCost* p : {&c.forward, &c.backward, &c.weight})
      compute += static_cast<double>(small.micro_batches) *
                 (p->seconds - p->tp_comm_exposed_s - p->cp_comm_exposed_s - p->ep_comm_exposed_s);
  EXPECT_NEAR(small.jitter_s, expected_max_normal(8) * 0.02 * compute, 1e-12);
  EXPECT_GT(compute, 0.5 * even.step_time_s);
  // Twice the spread, twice the cost.
  EXPECT_NEAR(step(512, 1, 0.04).jitter_s, 2 * mid.jitter_s, 1e-12);
  // With a pipeline, the most loaded stage's compute sets it: splitting the layers over 4 stages (same
  // world, same micro-batches per pipeline) leaves about a quarter of the compute per stage.
  const SimResult piped = step(512, 4, 0.02);
  EXPECT_LT(piped.jitter_s, 0.35 * mid.jitter_s);
  EXPECT_GT(piped.jitter_s, 0.2 * mid.jitter_s);
  // Both inputs: the i.i.d. waits are added on top.
  const SimResult both = step(512, 1, 0.02, 0.05);
  EXPECT_NEAR(both.jitter_s, mid.jitter_s + step(512, 1, 0.0, 0.05).jitter_s, 1e-12);
}

}  // namespace
}  // namespace loom::sim
