#include "gui/models/chart_data.h"

#include <algorithm>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "core/units.h"

namespace loom::gui {

namespace {

std::vector<int> all_plans(const PlanResult& result) {
  std::vector<int> all(result.plans.size());
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// The enumerated sizes up to the first one past the largest that has a fitting plan (all of
// them when nothing fits).
std::vector<int> up_to_one_past_fitting(const std::set<int>& sizes, const PlanResult& result,
                                        int ParallelConfig::*field) {
  int largest_fitting = 0;
  for (const auto& row : result.plans) largest_fitting = std::max(largest_fitting, row.config.*field);
  std::vector<int> out;
  for (int v : sizes) {
    if (largest_fitting > 0 && !out.empty() && out.back() > largest_fitting) break;
    out.push_back(v);
  }
  return out;
}

}  // namespace

double MemoryBars::total_gib(std::size_t stage) const {
  double sum = 0;
  for (double v : gib[stage]) sum += v;
  return sum;
}

double MemoryBars::max_total_gib() const {
  double m = 0;
  for (std::size_t s = 0; s < gib.size(); ++s) m = std::max(m, total_gib(s));
  return m;
}

MemoryBars memory_bars(const MemoryReport& memory) {
  MemoryBars bars;
  bars.capacity_gib = bytes_to_gib(memory.capacity_bytes);
  for (const StageMemory& s : memory.stages) {
    bars.stage_labels.push_back(fmt::format("{}", s.stage));
    bars.gib.push_back({bytes_to_gib(s.params_bytes), bytes_to_gib(s.grads_bytes), bytes_to_gib(s.optimizer_bytes),
                        bytes_to_gib(s.activations_bytes), bytes_to_gib(s.buffers_bytes + s.reserve_bytes)});
  }
  return bars;
}

std::vector<ParetoPoint> pareto_points(const PlanResult& result, const std::vector<int>& plan_indices) {
  std::vector<ParetoPoint> points;
  for (int i : plan_indices) {
    const PlanRow& row = result.plans[i];
    points.push_back({row.metrics.memory_gib.total, row.metrics.tokens_per_s, i, false});
  }
  for (int i : pareto_front(result.plans, plan_indices))
    for (auto& p : points)
      if (p.plan_index == i) p.frontier = true;
  return points;
}

std::vector<ParetoPoint> pareto_points(const PlanResult& result) { return pareto_points(result, all_plans(result)); }

std::vector<ParetoPoint> pareto_frontier(const std::vector<ParetoPoint>& points) {
  std::vector<ParetoPoint> f;
  for (const auto& p : points)
    if (p.frontier) f.push_back(p);
  std::stable_sort(f.begin(), f.end(), [](const auto& a, const auto& b) { return a.memory_gib < b.memory_gib; });
  return f;
}

HeatMap tp_pp_heat_map(const PlanResult& result, const std::vector<int>& plan_indices) {
  HeatMap map;
  std::set<int> tps, pps;
  for (const auto& row : result.plans) tps.insert(row.config.tp), pps.insert(row.config.pp);
  for (const auto& r : result.rejected) tps.insert(r.config.tp), pps.insert(r.config.pp);
  map.tp_values = up_to_one_past_fitting(tps, result, &ParallelConfig::tp);
  map.pp_values = up_to_one_past_fitting(pps, result, &ParallelConfig::pp);
  map.cells.resize(map.tp_values.size() * map.pp_values.size());
  for (std::size_t pi = 0; pi < map.pp_values.size(); ++pi)
    for (std::size_t ti = 0; ti < map.tp_values.size(); ++ti) {
      HeatCell& c = map.cells[pi * map.tp_values.size() + ti];
      c.tp = map.tp_values[ti];
      c.pp = map.pp_values[pi];
    }
  auto index_of = [](const std::vector<int>& v, int x) {
    return static_cast<std::size_t>(std::lower_bound(v.begin(), v.end(), x) - v.begin());
  };
  for (int i : plan_indices) {
    const PlanRow& row = result.plans[i];
    HeatCell& c = map.cells[index_of(map.pp_values, row.config.pp) * map.tp_values.size() +
                            index_of(map.tp_values, row.config.tp)];
    ++c.plans;
    if (c.best_plan < 0 || row.metrics.tokens_per_s > c.best_tokens_per_s) {
      c.best_plan = i;
      c.best_tokens_per_s = row.metrics.tokens_per_s;
    }
    map.max_tokens_per_s = std::max(map.max_tokens_per_s, row.metrics.tokens_per_s);
  }
  return map;
}

HeatMap tp_pp_heat_map(const PlanResult& result) { return tp_pp_heat_map(result, all_plans(result)); }

}  // namespace loom::gui
