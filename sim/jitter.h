// Kernel jitter at scale (issue: "all ranks, not one pipeline"). The simulator times one pipeline with
// every kernel at its mean; on a cluster each synchronisation waits for the slowest of the ranks in it.
// With each kernel's time varying i.i.d. by a stated coefficient of variation c (TrainingSpec::kernel_cv),
// two synchronisations matter (../shared/reference/collectives-at-scale.md §5):
// - every TP collective: the group waits for the slowest of its tp ranks' kernels since the last one.
//   Between two TP collectives a layer runs one or two GEMMs and an element-wise op, so each compute
//   segment is counted as re-synchronised: k(tp)·c·t per segment, k(tp)·c·(compute) per stage;
// - the step's end (the gradient reduction and the world's gradient-norm all-reduce): the slowest of
//   the world's tp groups, whose step times vary by c·√(Σ t²) over the kernels of a stage — small
//   relative to the step when kernels are many, growing with k(N) as N grows.
// k(N) = E[max of N standard normals], integrated numerically (the reference's 1.42, 2.34, 3.25, 3.97 at
// N = 8, 64, 1024, 16384; 1/√π at N = 2).
//
// Persistent variation (TrainingSpec::gpu_cv) does not average out over a step's kernels: a GPU slower by
// δ runs every kernel slower by δ. Its TP group waits for it at every collective, so the group runs at its
// slowest member's speed; its stage then paces its pipeline's steady state (each of the m micro-batches'
// passes on that stage takes (1+δ) as long, and the other stages wait for it); and the step's gradient
// reduction waits for that pipeline. Whichever GPU is slowest, the world waits for it: the step grows by
// k(N)·σ of the compute of a stage, N the world's GPUs. The most loaded stage's compute is taken (the
// slow GPU on a lighter stage would be partly hidden by that stage's slack: an upper estimate). A normal
// tail is assumed; one outlier far slower than the rest (the reference's 1.5× GPUs) costs more.
// With both inputs set their costs are added, the i.i.d. waits on top of the persistent one.
#pragma once

#include <vector>

#include "core/parallel_config.h"
#include "sim/cost_model.h"

namespace loom::sim {

// E[max] of n i.i.d. standard normal draws (0 for n ≤ 1).
double expected_max_normal(long long n);

// What kernel jitter adds to a step: the largest stage's TP waits plus the world's wait at the step's end.
// `chunks`: [stage][chunk] pass costs; `micro_batches` per pipeline.
double kernel_jitter_s(const std::vector<std::vector<ChunkCost>>& chunks, const ParallelConfig& config,
                       long long micro_batches, double kernel_cv);

// What persistent per-GPU speed differences add to a step: the world waits for its slowest GPU,
// k(world)·gpu_cv of the most loaded stage's compute.
double gpu_variation_s(const std::vector<std::vector<ChunkCost>>& chunks, const ParallelConfig& config,
                       long long micro_batches, double gpu_cv);

// Both of the above: what the simulator adds to the engine's makespan.
double straggler_s(const std::vector<std::vector<ChunkCost>>& chunks, const ParallelConfig& config,
                   long long micro_batches, const TrainingSpec& training);

}  // namespace loom::sim
