// The main window driven as a person would: type into an input, click a row, click the heat
// map, export; under QT_QPA_PLATFORM=offscreen.
#include "gui/main_window.h"

#include <QBarSet>
#include <QChart>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHelpEvent>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QScatterSeries>
#include <QSpinBox>
#include <QStackedBarSeries>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QToolTip>

#include <gtest/gtest.h>

#include <set>

#include "core/json_io.h"
#include "core/units.h"
#include "gui/detail_panels.h"
#include "gui/gantt_view.h"
#include "gui/heat_map_view.h"
#include "gui/inputs_panel.h"
#include "gui/memory_chart.h"
#include "gui/models/plan_summary.h"
#include "gui/models/plan_table_model.h"
#include "gui/models/rejected_model.h"
#include "gui/pareto_chart.h"
#include "qt_app.h"
#include "sim/step_metrics.h"
#include "small_case.h"

namespace loom::gui {
namespace {

using testing::wait_until;

class GuiMainWindow : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::qt_app();
    window_ = std::make_unique<MainWindow>();
    window_->resize(1400, 900);
    window_->show();
    window_->set_request(testing::small_request());
    ASSERT_TRUE(wait_until([&] { return !window_->busy(); })) << "search did not finish";
    ASSERT_TRUE(window_->outcome().ok()) << window_->outcome().error;
  }
  MainWindow& w() { return *window_; }
  // A "framework's" choice box: the search starts at `before`; picking `after` in the box named `name`
  // reruns it with `after` in the training spec's `field` and in the request's `input`.
  template <typename E>
  void pick_framework_choice(const char* name, E TrainingSpec::*field, std::string SpecInputs::*input, E before,
                             E after) {
    EXPECT_EQ(w().outcome().specs.training.*field, before);
    auto* box = w().inputs()->findChild<QComboBox*>(name);
    ASSERT_NE(box, nullptr);
    box->setCurrentIndex(box->findData(QString(to_string(after))));
    ASSERT_TRUE(wait_until([&] { return w().outcome().specs.training.*field == after && !w().busy(); }));
    ASSERT_GT(w().plans_model()->rowCount(), 0);
    EXPECT_EQ(w().inputs()->request().specs.*input, to_string(after));
  }

  // Clicks the table row showing `plan` and waits for its detail.
  void click_plan(int plan) {
    QTableView* view = w().plans_view();
    const int row = w().plans_proxy()->proxy_row(plan);
    ASSERT_GE(row, 0);
    const QModelIndex index = w().plans_proxy()->index(row, PlanTableModel::kTp);
    view->scrollTo(index);
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, view->visualRect(index).center());
    ASSERT_TRUE(wait_until([&] { return !w().busy() && w().gantt()->has_plan() && w().selected_plan() == plan; }));
  }

  std::unique_ptr<MainWindow> window_;
  QTemporaryDir dir_;
};

TEST_F(GuiMainWindow, ChangingAnInputReplansAndTheTableFollows) {
  QTableView* table = w().plans_view();
  ASSERT_GT(table->model()->rowCount(), 0);
  for (int r = 0; r < w().plans_model()->rowCount(); ++r) ASSERT_EQ(w().plans_model()->row(r)->config.world_size(), 16);

  QSpinBox* gpus = w().inputs()->gpus_box();
  gpus->setFocus();
  gpus->selectAll();
  QTest::keyClicks(gpus, "8");
  QTest::keyClick(gpus, Qt::Key_Enter);
  // The search runs in the background: the window answers at once, still showing the old plans.
  EXPECT_TRUE(w().busy());
  EXPECT_EQ(w().outcome().specs.training.gpus, 16);
  ASSERT_TRUE(wait_until([&] { return w().outcome().specs.training.gpus == 8 && !w().busy(); }));
  ASSERT_GT(table->model()->rowCount(), 0);
  for (int r = 0; r < w().plans_model()->rowCount(); ++r) EXPECT_EQ(w().plans_model()->row(r)->config.world_size(), 8);
  EXPECT_EQ(w().selected_plan(), 0);
  EXPECT_EQ(w().gantt()->detail()->config, w().plans_model()->row(0)->config);
}

