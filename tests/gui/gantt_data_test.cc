#include "gui/models/gantt_data.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/units.h"
#include "gui/models/plan_summary.h"
#include "sim/step_metrics.h"
#include "small_case.h"

namespace loom::gui {
namespace {

const PlanDetail& pipelined_detail() {
  static const PlanDetail detail = [] {
    const PlanOutcome& out = testing::small_outcome();
    const int plan = testing::first_plan_with_pp(out.result, 4);
    EXPECT_GE(plan, 0);
    auto d = simulate_detail(out.specs, out.result.plans[plan].config);
    EXPECT_TRUE(d) << d.error().message;
    return *d;
  }();
  return detail;
}

TEST(GuiGanttData, OneComputeRowPerStageAndEveryOpOnce) {
  const PlanDetail& d = pipelined_detail();
  const GanttData g = build_gantt(d);
  int compute_rows = 0;
  std::size_t slices = 0;
  for (const auto& row : g.rows) {
    compute_rows += row.is_compute();
    EXPECT_TRUE(row.is_compute() || !row.slices.empty()) << row.label;
    slices += row.slices.size();
    for (std::size_t i = 1; i < row.slices.size(); ++i)
      EXPECT_LE(row.slices[i - 1].end_s, row.slices[i].start_s + 1e-12);
    for (const auto& s : row.slices) EXPECT_EQ(d.sim.graph.op(s.op).stage, row.stage);
  }
  EXPECT_EQ(compute_rows, 4);
  EXPECT_EQ(slices, d.sim.graph.size());
  EXPECT_DOUBLE_EQ(g.makespan_s, ns_to_s(d.sim.timeline.makespan));
  // Communication has rows of its own: pipeline sends exist with pp 4.
  bool pipe_row = false;
  for (const auto& row : g.rows) pipe_row = pipe_row || row.stream == sim::StreamKind::kPipe;
  EXPECT_TRUE(pipe_row);
}

TEST(GuiGanttData, ShadedBubblesAddUpToTheSimulatorsBubble) {
  const PlanDetail& d = pipelined_detail();
  const GanttData g = build_gantt(d);
  ASSERT_GT(d.sim.bubble_fraction, 0);
  EXPECT_NEAR(g.bubble_s / 4 / g.makespan_s, d.sim.bubble_fraction, 1e-6);
  for (const auto& row : g.rows)
    for (const auto& b : row.bubbles) {
      EXPECT_LT(b.start_s, b.end_s);
      EXPECT_LE(b.end_s, g.pipeline_end_s + 1e-12);
    }
}

TEST(GuiGanttData, HitTestingFindsTheSliceUnderATime) {
  const PlanDetail& d = pipelined_detail();
  const GanttData g = build_gantt(d);
  const GanttRow& row = g.rows.front();
  ASSERT_TRUE(row.is_compute());
  ASSERT_GE(row.slices.size(), 3u);
  const GanttSlice& s = row.slices[2];
  EXPECT_EQ(slice_at(row, (s.start_s + s.end_s) / 2, 0), s.op);
  // In a bubble between two passes, only a tolerance reaching a neighbouring slice finds one.
  const GanttInterval* inner = nullptr;
  for (const auto& b : row.bubbles)
    if (b.start_s > 0 && b.end_s < g.pipeline_end_s - 1e-9) inner = &b;
  ASSERT_NE(inner, nullptr);
  const GanttInterval& gap = *inner;
  const double mid = (gap.start_s + gap.end_s) / 2;
  EXPECT_EQ(slice_at(row, mid, 0), -1);
  EXPECT_GE(slice_at(row, mid, gap.end_s - gap.start_s), 0);
  EXPECT_EQ(slice_at(row, -1.0, 0.5), -1);
}

TEST(GuiGanttData, TooltipNamesTheSliceAndItsKernels) {
  const PlanDetail& d = pipelined_detail();
  const GanttData g = build_gantt(d);
  const GanttSlice& s = g.rows.front().slices.front();
  const std::string tip = slice_tooltip(d, s.op);
  EXPECT_NE(tip.find(sim::op_label(d.sim.graph.op(s.op))), std::string::npos) << tip;
  EXPECT_NE(tip.find("stage 0"), std::string::npos);
  EXPECT_NE(tip.find('%'), std::string::npos) << "kernel shares expected: " << tip;
}

TEST(GuiGanttData, PassesCarryTheirKernelsAndOtherOpsDoNot) {
  const PlanDetail& d = pipelined_detail();
  int passes = 0, others = 0;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(d.sim.graph.size()); ++i) {
    const sim::OpKind kind = d.sim.graph.op(i).kind;
    const sim::PassCost* pass = pass_of(d, i);
    if (kind == sim::OpKind::kForward || kind == sim::OpKind::kBackward || kind == sim::OpKind::kWeightGrad) {
      ASSERT_NE(pass, nullptr);
      ASSERT_FALSE(pass->segments.empty());
      double sum = 0;
      for (const auto& seg : pass->segments) sum += seg.seconds;
      EXPECT_NEAR(sum, pass->seconds, 1e-9 * pass->seconds);
      ++passes;
    } else {
      EXPECT_EQ(pass, nullptr);
      ++others;
    }
  }
  EXPECT_GT(passes, 0);
  EXPECT_GT(others, 0);
}

TEST(GuiPlanSummary, SummaryAndCriticalPathComeFromTheSimulation) {
  const PlanDetail& d = pipelined_detail();
  const auto lines = plan_summary(d);
  bool step = false, exposed = false;
  for (const auto& l : lines) {
    if (l.label == "step time") step = l.value.find(fmt::format("{:.3f}", d.sim.step_time_s)) != std::string::npos;
    if (l.label == "exposed comm") exposed = l.value.find("TP") != std::string::npos;
  }
  EXPECT_TRUE(step);
  EXPECT_TRUE(exposed);
  const auto runs = critical_path_runs(d.sim, 3);
  ASSERT_FALSE(runs.empty());
  EXPECT_LE(runs.size(), 3u);
  ASSERT_FALSE(d.critical_ops.empty());
  EXPECT_EQ(d.critical_ops.size(), d.sim.critical_path.size());
}

TEST(GuiPlanSummary, ComparisonMarksTheBetterPlan) {
  const PlanResult& result = testing::small_outcome().result;
  const PlanRow& fast = result.plans.front();
  const PlanRow& slow = result.plans.back();
  ASSERT_LT(fast.metrics.step_time_s, slow.metrics.step_time_s);
  for (const auto& l : compare_plans(fast, slow)) {
    if (l.label == "step time") {
      EXPECT_EQ(l.better, -1);
    }
    if (l.label == "tokens/s") {
      EXPECT_EQ(l.better, -1);
      EXPECT_EQ(l.delta.front(), '-');
    }
  }
  for (const auto& l : compare_plans(fast, fast)) EXPECT_EQ(l.better, 0) << l.label;
}

}  // namespace
}  // namespace loom::gui
