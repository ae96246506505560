// A lower bound on the step time simulate() gives a configuration, from the costs of its passes
// alone (no step graph, no engine run): what the planner's bounded search (`loom plan --top K`) uses
// to skip configurations that cannot reach the table. Every term is a chain of ops the step graph
// (sim/step_builder.h) runs one after another, at the durations it gives them:
//   - a stage's compute stream runs its passes in order, and its first pass, the forward of micro-batch
//     0 through its first chunk, waits for that forward on every earlier stage and the sends between;
//   - the backward of the last micro-batch through its first chunk then runs back to stage 0, whose
//     optimizer waits for the last gradient bucket reduced after it, and ZeRO-1/2 gathers after that.
// What the graph adds (waits for sends and gathers, collectives sharing SMs, exposed data-parallel
// collectives) only lengthens the step, so the bound never exceeds the simulated step. For the
// bubble-bound 1F1B and interleaved schedules it is the textbook pipeline time (m + (p−1)/v)·(F+B).
#pragma once

#include <map>
#include <tuple>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"
#include "sim/collectives.h"
#include "sim/cost_model.h"

namespace loom::sim {

class StepBound {
 public:
  // All references must outlive the bound; `collectives` built from `cluster`.
  StepBound(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
            const CollectiveModel& collectives);

  // Seconds; never above simulate(model, training, config, cluster).step_time_s. Not thread-safe (the
  // memo is unguarded): a search gives each of its threads a StepBound of its own (planner/search.cc).
  // The configuration must be legal (check_config); an illegal one gets 0, which bounds nothing.
  double lower_bound_s(const ParallelConfig& config) const;

  // CostModel::chunk for `config`, memoised across configurations: a chunk's passes depend only on
  // the key's fields (the split of the layers, the micro-batch, and the TP, CP and EP layout), not on
  // pp, dp, ZeRO or the schedule, so configurations share them (bench_planner's every-dimension search
  // computes about 56,600 chunks for the 40,400 configurations it bounds). Where ZeRO-3 gathers in
  // every pass, the wait a limited prefetch leaves (CostModel::zero3_prefetch_wait_s) also depends on
  // the group the gathers span: its size is in the key then.
  ChunkCost chunk(const CostModel& cost, const ParallelConfig& config, int stage, int chunk) const;

 private:
  using Key = std::tuple<int, int, int, int, bool, int, int, int, int, bool, bool, bool, int>;
  const ModelSpec& model_;
  const TrainingSpec& training_;
  const ClusterSpec& cluster_;
  const CollectiveModel& collectives_;
  mutable std::map<Key, ChunkCost> chunks_;
};

}  // namespace loom::sim