TEST_F(GuiMainWindow, SynchronousPipelineSendsReachTheSearch) {
  EXPECT_FALSE(w().outcome().specs.training.pipeline_sends_block);
  w().inputs()->sync_pipeline_sends_box()->click();
  ASSERT_TRUE(wait_until([&] { return w().outcome().specs.training.pipeline_sends_block && !w().busy(); }));
  ASSERT_GT(w().plans_view()->model()->rowCount(), 0);
}

// The MoE inputs count where they apply: the imbalance for a model with routed experts, the shared
// expert's overlap for one with a shared expert. Elsewhere their boxes are disabled and the search runs
// without them (where `loom plan` would refuse them in one line); what was typed comes back with the model.
TEST_F(GuiMainWindow, MoeInputsApplyWhereTheModelHasExperts) {
  QDoubleSpinBox* imbalance = w().inputs()->moe_imbalance_box();
  QCheckBox* overlap = w().inputs()->moe_shared_expert_overlap_box();
  EXPECT_FALSE(imbalance->isEnabled());  // llama2-7b: dense
  EXPECT_FALSE(overlap->isEnabled());
  EXPECT_TRUE(imbalance->toolTip().contains("this model has no routed experts")) << imbalance->toolTip().toStdString();
  imbalance->setValue(1.5);
  ASSERT_TRUE(wait_until([&] { return !w().busy(); }));
  ASSERT_TRUE(w().outcome().ok()) << w().outcome().error;
  EXPECT_EQ(w().outcome().specs.training.moe_imbalance, 1.0);

  const QString hf = QString(LOOM_VALIDATION_DIR) + "/hf_configs/";
  w().inputs()->model_box()->setCurrentText(hf + "mixtral-8x7b/config.json");  // routed experts, no shared one
  EXPECT_TRUE(imbalance->isEnabled());
  EXPECT_FALSE(overlap->isEnabled());
  EXPECT_FALSE(imbalance->toolTip().contains("this model has no routed experts"));
  ASSERT_TRUE(wait_until([&] { return w().outcome().specs.model.moe.active() && !w().busy(); }));
  ASSERT_TRUE(w().outcome().ok()) << w().outcome().error;
  EXPECT_EQ(w().outcome().specs.training.moe_imbalance, 1.5);

  w().inputs()->model_box()->setCurrentText(hf + "qwen1.5-moe-a2.7b/config.json");  // a shared expert too
  EXPECT_TRUE(overlap->isEnabled());
  overlap->click();
  ASSERT_TRUE(wait_until([&] { return w().outcome().specs.training.moe_shared_expert_overlap && !w().busy(); }));
  ASSERT_TRUE(w().outcome().ok()) << w().outcome().error;
  EXPECT_GT(w().outcome().specs.model.moe.shared_ffn, 0);

  w().inputs()->model_box()->setCurrentText("llama2-7b");
  EXPECT_FALSE(imbalance->isEnabled());
  EXPECT_FALSE(overlap->isEnabled());
  ASSERT_TRUE(wait_until([&] { return !w().outcome().specs.model.moe.active() && !w().busy(); }));
  ASSERT_TRUE(w().outcome().ok()) << w().outcome().error;
  EXPECT_EQ(w().outcome().specs.training.moe_imbalance, 1.0);
  EXPECT_FALSE(w().outcome().specs.training.moe_shared_expert_overlap);
  EXPECT_EQ(imbalance->value(), 1.5);  // kept for the next MoE model
  EXPECT_TRUE(overlap->isChecked());
}

