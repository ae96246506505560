#include "gui/main_window.h"

#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QSortFilterProxyModel>
#include <QTabWidget>
#include <QTableView>
#include <QtConcurrent/QtConcurrentRun>
#include <atomic>

#include "gui/detail_panels.h"
#include "gui/gantt_view.h"
#include "gui/heat_map_view.h"
#include "gui/inputs_panel.h"
#include "gui/memory_chart.h"
#include "gui/models/chart_data.h"
#include "gui/models/plan_table_model.h"
#include "gui/models/rejected_model.h"
#include "gui/pareto_chart.h"

namespace loom::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("Loom — parallel training planner"));
  plans_model_ = new PlanTableModel(this);
  plans_proxy_ = new PlanFilterProxy(this);
  plans_proxy_->setSourceModel(plans_model_);
  rejected_model_ = new RejectedTableModel(this);
  rejected_proxy_ = new QSortFilterProxyModel(this);
  rejected_proxy_->setSourceModel(rejected_model_);
  rejected_proxy_->setSortRole(RejectedTableModel::kSortRole);
  rejected_proxy_->setFilterKeyColumn(-1);
  rejected_proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  build_layout();
  build_actions();

  replan_timer_.setSingleShot(true);
  replan_timer_.setInterval(350);
  connect(&replan_timer_, &QTimer::timeout, this, &MainWindow::start_search);
  connect(inputs_, &InputsPanel::changed, this, [this] { replan_timer_.start(); });
  connect(&search_, &QFutureWatcher<PlanOutcome>::finished, this, &MainWindow::on_search_finished);
  connect(&detail_search_, &QFutureWatcher<DetailOutcome>::finished, this, &MainWindow::on_detail_finished);
  connect(plans_view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          &MainWindow::on_selection_changed);
  connect(filter_, &QLineEdit::textChanged, this, [this](const QString& text) {
    plans_proxy_->set_config_filter(text);
    refresh_charts();
  });
  connect(memory_limit_, &QDoubleSpinBox::valueChanged, this, [this](double gib) {
    plans_proxy_->set_max_memory_gib(gib);
    refresh_charts();
  });
  connect(pareto_, &ParetoChart::plan_clicked, this, &MainWindow::select_plan);
  connect(heat_map_, &HeatMapView::plan_clicked, this, &MainWindow::select_plan);
}

MainWindow::~MainWindow() {
  // The workers copy their inputs, but their progress reports post to our widgets.
  search_.waitForFinished();
  detail_search_.waitForFinished();
}

void MainWindow::set_request(const PlanRequest& request) {
  threads_ = request.threads ? request.threads : threads_;
  inputs_->set_request(request);
  replan_timer_.stop();
  start_search();
}

bool MainWindow::busy() const {
  return replan_timer_.isActive() || search_running_ || search_pending_ || detail_running_ || detail_pending_ >= 0;
}

void MainWindow::start_search() {
  if (search_running_) {
    search_pending_ = true;  // the running search is stale; start again when it returns
    return;
  }
  PlanRequest request = inputs_->request();
  request.threads = threads_;
  progress_->setRange(0, 0);
  progress_->show();
  status_->setText(
      tr("searching %1 on %2 GPUs …").arg(QString::fromStdString(request.specs.model)).arg(request.specs.gpus));
  auto last_permille = std::make_shared<std::atomic<int>>(-1);
  QProgressBar* bar = progress_;
  ProgressFn progress = [bar, last_permille](std::size_t done, std::size_t total) {
    const int permille = total ? static_cast<int>(1000 * done / total) : 0;
    if (last_permille->exchange(permille) == permille) return;
    QMetaObject::invokeMethod(
        bar,
        [bar, permille] {
          bar->setRange(0, 1000);
          bar->setValue(permille);
        },
        Qt::QueuedConnection);
  };
  search_running_ = true;
  search_.setFuture(QtConcurrent::run([request, progress] { return run_plan_request(request, progress); }));
}

