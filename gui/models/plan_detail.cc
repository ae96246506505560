#include "gui/models/plan_detail.h"

#include "planner/search.h"
#include "sim/engine.h"
#include "sim/trace.h"

namespace loom::gui {

Result<PlanDetail> simulate_detail(const Specs& specs, const ParallelConfig& config) {
  PlanDetail d;
  d.config = config;
  d.framework = specs.training.framework;
  d.memory = estimate_memory(specs.model, specs.training, config, specs.cluster);
  const sim::SimOptions options = detailed_sim_options(d.memory, config);
  auto result = sim::simulate(specs.model, specs.training, config, specs.cluster, options);
  if (!result) return result.error();
  d.sim = std::move(*result);
  d.critical_ops = sim::critical_path(d.sim.graph, d.sim.timeline);
  d.on_critical_path.assign(d.sim.graph.size(), false);
  for (std::int32_t op : d.critical_ops) d.on_critical_path[op] = true;
  return d;
}

std::string trace_json(const Specs& specs, const PlanDetail& detail) {
  return sim::chrome_trace_json(detail.sim, specs.model.name + " " + describe(detail.config) +
                                                (detail.framework.empty() ? "" : " under " + detail.framework));
}

}  // namespace loom::gui