// The EP column, as in `loom plan`'s table, is shown for a mixture-of-experts model only; "8 etp1" where
// each expert is whole on its rank.
TEST_F(GuiMainWindow, TheExpertParallelColumnShowsForAMixtureOfExpertsModel) {
  EXPECT_TRUE(w().plans_view()->isColumnHidden(PlanTableModel::kEp));  // llama2-7b: dense
  EXPECT_TRUE(w().rejected_view()->isColumnHidden(RejectedTableModel::kEp));
  PlanRequest moe;
  moe.specs.model = std::string(LOOM_VALIDATION_DIR) + "/hf_configs/mixtral-8x7b/config.json";
  moe.specs.cluster = "dgx-h100";
  moe.specs.gpus = 64;
  moe.specs.global_batch = 256;
  moe.specs.seq = 4096;
  moe.config.tp = "2";
  moe.config.pp = "1";
  moe.config.ep = "1,8";
  moe.config.etp = "tp,1";
  moe.config.micro_batch = "1";
  moe.config.sp = "on";
  w().set_request(moe);
  ASSERT_TRUE(wait_until([&] { return w().outcome().specs.model.moe.active() && !w().busy(); }));
  ASSERT_TRUE(w().outcome().ok()) << w().outcome().error;
  EXPECT_FALSE(w().plans_view()->isColumnHidden(PlanTableModel::kEp));
  EXPECT_FALSE(w().rejected_view()->isColumnHidden(RejectedTableModel::kEp));
  std::set<QString> shown;
  for (int r = 0; r < w().plans_model()->rowCount(); ++r) {
    const ParallelConfig& c = w().plans_model()->row(r)->config;
    const QModelIndex ep = w().plans_model()->index(r, PlanTableModel::kEp);
    EXPECT_EQ(w().plans_model()->data(ep, PlanTableModel::kSortRole).toInt(), c.ep);
    const QString text = w().plans_model()->data(ep).toString();
    EXPECT_EQ(text, c.expert_tp() == c.tp ? QString::number(c.ep) : QString("%1 etp1").arg(c.ep));
    shown.insert(text);
  }
  EXPECT_TRUE(shown.count("1") && shown.count("8") && shown.count("8 etp1")) << shown.size();

  w().set_request(testing::small_request());
  ASSERT_TRUE(wait_until([&] { return !w().outcome().specs.model.moe.active() && !w().busy(); }));
  EXPECT_TRUE(w().plans_view()->isColumnHidden(PlanTableModel::kEp));
}

// Every flag of `loom plan`'s inputs, restrictions and split has a widget named after it ("--grad-bytes":
// "grad_bytes"), so a flag added to the command line without one fails here.
TEST(GuiInputsPanel, EveryFlagOfLoomPlanHasAWidgetNamedAfterIt) {
  testing::qt_app();
  InputsPanel panel;
  SpecInputs in;
  ConfigText config;
  std::vector<std::string> flags;
  for_each_spec_flag(in, [&](const char* flag, auto&&...) { flags.emplace_back(flag); });
  for_each_config_flag(config, true, [&](const char* flag, auto&&...) { flags.emplace_back(flag); });
  for_each_split_switch(config, [&](const char* flag, auto&&...) { flags.emplace_back(flag); });
  ASSERT_GE(flags.size(), 40u);  // 40 when this was written
  for (const std::string& flag : flags) {
    QString name = QString::fromStdString(flag.substr(2));
    name.replace('-', '_');
    EXPECT_NE(panel.findChild<QWidget*>(name), nullptr) << flag;
  }
}

