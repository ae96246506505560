#include "gui/models/plan_detail.h"

#include "sim/engine.h"
#include "sim/trace.h"

namespace loom::gui {

Result<PlanDetail> simulate_detail(const cli::Specs& specs, const ParallelConfig& config) {
  PlanDetail d;
  d.config = config;
  d.memory = estimate_memory(specs.model, specs.training, config, specs.cluster);
  sim::SimOptions options;
  options.keep_graph = true;
  options.record_segments = true;
  // The trace's memory counter, as `loom sim --trace` feeds it: what a stage holds all step, and
  // the activations one forward of one chunk adds.
  for (const auto& s : d.memory.stages) {
    options.static_bytes_per_stage.push_back(s.total_bytes() - s.activations_bytes);
    options.activation_bytes_per_forward.push_back(s.activation_bytes_per_layer * s.layers / config.vpp);
  }
  auto result = sim::simulate(specs.model, specs.training, config, specs.cluster, options);
  if (!result) return result.error();
  d.sim = std::move(*result);
  d.critical_ops = sim::critical_path(d.sim.graph, d.sim.timeline);
  d.on_critical_path.assign(d.sim.graph.size(), false);
  for (std::int32_t op : d.critical_ops) d.on_critical_path[op] = true;
  return d;
}

std::string trace_json(const cli::Specs& specs, const PlanDetail& detail) {
  return sim::chrome_trace_json(detail.sim, specs.model.name + " " + describe(detail.config));
}

}  // namespace loom::gui
