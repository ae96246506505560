// Metrics read off a simulated step: per-stage busy time, the pipeline bubble, the critical path
// and the communication it exposes, and a one-line answer to "what limits this plan".
#pragma once

#include <string>
#include <vector>

#include "sim/cost_model.h"
#include "sim/engine.h"
#include "sim/step_graph.h"

namespace loom::sim {

struct ExposedComm {
  double tp_s = 0;  // TP collectives not hidden behind compute
  double pp_s = 0;  // pipeline sends on the critical path
  double dp_s = 0;  // gradient reduction / parameter gathers on the critical path
  double cp_s = 0;  // context-parallel KV exchange not hidden behind attention
  double ep_s = 0;  // expert-parallel token dispatch and combine (all-to-alls)
  double total() const { return tp_s + pp_s + dp_s + cp_s + ep_s; }
};

struct StageTiming {
  double busy_s = 0;  // compute stream busy with F/B/W
  double optimizer_s = 0;
  double pipeline_end_s = 0;  // end of its last F/B/W
};

struct CriticalStep {
  std::string name;  // "F3 mb7", "all_reduce dp", ...
  int stage = 0;
  double start_s = 0;
  double contribution_s = 0;  // time this op adds to the step along the path
};

struct StepStats {
  std::vector<StageTiming> stages;
  double bubble_fraction = 0;
  ExposedComm exposed;
  std::vector<CriticalStep> critical_path;
  std::string limited_by;  // one line: what dominates the critical path
};

// Trace/critical-path name of an op: "F3 mb7", "send B2 mb1", "reduce_scatter dp", "optimizer".
std::string op_label(const Op& op);

// Bubble: the mean over stages of the time each compute stream idles before the pipeline's last
// F/B/W ends, as a fraction of the step. Equal stages and free communication give
// (p − 1)/(m + p − 1) for GPipe and 1F1B.
double bubble_fraction(const StepGraph& graph, const Timeline& timeline);

// `name_path`: fill in the critical path's op names (for listings; the planner skips them).
StepStats step_stats(const StepGraph& graph, const Timeline& timeline,
                     const std::vector<std::vector<ChunkCost>>& chunks, bool name_path = true);

}  // namespace loom::sim