// Every input `loom plan` takes has a widget, and what the command line set survives an edit of another
// input: before, the panel rebuilt the request from its widgets alone, and the inputs without one
// (gradient bytes, jitter, host time per op, ZeRO-3 prefetch, the pipeline split) fell back to their
// defaults at the first edit.
TEST_F(GuiMainWindow, EveryCommandLineInputSurvivesAnEditOfAnother) {
  PlanRequest r = testing::small_request();
  r.specs.grad_bytes = 4;
  r.specs.kernel_cv = 0.05;
  r.specs.gpu_cv = 0.02;
  r.specs.host_op_us = 8;
  r.specs.zero3_prefetch = 5e7;
  r.specs.mtp_layers = 1;
  r.config.pp = "2";
  r.config.first_stage_layers = "14";
  w().set_request(r);
  ASSERT_TRUE(wait_until([&] { return w().outcome().specs.training.grad_bytes == 4 && !w().busy(); }));
  InputsPanel* in = w().inputs();
  EXPECT_EQ(in->grad_bytes_box()->currentData().toInt(), 4);
  EXPECT_DOUBLE_EQ(in->kernel_cv_box()->value(), 0.05);
  EXPECT_DOUBLE_EQ(in->gpu_cv_box()->value(), 0.02);
  EXPECT_DOUBLE_EQ(in->host_op_us_box()->value(), 8.0);
  EXPECT_DOUBLE_EQ(in->zero3_prefetch_box()->value(), 5e7);
  EXPECT_EQ(in->mtp_layers_box()->value(), 1);
  EXPECT_EQ(in->first_stage_layers_box()->text(), "14");

  QSpinBox* gpus = in->gpus_box();  // an edit of another input, as a person makes it
  gpus->setFocus();
  gpus->selectAll();
  QTest::keyClicks(gpus, "8");
  QTest::keyClick(gpus, Qt::Key_Enter);
  ASSERT_TRUE(wait_until([&] { return w().outcome().specs.training.gpus == 8 && !w().busy(); }));
  ASSERT_TRUE(w().outcome().ok()) << w().outcome().error;
  const TrainingSpec& t = w().outcome().specs.training;
  EXPECT_EQ(t.grad_bytes, 4);
  EXPECT_DOUBLE_EQ(t.kernel_cv, 0.05);
  EXPECT_DOUBLE_EQ(t.gpu_cv, 0.02);
  EXPECT_DOUBLE_EQ(t.host_op_s, 8e-6);
  EXPECT_DOUBLE_EQ(t.zero3_prefetch_elements, 5e7);
  EXPECT_EQ(w().outcome().specs.model.mtp_layers, 1);
  ASSERT_GT(w().plans_model()->rowCount(), 0);
  for (int i = 0; i < w().plans_model()->rowCount(); ++i) {
    const PlanRow* row = w().plans_model()->row(i);
    ASSERT_EQ(row->stage_layers.size(), 2u);
    EXPECT_EQ(row->stage_layers.front(), 14) << describe(row->config);
  }

  // The widgets drive the search too: the split's switch instead of a pinned first stage, the
  // framework's gradient bytes again.
  // (32 layers + the embedding alone do not split over pp 2: the loss counts too.)
  in->first_stage_layers_box()->clear();
  in->account_for_embedding_box()->click();
  in->account_for_loss_box()->click();
  ASSERT_TRUE(wait_until([&] {
    return w().outcome().ok() && !w().busy() && w().plans_model()->rowCount() > 0 &&
           w().plans_model()->row(0)->config.split.account_for_embedding &&
           w().plans_model()->row(0)->config.split.account_for_loss;
  }));
  EXPECT_EQ(w().plans_model()->row(0)->stage_layers, (std::vector<int>{16, 16}));
  EXPECT_EQ(in->request().config.account_for_embedding, "on");
  EXPECT_EQ(in->request().config.account_for_loss, "on");
  EXPECT_TRUE(in->request().config.first_stage_layers.empty());
  in->grad_bytes_box()->setCurrentIndex(in->grad_bytes_box()->findData(0));
  ASSERT_TRUE(wait_until([&] { return w().outcome().specs.training.grad_bytes == 2 && !w().busy(); }));
  EXPECT_EQ(in->request().specs.grad_bytes, 0);
}

TEST_F(GuiMainWindow, AFrameworkReachesTheSearchAndLimitsItsPlans) {
  EXPECT_TRUE(w().outcome().specs.training.framework.empty());
  auto* framework = w().inputs()->findChild<QComboBox*>("framework");
  ASSERT_NE(framework, nullptr);
  framework->setCurrentIndex(framework->findText("megatron-lm-2021"));
  ASSERT_TRUE(wait_until([&] { return w().outcome().specs.training.framework == "megatron-lm-2021" && !w().busy(); }));
  EXPECT_EQ(w().outcome().specs.training.attention, AttentionKernel::kUnfused);  // the combo left at "framework's"
  ASSERT_GT(w().plans_model()->rowCount(), 0);
  for (int r = 0; r < w().plans_model()->rowCount(); ++r) {
    EXPECT_EQ(w().plans_model()->row(r)->config.zero, 0);
    EXPECT_FALSE(w().plans_model()->row(r)->config.sequence_parallel);
  }
  // The request round-trips through the panel.
  const PlanRequest request = w().inputs()->request();
  EXPECT_EQ(request.specs.framework, "megatron-lm-2021");
  EXPECT_EQ(request.specs.attention, "");
  EXPECT_EQ(request.specs.elementwise, "");
}

