#include "gui/models/plan_table_model.h"

#include <gtest/gtest.h>

#include "core/json_io.h"
#include "gui/models/rejected_model.h"
#include "small_case.h"

namespace loom::gui {
namespace {

using testing::small_outcome;

double sort_value(const QAbstractItemModel& m, int row, int column) {
  return m.data(m.index(row, column), PlanTableModel::kSortRole).toDouble();
}

TEST(GuiPlanTableModel, OneRowPerPlanWithThePlanColumns) {
  const PlanOutcome& out = small_outcome();
  ASSERT_TRUE(out.ok()) << out.error;
  ASSERT_GT(out.result.plans.size(), 10u);
  PlanTableModel model;
  model.set_result(out.result);
  ASSERT_EQ(model.rowCount(), static_cast<int>(out.result.plans.size()));
  EXPECT_EQ(model.columnCount(), PlanTableModel::kColumnCount);
  EXPECT_EQ(model.headerData(PlanTableModel::kTokensPerS, Qt::Horizontal).toString(), "tokens/s");
  for (int r : {0, 3, model.rowCount() - 1}) {
    const PlanRow& row = out.result.plans[r];
    EXPECT_EQ(model.data(model.index(r, PlanTableModel::kRank)).toInt(), r + 1);
    EXPECT_EQ(model.data(model.index(r, PlanTableModel::kTp)).toInt(), row.config.tp);
    EXPECT_EQ(model.data(model.index(r, PlanTableModel::kPp)).toInt(), row.config.pp);
    EXPECT_EQ(model.data(model.index(r, PlanTableModel::kSchedule)).toString(), to_string(row.config.schedule));
    EXPECT_DOUBLE_EQ(sort_value(model, r, PlanTableModel::kTokensPerS), row.metrics.tokens_per_s);
    EXPECT_DOUBLE_EQ(sort_value(model, r, PlanTableModel::kMemoryGib), row.metrics.memory_gib.total);
    EXPECT_EQ(model.data(model.index(r, PlanTableModel::kStepTime)).toString(),
              QString::number(row.metrics.step_time_s, 'f', 3));
  }
}

TEST(GuiPlanTableModel, ProxySortsNumericallyBothWays) {
  PlanTableModel model;
  model.set_result(small_outcome().result);
  PlanFilterProxy proxy;
  proxy.setSourceModel(&model);
  proxy.sort(PlanTableModel::kMemoryGib, Qt::AscendingOrder);
  for (int r = 1; r < proxy.rowCount(); ++r)
    ASSERT_LE(sort_value(proxy, r - 1, PlanTableModel::kMemoryGib), sort_value(proxy, r, PlanTableModel::kMemoryGib));
  proxy.sort(PlanTableModel::kTokensPerS, Qt::DescendingOrder);
  for (int r = 1; r < proxy.rowCount(); ++r)
    ASSERT_GE(sort_value(proxy, r - 1, PlanTableModel::kTokensPerS), sort_value(proxy, r, PlanTableModel::kTokensPerS));
  // The proxy maps back to the plan each row shows.
  const int plan = proxy.plan_index(0);
  EXPECT_DOUBLE_EQ(model.row(plan)->metrics.tokens_per_s, sort_value(proxy, 0, PlanTableModel::kTokensPerS));
  EXPECT_EQ(proxy.proxy_row(plan), 0);
}

TEST(GuiPlanTableModel, ConfigFilterMatchesWholeSizesAndNamePrefixes) {
  ParallelConfig c;
  c.tp = 8, c.pp = 4, c.dp = 2, c.zero = 1, c.vpp = 2;
  c.recompute = Recompute::kSelective;
  c.schedule = Schedule::kInterleaved;
  EXPECT_TRUE(config_matches(c, ""));
  EXPECT_TRUE(config_matches(c, "tp8 pp4"));
  EXPECT_TRUE(config_matches(c, "TP8  inter sel z1"));
  EXPECT_FALSE(config_matches(c, "tp80"));
  EXPECT_FALSE(config_matches(c, "tp8 pp2"));
  EXPECT_TRUE(config_matches(c, "cp1"));
  c.cp = 2;
  c.cp_comm = CpComm::kA2A;
  EXPECT_TRUE(config_matches(c, "tp8 cp2 a2a"));
  EXPECT_FALSE(config_matches(c, "cp1"));
  c.tp = 80;
  EXPECT_FALSE(config_matches(c, "tp8"));
  EXPECT_FALSE(config_matches(c, "full"));
  // A row's stack: its name or a prefix of it, beside the configuration's tokens.
  EXPECT_TRUE(config_matches(c, "tp80 megatron-lm", "megatron-lm-2021"));
  EXPECT_TRUE(config_matches(c, "megatron-lm-2021", "megatron-lm-2021"));
  EXPECT_FALSE(config_matches(c, "deepspeed", "megatron-lm-2021"));
  EXPECT_FALSE(config_matches(c, "megatron"));
}

TEST(GuiPlanTableModel, FilterKeepsExactlyTheMatchingPlans) {
  const PlanResult& result = small_outcome().result;
  PlanTableModel model;
  model.set_result(result);
  PlanFilterProxy proxy;
  proxy.setSourceModel(&model);
  proxy.set_config_filter("pp2 z1");
  int expected = 0;
  for (const auto& row : result.plans) expected += row.config.pp == 2 && row.config.zero == 1;
  ASSERT_GT(expected, 0);
  EXPECT_EQ(proxy.rowCount(), expected);
  for (int r = 0; r < proxy.rowCount(); ++r) {
    const PlanRow* row = model.row(proxy.plan_index(r));
    EXPECT_EQ(row->config.pp, 2);
    EXPECT_EQ(row->config.zero, 1);
  }
  proxy.set_config_filter("");
  proxy.set_max_memory_gib(30);
  expected = 0;
  for (const auto& row : result.plans) expected += row.metrics.memory_gib.total <= 30;
  EXPECT_EQ(proxy.rowCount(), expected);
  EXPECT_LT(proxy.rowCount(), model.rowCount());
}

TEST(GuiRejectedModel, RowsCarryTheRuleAndReason) {
  const PlanResult& result = small_outcome().result;
  ASSERT_FALSE(result.rejected.empty());
  RejectedTableModel model;
  model.set_rejections(result.rejected);
  ASSERT_EQ(model.rowCount(), static_cast<int>(result.rejected.size()));
  for (int r : {0, model.rowCount() - 1}) {
    EXPECT_EQ(model.data(model.index(r, RejectedTableModel::kReason)).toString().toStdString(),
              result.rejected[r].reason);
    EXPECT_EQ(model.data(model.index(r, RejectedTableModel::kRule)).toString().toStdString(), result.rejected[r].rule);
    EXPECT_EQ(model.data(model.index(r, RejectedTableModel::kTp)).toInt(), result.rejected[r].config.tp);
  }
  const auto counts = rejection_counts(result.rejected);
  int total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    total += counts[i].second;
    if (i > 0) {
      EXPECT_GE(counts[i - 1].second, counts[i].second);
    }
  }
  EXPECT_EQ(total, model.rowCount());
}

TEST(GuiPlanRequest, BadInputIsOneLineNotAThrow) {
  PlanRequest bad = testing::small_request();
  bad.specs.model = "no-such-model";
  const PlanOutcome a = run_plan_request(bad);
  EXPECT_FALSE(a.ok());
  EXPECT_NE(a.error.find("no-such-model"), std::string::npos) << a.error;
  EXPECT_EQ(a.error.find('\n'), std::string::npos);
  PlanRequest bad_list = testing::small_request();
  bad_list.config.tp = "4,x";
  EXPECT_NE(run_plan_request(bad_list).error.find("--tp"), std::string::npos);
}

TEST(GuiPlanRequest, ReportsProgressUpToTheTotal) {
  std::size_t calls = 0, last_done = 0, last_total = 0;
  const PlanOutcome out = run_plan_request(testing::small_request(), [&](std::size_t done, std::size_t total) {
    ++calls;  // the search serialises these calls
    last_done = std::max(last_done, done);
    last_total = total;
  });
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_GT(calls, 0u);
  EXPECT_GT(last_total, 0u);
  EXPECT_EQ(last_done, last_total);
}

TEST(GuiPlanRequest, ProgressOverSeveralStacksRisesToTheTotal) {
  PlanRequest r = testing::small_request();
  r.specs.framework = "megatron-core,torchtitan";
  std::size_t most_done = 0, last_total = 0, halfway = 0;
  bool one_total = true;
  const PlanOutcome out = run_plan_request(r, [&](std::size_t done, std::size_t total) {
    one_total = one_total && (last_total == 0 || total == last_total);
    most_done = std::max(most_done, done);
    last_total = total;
    if (2 * done == total) ++halfway;  // the first stack's search complete
  });
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(out.stacks.size(), 2u);
  EXPECT_TRUE(one_total);  // one scale over both searches, not each its own
  EXPECT_GT(last_total, 0u);
  EXPECT_EQ(halfway, 1u);
  EXPECT_EQ(most_done, last_total);
}

TEST(GuiPlanRequest, RestrictionsReachTheSearch) {
  PlanRequest r = testing::small_request();
  r.config.tp = "2";
  r.config.schedule = "1f1b,gpipe";
  const PlanOutcome out = run_plan_request(r);
  ASSERT_TRUE(out.ok()) << out.error;
  ASSERT_FALSE(out.result.plans.empty());
  for (const auto& row : out.result.plans) {
    EXPECT_EQ(row.config.tp, 2);
    EXPECT_TRUE(row.config.schedule == Schedule::k1F1B || row.config.schedule == Schedule::kGPipe);
  }
}

TEST(GuiPlanRequest, PlanFileParsesBackAsThePlan) {
  const PlanOutcome& out = small_outcome();
  const PlanRow& row = out.result.plans[2];
  auto json = parse_json(plan_file_text(out.specs, row), "plan.json");
  ASSERT_TRUE(json) << json.error().message;
  auto plan = plan_from_json(*json);
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->config, row.config);
  EXPECT_EQ(plan->model.name, "llama2-7b");
  EXPECT_EQ(plan->cluster, "dgx-a100-80gb");
  EXPECT_EQ(plan->training.gpus, 16);
  EXPECT_EQ(plan->training.global_batch, 64);
  ASSERT_TRUE(plan->predicted.has_value());
  EXPECT_DOUBLE_EQ(plan->predicted->step_time_s, row.metrics.step_time_s);
}

}  // namespace
}  // namespace loom::gui
