#include "gui/models/chart_data.h"

#include <gtest/gtest.h>

#include "core/units.h"
#include "small_case.h"

namespace loom::gui {
namespace {

using testing::small_outcome;

TEST(GuiChartData, MemoryBarsStackToEachStagesTotal) {
  const PlanOutcome& out = small_outcome();
  const int plan = testing::first_plan_with_pp(out.result, 4);
  ASSERT_GE(plan, 0);
  const ParallelConfig& c = out.result.plans[plan].config;
  const MemoryReport report = estimate_memory(out.specs.model, out.specs.training, c, out.specs.cluster);
  const MemoryBars bars = memory_bars(report);
  ASSERT_EQ(bars.gib.size(), 4u);
  ASSERT_EQ(bars.stage_labels.size(), 4u);
  EXPECT_DOUBLE_EQ(bars.capacity_gib, bytes_to_gib(report.capacity_bytes));
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_NEAR(bars.total_gib(s), bytes_to_gib(report.stages[s].total_bytes()), 1e-9);
    EXPECT_DOUBLE_EQ(bars.gib[s][3], bytes_to_gib(report.stages[s].activations_bytes));
  }
  // The table's memory column is the most loaded stage, the tallest bar.
  EXPECT_NEAR(bars.max_total_gib(), out.result.plans[plan].metrics.memory_gib.total, 1e-6);
}

bool dominates(const ParetoPoint& a, const ParetoPoint& b) {
  return a.memory_gib <= b.memory_gib && a.tokens_per_s >= b.tokens_per_s &&
         (a.memory_gib < b.memory_gib || a.tokens_per_s > b.tokens_per_s);
}

TEST(GuiChartData, ParetoFrontierIsExactlyTheUndominatedPlans) {
  const PlanResult& result = small_outcome().result;
  const auto points = pareto_points(result);
  ASSERT_EQ(points.size(), result.plans.size());
  const auto frontier = pareto_frontier(points);
  ASSERT_GE(frontier.size(), 2u);
  for (const auto& p : points) {
    bool dominated = false;
    for (const auto& q : points) dominated = dominated || dominates(q, p);
    if (p.frontier) {
      EXPECT_FALSE(dominated) << p.plan_index;
    }
    // Off the frontier: beaten, or a tie with a better-ranked frontier plan.
    if (!p.frontier && !dominated) {
      bool tied = false;
      for (const auto& f : frontier)
        tied =
            tied || (f.memory_gib == p.memory_gib && f.tokens_per_s == p.tokens_per_s && f.plan_index < p.plan_index);
      EXPECT_TRUE(tied) << p.plan_index;
    }
  }
  for (std::size_t i = 1; i < frontier.size(); ++i) {
    EXPECT_LT(frontier[i - 1].memory_gib, frontier[i].memory_gib);
    EXPECT_LT(frontier[i - 1].tokens_per_s, frontier[i].tokens_per_s);
  }
  // The fastest throughput is on the frontier (with the least memory among plans that reach it).
  EXPECT_DOUBLE_EQ(frontier.back().tokens_per_s, result.plans[0].metrics.tokens_per_s);
}

TEST(GuiChartData, ParetoOfASubset) {
  const PlanResult& result = small_outcome().result;
  const std::vector<int> subset = {5, 9, 17};
  const auto points = pareto_points(result, subset);
  ASSERT_EQ(points.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(points[i].plan_index, subset[i]);
  EXPECT_TRUE(pareto_points(result, {}).empty());
}

TEST(GuiChartData, HeatMapCellsHoldTheBestPlanOfTheirLayout) {
  const PlanResult& result = small_outcome().result;
  const HeatMap map = tp_pp_heat_map(result);
  ASSERT_FALSE(map.tp_values.empty());
  ASSERT_FALSE(map.pp_values.empty());
  EXPECT_EQ(map.cells.size(), map.tp_values.size() * map.pp_values.size());
  int plans = 0;
  for (std::size_t pi = 0; pi < map.pp_values.size(); ++pi)
    for (std::size_t ti = 0; ti < map.tp_values.size(); ++ti) {
      const HeatCell& cell = map.cell(ti, pi);
      EXPECT_EQ(cell.tp, map.tp_values[ti]);
      EXPECT_EQ(cell.pp, map.pp_values[pi]);
      double best = 0;
      int count = 0;
      for (const auto& row : result.plans)
        if (row.config.tp == cell.tp && row.config.pp == cell.pp)
          best = std::max(best, row.metrics.tokens_per_s), ++count;
      EXPECT_EQ(cell.plans, count);
      EXPECT_DOUBLE_EQ(cell.best_tokens_per_s, best);
      if (count == 0) {
        EXPECT_EQ(cell.best_plan, -1);
      } else {
        EXPECT_DOUBLE_EQ(result.plans[cell.best_plan].metrics.tokens_per_s, best);
      }
      plans += cell.plans;
    }
  EXPECT_EQ(plans, static_cast<int>(result.plans.size()));
  EXPECT_DOUBLE_EQ(map.max_tokens_per_s, result.plans[0].metrics.tokens_per_s);
  // The map ends one enumerated size past the largest that fits, so it shows where fitting stops.
  int largest_tp = 0;
  for (const auto& row : result.plans) largest_tp = std::max(largest_tp, row.config.tp);
  int next_tp = 0;
  for (const auto& r : result.rejected)
    if (r.config.tp > largest_tp && (next_tp == 0 || r.config.tp < next_tp)) next_tp = r.config.tp;
  EXPECT_EQ(map.tp_values.back(), next_tp > 0 ? next_tp : largest_tp);
}

}  // namespace
}  // namespace loom::gui

namespace loom::gui {
namespace {

TEST(GuiChartData, HeatMapStopsOneSizePastTheLargestThatFits) {
  PlanResult result;
  auto plan = [](int tp, int pp, double tokens_per_s) {
    PlanRow row;
    row.config.tp = tp, row.config.pp = pp;
    row.metrics.tokens_per_s = tokens_per_s;
    return row;
  };
  result.plans = {plan(2, 1, 300), plan(1, 2, 200), plan(2, 2, 100)};
  for (int tp : {4, 8, 16})
    for (int pp : {1, 4, 8}) {
      Rejection r;
      r.config.tp = tp, r.config.pp = pp;
      result.rejected.push_back(r);
    }
  const HeatMap map = tp_pp_heat_map(result);
  EXPECT_EQ(map.tp_values, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(map.pp_values, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(map.cell(1, 0).best_plan, 0);  // tp2 pp1
  EXPECT_EQ(map.cell(2, 0).best_plan, -1);
  // Nothing fits: every enumerated size stays.
  result.plans.clear();
  EXPECT_EQ(tp_pp_heat_map(result).tp_values, (std::vector<int>{4, 8, 16}));
}

}  // namespace
}  // namespace loom::gui