// "all, compared": every stack searched alone, the rows ranked together; a row's detail and its exported
// plan are simulated under the row's own stack.
TEST_F(GuiMainWindow, AllStacksComparedRankTogetherAndEachRowKeepsItsStack) {
  auto* framework = w().inputs()->findChild<QComboBox*>("framework");
  ASSERT_NE(framework, nullptr);
  framework->setCurrentIndex(framework->findText("all, compared"));
  ASSERT_TRUE(wait_until([&] { return w().outcome().stacks.size() == 4 && !w().busy(); }));
  ASSERT_TRUE(w().outcome().ok()) << w().outcome().error;
  EXPECT_EQ(w().inputs()->request().specs.framework, "megatron-lm-2021,megatron-core,torchtitan,deepspeed");
  std::set<std::string> stacks;
  double previous = 0;
  for (int r = 0; r < w().plans_model()->rowCount(); ++r) {
    const PlanRow* row = w().plans_model()->row(r);
    stacks.insert(row->framework);
    EXPECT_GE(row->metrics.step_time_s, previous);
    previous = row->metrics.step_time_s;
    EXPECT_EQ(w().plans_model()->index(r, PlanTableModel::kFramework).data().toString().toStdString(), row->framework);
    if (row->framework == "megatron-lm-2021") {
      EXPECT_EQ(row->config.zero, 0);  // its own legality
    }
  }
  EXPECT_EQ(stacks, (std::set<std::string>{"megatron-lm-2021", "megatron-core", "torchtitan", "deepspeed"}));
  // The first torchtitan row: its detail is torchtitan's step (the same step as its row), its plan file torchtitan's.
  int titan = -1;
  for (int r = 0; r < w().plans_model()->rowCount() && titan < 0; ++r)
    if (w().plans_model()->row(r)->framework == "torchtitan") titan = r;
  ASSERT_GE(titan, 0);
  click_plan(titan);
  EXPECT_EQ(w().gantt()->detail()->framework, "torchtitan");
  EXPECT_DOUBLE_EQ(w().gantt()->detail()->sim.step_time_s, w().plans_model()->row(titan)->metrics.step_time_s);
  const auto summary = plan_summary(*w().gantt()->detail());
  EXPECT_TRUE(std::any_of(summary.begin(), summary.end(),
                          [](const SummaryLine& l) { return l.label == "framework" && l.value == "torchtitan"; }));
  const QString path = dir_.filePath("titan.json");
  QString error;
  ASSERT_TRUE(w().export_plan(path, &error)) << error.toStdString();
  auto parsed = plan_from_json(*read_json_file(path.toStdString()));
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->training.framework, "torchtitan");
}

TEST_F(GuiMainWindow, EagerElementwiseKernelsReachTheSearch) {
  pick_framework_choice("elementwise", &TrainingSpec::elementwise, &SpecInputs::elementwise, Elementwise::kFused,
                        Elementwise::kEager);
}

TEST_F(GuiMainWindow, FlashAttention2ReachesTheSearch) {
  pick_framework_choice("flash_kernel", &TrainingSpec::flash_kernel, &SpecInputs::flash_kernel, FlashKernel::kFused,
                        FlashKernel::kFa2);
}

TEST_F(GuiMainWindow, PyTorchContextParallelAttentionReachesTheSearch) {
  pick_framework_choice("cp_attention", &TrainingSpec::cp_attention, &SpecInputs::cp_attention, CpAttention::kTe,
                        CpAttention::kPyTorch);
}

