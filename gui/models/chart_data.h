// Data behind the charts, computed from the planner's results with no widgets: stacked memory
// bars per pipeline stage against the GPU's capacity, the tokens/s-versus-memory scatter with its
// Pareto frontier, and the TP×PP heat map of the best throughput per cell.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "planner/memory_model.h"
#include "planner/search.h"

namespace loom::gui {

struct MemoryBars {
  // "buffers" holds communication buffers and the framework reserve, as in `loom plan`'s buf column.
  static constexpr std::array<const char*, 5> kCategories = {"params", "grads", "optimizer", "activations", "buffers"};
  std::vector<std::string> stage_labels;
  std::vector<std::array<double, 5>> gib;  // per stage, per category
  double capacity_gib = 0;
  double total_gib(std::size_t stage) const;
  double max_total_gib() const;
};

MemoryBars memory_bars(const MemoryReport& memory);

struct ParetoPoint {
  double memory_gib = 0;  // the most loaded stage
  double tokens_per_s = 0;
  int plan_index = 0;     // into PlanResult::plans
  bool frontier = false;  // no other plan is both faster and smaller
};

// Points for every plan, or for the given plans (say, those the table's filter shows); frontier
// points are those no other point beats on both axes (ties: the better-ranked plan).
std::vector<ParetoPoint> pareto_points(const PlanResult& result);
std::vector<ParetoPoint> pareto_points(const PlanResult& result, const std::vector<int>& plan_indices);
// The frontier, by increasing memory.
std::vector<ParetoPoint> pareto_frontier(const std::vector<ParetoPoint>& points);

struct HeatCell {
  int tp = 0, pp = 0;
  int plans = 0;       // plans in this cell
  int best_plan = -1;  // fastest plan in the cell, -1 when none fits
  double best_tokens_per_s = 0;
};

struct HeatMap {
  // Ascending: every size with a fitting plan, and the enumerated sizes between them, plus the
  // next larger size where nothing fits (so the map shows where feasibility ends).
  std::vector<int> tp_values, pp_values;
  std::vector<HeatCell> cells;  // pp-major: cells[pp_i * tp_values.size() + tp_i]
  double max_tokens_per_s = 0;
  const HeatCell& cell(std::size_t tp_i, std::size_t pp_i) const { return cells[pp_i * tp_values.size() + tp_i]; }
};

HeatMap tp_pp_heat_map(const PlanResult& result);
HeatMap tp_pp_heat_map(const PlanResult& result, const std::vector<int>& plan_indices);

}  // namespace loom::gui