void MainWindow::on_search_finished() {
  search_running_ = false;
  if (search_pending_) {
    search_pending_ = false;
    start_search();
    return;
  }
  outcome_ = search_.result();
  ++search_generation_;
  progress_->hide();
  detail_.reset();
  selected_plan_ = -1;
  gantt_->clear();
  memory_chart_->clear();
  inputs_->set_error(QString::fromStdString(outcome_.error));
  plans_model_->set_result(outcome_.ok() ? outcome_.result : PlanResult{});
  rejected_model_->set_rejections(outcome_.ok() ? outcome_.result.rejected : std::vector<Rejection>{});
  pinned_plan_.reset();
  refresh_compare();
  // The EP column says something only for a mixture-of-experts model, as in `loom plan`'s table.
  const bool moe = outcome_.ok() && outcome_.specs.model.moe.active();
  plans_view_->setColumnHidden(PlanTableModel::kEp, !moe);
  rejected_view_->setColumnHidden(RejectedTableModel::kEp, !moe);
  plans_view_->resizeColumnsToContents();
  rejected_view_->resizeColumnsToContents();
  table_tabs_->setTabText(0, tr("Plans (%1)").arg(plans_model_->rowCount()));
  table_tabs_->setTabText(1, tr("Rejected (%1)").arg(rejected_model_->rowCount()));
  refresh_charts();
  if (!outcome_.ok()) {
    search_info_->setText(QString::fromStdString(outcome_.error).toHtmlEscaped());
    status_->setText(tr("error: %1").arg(QString::fromStdString(outcome_.error)));
    summary_->show_message(QString::fromStdString(outcome_.error));
  } else {
    const auto& s = outcome_.specs;
    setWindowTitle(tr("Loom — %1 on %2 × %3 (%4)")
                       .arg(QString::fromStdString(s.model.name))
                       .arg(s.training.gpus)
                       .arg(QString::fromStdString(s.cluster.device.name), QString::fromStdString(s.cluster.name)));
    status_->setText(tr("%1: %2 legal configurations, %3 fit and were simulated, %4 rejected")
                         .arg(QString::fromStdString(s.model.name))
                         .arg(outcome_.result.enumerated)
                         .arg(outcome_.result.simulated)
                         .arg(outcome_.result.rejected.size()));
    QString info = tr("%1 legal configurations<br>%2 fit and were simulated<br>%3 rejected:")
                       .arg(outcome_.result.enumerated)
                       .arg(outcome_.result.simulated)
                       .arg(outcome_.result.rejected.size());
    info += "<table cellspacing='0' cellpadding='1'>";
    for (const auto& [rule, count] : rejection_counts(outcome_.result.rejected))
      info += QStringLiteral("<tr><td align='right' style='padding-right:6px'>%1</td><td>%2</td></tr>")
                  .arg(count)
                  .arg(QString::fromStdString(rule).toHtmlEscaped());
    search_info_->setText(info + "</table>");
    if (outcome_.result.plans.empty()) {
      summary_->show_message(
          tr("No configuration fits in %1 GiB; the Rejected tab says why.").arg(s.cluster.gpu_memory_gib(), 0, 'f', 0));
    } else {
      select_plan(0);
    }
  }
  emit plans_ready();
  emit_idle_if_done();
}

void MainWindow::refresh_charts() {
  std::vector<int> visible;
  for (int r = 0; r < plans_proxy_->rowCount(); ++r) visible.push_back(plans_proxy_->plan_index(r));
  std::sort(visible.begin(), visible.end());
  const PlanResult& result = plans_model_->result();
  pareto_->set_points(pareto_points(result, visible), outcome_.ok() ? outcome_.specs.cluster.gpu_memory_gib() : 0);
  heat_map_->set_heat_map(tp_pp_heat_map(result, visible));
  filter_count_->setText(tr("%1 of %2").arg(visible.size()).arg(result.plans.size()));
}

void MainWindow::select_plan(int plan_index) {
  const int row = plans_proxy_->proxy_row(plan_index);
  if (row >= 0) {
    plans_view_->selectionModel()->setCurrentIndex(plans_proxy_->index(row, 0),
                                                   QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    plans_view_->scrollTo(plans_proxy_->index(row, 0));
  }
  if (plan_index == selected_plan_ || !plans_model_->row(plan_index)) return;
  selected_plan_ = plan_index;
  pareto_->set_selected(plan_index);
  heat_map_->set_selected(plan_index);
  refresh_compare();
  detail_pending_ = plan_index;
  if (!detail_running_) start_detail();
}

void MainWindow::on_selection_changed() {
  const QModelIndex current = plans_view_->selectionModel()->currentIndex();
  if (current.isValid()) select_plan(plans_proxy_->plan_index(current.row()));
}

void MainWindow::start_detail() {
  const int plan = detail_pending_;
  detail_pending_ = -1;
  const PlanRow* row = plans_model_->row(plan);
  if (!row) return;
  const Specs specs = outcome_.specs_for(*row);
  const ParallelConfig config = row->config;
  summary_->show_message(tr("simulating %1 …").arg(QString::fromStdString(describe(config))));
  detail_running_ = true;
  detail_search_.setFuture(QtConcurrent::run([specs, config, plan, search = search_generation_] {
    DetailOutcome out;
    out.search = search;
    out.plan_index = plan;
    auto d = simulate_detail(specs, config);
    if (d)
      out.detail = std::make_shared<const PlanDetail>(std::move(*d));
    else
      out.error = d.error().message;
    return out;
  }));
}

void MainWindow::on_detail_finished() {
  detail_running_ = false;
  if (detail_pending_ >= 0) {
    start_detail();
    return;
  }
  const DetailOutcome out = detail_search_.result();
  if (out.search == search_generation_ && out.plan_index == selected_plan_) {
    if (!out.detail) {
      summary_->show_message(QString::fromStdString(out.error));
    } else {
      detail_ = out.detail;
      gantt_->set_detail(detail_);
      memory_chart_->set_bars(memory_bars(detail_->memory),
                              tr("Memory per stage — %1").arg(QString::fromStdString(describe(detail_->config))));
      summary_->set_plan(selected_plan_ + 1, *detail_);
      emit detail_ready();
    }
  }
  emit_idle_if_done();
}

void MainWindow::emit_idle_if_done() {
  if (!busy()) emit idle();
}

void MainWindow::pin_selected_for_comparison() {
  if (selected_plan_ < 0) return;
  pinned_plan_ = selected_plan_;
  refresh_compare();
}

void MainWindow::refresh_compare() {
  auto entry = [this](std::optional<int> plan) -> std::optional<std::pair<int, PlanRow>> {
    const PlanRow* row = plan ? plans_model_->row(*plan) : nullptr;
    if (!row) return std::nullopt;
    return std::make_pair(*plan + 1, *row);
  };
  compare_->set_plans(entry(pinned_plan_), selected_plan_ >= 0 ? entry(selected_plan_) : std::nullopt);
}

}  // namespace loom::gui