// The FP8 recipe box counts only with precision fp8; rowwise needs a measured figure the H100 file lacks,
// which the window shows as the one-line error.
TEST_F(GuiMainWindow, Fp8RecipeReachesTheSearchWithFp8Only) {
  auto* recipe = w().inputs()->findChild<QComboBox*>("fp8_recipe");
  ASSERT_NE(recipe, nullptr);
  EXPECT_FALSE(recipe->isEnabled());
  recipe->setCurrentIndex(recipe->findData(QString("tensorwise")));
  EXPECT_EQ(w().inputs()->request().specs.fp8_recipe, "");  // bf16: no recipe
  w().inputs()->cluster_box()->setCurrentText("dgx-h100");
  auto* precision = w().inputs()->findChild<QComboBox*>("precision");
  ASSERT_NE(precision, nullptr);
  precision->setCurrentText("fp8");
  EXPECT_TRUE(recipe->isEnabled());
  ASSERT_TRUE(wait_until([&] {
    return w().outcome().ok() && w().outcome().specs.training.precision == Precision::kFp8 &&
           w().outcome().specs.training.fp8_recipe == Fp8Recipe::kTensorwise && !w().busy();
  }));
  ASSERT_GT(w().plans_model()->rowCount(), 0);
  recipe->setCurrentIndex(recipe->findData(QString("rowwise")));
  ASSERT_TRUE(wait_until([&] {
    return w().outcome().ok() && w().outcome().specs.training.fp8_recipe == Fp8Recipe::kRowwise && !w().busy();
  }));
  // The B200's cost file has no measured rowwise GEMM figure: refused in one line.
  w().inputs()->cluster_box()->setCurrentText("dgx-b200");
  ASSERT_TRUE(wait_until([&] { return !w().outcome().ok() && !w().busy(); }));
  auto* error = w().inputs()->findChild<QLabel*>("input_error");
  ASSERT_NE(error, nullptr);
  EXPECT_TRUE(error->text().contains("--fp8-recipe rowwise")) << error->text().toStdString();
}

TEST_F(GuiMainWindow, BadInputShowsItsErrorAndClearsTheTable) {
  w().inputs()->model_box()->setCurrentText("no-such-model");
  ASSERT_TRUE(wait_until([&] { return !w().outcome().ok() && !w().busy(); }));
  EXPECT_EQ(w().plans_view()->model()->rowCount(), 0);
  auto* error = w().inputs()->findChild<QLabel*>("input_error");
  ASSERT_NE(error, nullptr);
  EXPECT_TRUE(error->isVisible());
  EXPECT_TRUE(error->text().contains("no-such-model")) << error->text().toStdString();
  EXPECT_FALSE(w().gantt()->has_plan());
}

TEST_F(GuiMainWindow, SelectingARowShowsThatPlansMemoryAndGantt) {
  const PlanResult& result = w().outcome().result;
  const int plan = testing::first_plan_with_pp(result, 4);
  ASSERT_GT(plan, 0);
  click_plan(plan);
  const ParallelConfig& config = result.plans[plan].config;
  EXPECT_EQ(w().gantt()->detail()->config, config);
  int compute_rows = 0;
  for (const auto& row : w().gantt()->data().rows) compute_rows += row.is_compute();
  EXPECT_EQ(compute_rows, 4);
  // Communication rows come and go with their checkbox; the stages stay.
  const std::size_t all_rows = w().gantt()->data().rows.size();
  ASSERT_GT(all_rows, 4u);
  auto* communication = w().findChild<QCheckBox*>("show_communication");
  ASSERT_NE(communication, nullptr);
  communication->setChecked(false);
  EXPECT_EQ(w().gantt()->data().rows.size(), 4u);
  communication->setChecked(true);
  EXPECT_EQ(w().gantt()->data().rows.size(), all_rows);

  QStackedBarSeries* bars = w().memory_chart()->bar_series();
  ASSERT_NE(bars, nullptr);
  ASSERT_EQ(bars->count(), 5);
  const MemoryReport memory =
      estimate_memory(w().outcome().specs.model, w().outcome().specs.training, config, w().outcome().specs.cluster);
  for (int s = 0; s < 4; ++s) {
    double total = 0;
    for (QBarSet* set : bars->barSets()) {
      ASSERT_EQ(set->count(), 4);
      total += set->at(s);
    }
    EXPECT_NEAR(total, bytes_to_gib(memory.stages[s].total_bytes()), 1e-6);
  }
  ASSERT_NE(w().memory_chart()->capacity_series(), nullptr);
  EXPECT_DOUBLE_EQ(w().memory_chart()->capacity_series()->at(0).y(), bytes_to_gib(memory.capacity_bytes));
  EXPECT_TRUE(w().memory_chart()->chart()->title().contains(QString::fromStdString(describe(config))));
}

