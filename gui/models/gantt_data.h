// The pipeline Gantt's data, read off a simulated step: one row per pipeline stage for compute
// (F, B, W, optimizer) and a thin row per communication stream that carries anything (pipeline
// sends, data-parallel reductions and ZeRO gathers), the idle gaps of each compute row
// before the pipeline ends (the bubble), hit-testing and the tooltip of a slice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gui/models/plan_detail.h"
#include "sim/step_graph.h"

namespace loom::gui {

struct GanttSlice {
  double start_s = 0;
  double end_s = 0;
  std::int32_t op = 0;
  sim::OpKind kind = sim::OpKind::kForward;
};

struct GanttInterval {
  double start_s = 0;
  double end_s = 0;
};

struct GanttRow {
  int stage = 0;
  sim::StreamKind stream = sim::StreamKind::kCompute;
  std::string label;                   // "stage 3", or the stream's name ("dp comm")
  std::vector<GanttSlice> slices;      // by start time (a stream runs its ops in order)
  std::vector<GanttInterval> bubbles;  // compute rows only
  bool is_compute() const { return stream == sim::StreamKind::kCompute; }
};

struct GanttData {
  std::vector<GanttRow> rows;
  double makespan_s = 0;
  double pipeline_end_s = 0;  // end of the last F/B/W on any stage
  double bubble_s = 0;        // total of every compute row's bubble intervals
};

GanttData build_gantt(const PlanDetail& detail);

// The op under time `t_s` on `row`, or within `tolerance_s` of it (the nearest); -1 when none.
std::int32_t slice_at(const GanttRow& row, double t_s, double tolerance_s);

// The kernels and TP communication of a forward/backward/weight pass (nullptr for other ops).
const sim::PassCost* pass_of(const PlanDetail& detail, std::int32_t op);

// Several lines for a tooltip: name, stage, times, and for passes their largest kernels and TP
// communication; marks ops on the critical path.
std::string slice_tooltip(const PlanDetail& detail, std::int32_t op);

}  // namespace loom::gui
