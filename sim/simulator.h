// Simulate one training step of one configuration: build the step graph (schedule + costs),
// run the engine on one pipeline (one TP rank per stage; DP replicas are symmetric), and derive
// the metrics of DESIGN.md: step time, tokens/s, TFLOP/s, MFU, bubble, exposed communication.
#pragma once

#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"
#include "core/schedule.h"
#include "core/training_spec.h"
#include "sim/cost_model.h"
#include "sim/engine.h"
#include "sim/step_graph.h"
#include "sim/step_metrics.h"

namespace loom::sim {

struct SimOptions {
  bool record_segments = false;  // keep per-kernel segments and the graph for traces
  bool keep_graph = false;       // keep graph + timeline (traces, GUI Gantt, critical path listing)
  // Pipeline sends and data-parallel collectives that leave the node share the GPU's NIC
  // (sim/nic_sharing.h); false gives each its own channel, as if they never met (for comparison).
  bool share_nics = true;
  // Optional memory inputs (from the planner's memory model) for the trace's memory counter:
  // bytes held all step per stage, activation bytes one forward of a chunk adds per stage, and
  // (zero-bubble) what of them, or in their place, one W pass reads until it ends.
  std::vector<double> static_bytes_per_stage{};
  std::vector<double> activation_bytes_per_forward{};
  std::vector<double> weight_pass_bytes{};
};

// The step's stats (StepStats: per-stage timings, bubble, exposed communication, critical path)
// are its base: step_stats() fills them in place, with no copy field by field.
struct SimResult : StepStats {
  ParallelConfig config;
  long long micro_batches = 0;
  double step_time_s = 0;
  double jitter_s = 0;  // of step_time_s: the waits for the slowest ranks under --kernel-cv and --gpu-cv (sim/jitter.h)
  double tokens_per_s = 0;
  double model_flops = 0;     // per step, whole cluster (no recompute)
  double hardware_flops = 0;  // per step, whole cluster (with recompute)
  double tflops_per_gpu = 0;
  double hw_tflops_per_gpu = 0;
  double mfu = 0;

  // Kept when SimOptions::keep_graph: for traces and the GUI.
  std::vector<std::vector<ChunkCost>> chunk_costs;  // [stage][chunk]
  StepGraph graph{1};
  Timeline timeline;
  SimOptions options;
};

Result<SimResult> simulate(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                           const ClusterSpec& cluster, const SimOptions& options = {});
// The same, reusing a collective model built once for `cluster` (the planner's inner loop).
Result<SimResult> simulate(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                           const ClusterSpec& cluster, const CollectiveModel& collectives,
                           const SimOptions& options = {});

}  // namespace loom::sim