TEST_F(GuiMainWindow, FiltersNarrowTheTableAndTheChartsAlike) {
  auto* filter = w().findChild<QLineEdit*>("plan_filter");
  ASSERT_NE(filter, nullptr);
  QTest::keyClicks(filter, "pp2");
  const QAbstractItemModel* table = w().plans_view()->model();
  ASSERT_GT(table->rowCount(), 0);
  ASSERT_LT(table->rowCount(), w().plans_model()->rowCount());
  for (int r = 0; r < table->rowCount(); ++r)
    EXPECT_EQ(w().plans_model()->row(w().plans_proxy()->plan_index(r))->config.pp, 2);
  EXPECT_EQ(static_cast<int>(w().pareto_chart()->points().size()), table->rowCount());
  for (const auto& cell : w().heat_map()->heat_map().cells) {
    if (cell.pp != 2) {
      EXPECT_EQ(cell.plans, 0) << "tp" << cell.tp << " pp" << cell.pp;
    }
  }

  filter->clear();
  auto* memory = w().findChild<QDoubleSpinBox*>("memory_limit");
  ASSERT_NE(memory, nullptr);
  memory->setValue(30);
  ASSERT_GT(table->rowCount(), 0);
  ASSERT_LT(table->rowCount(), w().plans_model()->rowCount());
  for (const auto& p : w().pareto_chart()->points()) EXPECT_LE(p.memory_gib, 30);
  EXPECT_EQ(static_cast<int>(w().pareto_chart()->points().size()), table->rowCount());
}

TEST_F(GuiMainWindow, GanttZoomsPansAndFindsSlicesUnderTheMouse) {
  GanttView* g = w().gantt();
  ASSERT_TRUE(g->has_plan());
  const double span = g->axis().end_s - g->axis().start_s;
  g->zoom(2);
  EXPECT_NEAR(g->axis().end_s - g->axis().start_s, span / 2, span * 1e-9);
  QTest::keyClick(g, Qt::Key_0);
  EXPECT_NEAR(g->axis().end_s - g->axis().start_s, span, span * 1e-9);
  // The middle of the first compute slice, in pixels, hits that slice.
  const GanttSlice& s = g->data().rows.front().slices.front();
  int y = 0;
  while (y < g->height() && g->row_at(y) != 0) ++y;
  ASSERT_LT(y, g->height());
  const QPoint at(static_cast<int>(g->axis().to_px((s.start_s + s.end_s) / 2)), y + 3);
  EXPECT_EQ(g->op_at(at), s.op);
  // Hovering there shows that slice's tooltip.
  QHelpEvent hover(QEvent::ToolTip, at, g->mapToGlobal(at));
  QApplication::sendEvent(g, &hover);
  const QString label = QString::fromStdString(sim::op_label(g->detail()->sim.graph.op(s.op)));
  EXPECT_TRUE(QToolTip::text().contains(label)) << QToolTip::text().toStdString();
}

TEST_F(GuiMainWindow, HeatMapAndParetoClicksSelectPlans) {
  HeatMapView* map = w().heat_map();
  qobject_cast<QTabWidget*>(map->parentWidget()->parentWidget())->setCurrentWidget(map);
  const HeatMap& data = map->heat_map();
  std::size_t tp_i = 0, pp_i = 0;
  int target = -1;
  for (std::size_t p = 0; p < data.pp_values.size() && target < 1; ++p)
    for (std::size_t t = 0; t < data.tp_values.size() && target < 1; ++t)
      if (data.cell(t, p).best_plan > 0) tp_i = t, pp_i = p, target = data.cell(t, p).best_plan;
  ASSERT_GT(target, 0);
  QTest::mouseClick(map, Qt::LeftButton, {}, map->cell_rect(tp_i, pp_i).center().toPoint());
  ASSERT_TRUE(wait_until([&] { return w().selected_plan() == target && !w().busy(); }));
  EXPECT_EQ(w().gantt()->detail()->config, w().plans_model()->row(target)->config);

  // A point on the Pareto chart, clicked where it is drawn.
  ParetoChart* pareto = w().pareto_chart();
  qobject_cast<QTabWidget*>(pareto->parentWidget()->parentWidget())->setCurrentWidget(pareto);
  QTest::qWait(50);
  auto* series = qobject_cast<QScatterSeries*>(pareto->chart()->series().at(0));
  auto to_view = [&](const ParetoPoint& q) {
    const QPointF at = pareto->chart()->mapToPosition(QPointF(q.memory_gib, q.tokens_per_s), series);
    return pareto->mapFromScene(pareto->chart()->mapToScene(at));
  };
  // The frontier point farthest from any other point on screen, so the click is unambiguous.
  const ParetoPoint* target_point = nullptr;
  double clearance = 0;
  for (const auto& f : pareto->points()) {
    if (!f.frontier) continue;
    double nearest = 1e9;
    for (const auto& q : pareto->points())
      if (q.plan_index != f.plan_index) nearest = std::min(nearest, QLineF(to_view(f), to_view(q)).length());
    if (nearest > clearance) clearance = nearest, target_point = &f;
  }
  ASSERT_NE(target_point, nullptr);
  ASSERT_GT(clearance, 4) << "no frontier point stands apart enough to click";
  const ParetoPoint p = *target_point;
  QTest::mouseClick(pareto->viewport(), Qt::LeftButton, {}, to_view(p));
  ASSERT_TRUE(wait_until([&] { return w().selected_plan() == p.plan_index && !w().busy(); }, 10000))
      << "selected " << w().selected_plan() << ", expected " << p.plan_index;
}

