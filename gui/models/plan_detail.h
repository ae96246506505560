// One plan in detail, for the views of the selected row: the memory model's per-stage breakdown
// and a simulated step with its graph and timeline kept (Gantt, tooltips, trace export), plus
// the ops on the critical path. Computed off the UI thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/spec_inputs.h"
#include "planner/memory_model.h"
#include "sim/simulator.h"

namespace loom::gui {

struct PlanDetail {
  ParallelConfig config;
  std::string framework;  // the software stack simulated under (TrainingSpec::framework; "" none)
  MemoryReport memory;
  sim::SimResult sim;
  std::vector<std::int32_t> critical_ops;  // op indices, first to last
  std::vector<bool> on_critical_path;      // per op
};

Result<PlanDetail> simulate_detail(const Specs& specs, const ParallelConfig& config);

// Chrome/Perfetto trace of the detail's step, exactly as `loom sim --trace` writes it.
std::string trace_json(const Specs& specs, const PlanDetail& detail);

}  // namespace loom::gui
