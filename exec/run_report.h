// What `loom run` prints and logs per step: the one-line summary on rank 0, the JSONL record of
// DESIGN.md's contract (step, loss, step_time_s, tokens_per_s, tflops_per_gpu, memory_peak_gib by
// category; and, extending it, grad_norm, lr and, on a GPU whose peak a preset knows, mfu), and the
// per-rank peak table written at the end of a run.
#pragma once

#include <string>
#include <vector>

#include "core/json_io.h"
#include "exec/trainer.h"

namespace loom::exec {

Json memory_peak_gib(const StepMetrics& m);
Json step_record(const StepMetrics& m);
std::string step_line(const StepMetrics& m, int total_steps);
// Peaks of every rank: `values` is world_size × (kMemoryCategories + 3): bytes by category, the total,
// then the rank's MoE routing imbalance, most and fewest rows (StepMetrics::moe_imbalance and
// moe_imbalance_min; written only when above 0).
Json ranks_memory_record(const std::vector<double>& values, int world_size);

}  // namespace loom::exec