TEST_F(GuiMainWindow, ExportedPlanIsAPlanFileLoomRunAccepts) {
  const int plan = testing::first_plan_with_pp(w().outcome().result, 2);
  ASSERT_GT(plan, 0);
  click_plan(plan);
  const QString path = dir_.filePath("plan.json");
  QString error;
  ASSERT_TRUE(w().export_plan(path, &error)) << error.toStdString();
  auto json = read_json_file(path.toStdString());
  ASSERT_TRUE(json) << json.error().message;
  auto parsed = plan_from_json(*json);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->config, w().plans_model()->row(plan)->config);
  EXPECT_EQ(parsed->model.name, "llama2-7b");
  EXPECT_EQ(parsed->training.gpus, 16);
  EXPECT_EQ(parsed->cluster, "dgx-a100-80gb");
  EXPECT_FALSE(w().export_plan(dir_.filePath("no/such/dir/plan.json"), &error));
  EXPECT_FALSE(error.isEmpty());
}

TEST_F(GuiMainWindow, ExportsTraceAndCsv) {
  const QString trace = dir_.filePath("trace.json");
  QString error;
  ASSERT_TRUE(w().export_trace(trace, &error)) << error.toStdString();
  auto json = read_json_file(trace.toStdString());
  ASSERT_TRUE(json) << json.error().message;
  ASSERT_TRUE(json->contains("traceEvents"));
  EXPECT_GT((*json)["traceEvents"].size(), w().gantt()->detail()->sim.graph.size());

  const QString csv = dir_.filePath("plans.csv");
  ASSERT_TRUE(w().export_csv(csv, &error)) << error.toStdString();
  auto text = read_text_file(csv.toStdString());
  ASSERT_TRUE(text);
  EXPECT_EQ(static_cast<std::size_t>(std::count(text->begin(), text->end(), '\n')),
            w().outcome().result.plans.size() + 1);
  EXPECT_EQ(text->rfind("rank,", 0), 0u) << text->substr(0, 80);
}

TEST_F(GuiMainWindow, ComparesAPinnedPlanWithTheSelectedOne) {
  w().pin_selected_for_comparison();  // plan #1
  const int other = testing::first_plan_with_pp(w().outcome().result, 4);
  click_plan(other);
  QTableWidget* table = w().compare_view()->table();
  ASSERT_GT(table->rowCount(), 5);
  EXPECT_TRUE(table->horizontalHeaderItem(1)->text().contains("#1"));
  EXPECT_TRUE(table->horizontalHeaderItem(2)->text().contains(QString("#%1").arg(other + 1)));
  bool step_row = false;
  for (int r = 0; r < table->rowCount(); ++r)
    if (table->item(r, 0)->text() == "step time") {
      step_row = true;
      EXPECT_EQ(table->item(r, 1)->text(),
                QString::number(w().outcome().result.plans[0].metrics.step_time_s, 'f', 3) + " s");
    }
  EXPECT_TRUE(step_row);
}

}  // namespace
}  // namespace loom::gui
