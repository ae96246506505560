// Plan: a chosen configuration together with the specs it was chosen for and what the simulator
// predicted. `loom plan --emit-plan` writes one; `loom run --plan` executes it.
#pragma once

#include <optional>
#include <string>

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"

namespace loom {

struct MemoryBreakdownGiB {
  double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0, total = 0;
};

// The per-plan metrics of DESIGN.md's JSON contract (`loom sim --format json`, `loom plan` rows).
struct PlanMetrics {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;     // model FLOPs (no recompute)
  double hw_tflops_per_gpu = 0;  // with recompute
  double mfu = 0;                // fraction of peak, 0..1
  double bubble_fraction = 0;
  double exposed_comm_s = 0;
  bool fits = false;
  MemoryBreakdownGiB memory_gib;  // the most loaded stage
};

struct Plan {
  ModelSpec model;
  std::string cluster;  // preset name or path of the cluster/cost file
  TrainingSpec training;
  ParallelConfig config;
  std::optional<PlanMetrics> predicted;
};

}  // namespace loom
