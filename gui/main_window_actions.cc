// MainWindow's menus, toolbar and exports: the plan file `loom run --plan` takes, the selected
// plan's Perfetto trace, and the plans table as CSV (the same text as `loom plan --format csv`).
#include <QApplication>
#include <QFileDialog>
#include <QMenuBar>
#include <QMessageBox>
#include <QToolBar>

#include "core/json_io.h"
#include "gui/detail_panels.h"
#include "gui/inputs_panel.h"
#include "gui/main_window.h"
#include "gui/models/plan_table_model.h"
#include "planner/report.h"

namespace loom::gui {

void MainWindow::build_actions() {
  auto* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("Open &model…"), inputs_, &InputsPanel::open_model_file);
  file->addAction(tr("Open &cluster…"), inputs_, &InputsPanel::open_cluster_file);
  file->addSeparator();
  auto* export_plan_action = file->addAction(tr("Export &plan…"), this, [this] {
    save_with_dialog(tr("Export plan for loom run"), tr("Plan (*.json)"), "plan.json", &MainWindow::export_plan);
  });
  export_plan_action->setShortcut(QKeySequence::Save);
  auto* export_trace_action = file->addAction(tr("Export &trace…"), this, [this] {
    save_with_dialog(tr("Export Perfetto trace"), tr("Chrome/Perfetto trace (*.json)"), "trace.json",
                     &MainWindow::export_trace);
  });
  auto* export_csv_action = file->addAction(tr("Export table as &CSV…"), this, [this] {
    save_with_dialog(tr("Export plans as CSV"), tr("CSV (*.csv)"), "plans.csv", &MainWindow::export_csv);
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, qApp, &QApplication::quit);

  auto* pin = new QAction(tr("Pin for comparison"), this);
  pin->setToolTip(tr("Pin the selected plan as A; the Compare tab then shows it beside the selected one"));
  connect(pin, &QAction::triggered, this, [this] {
    pin_selected_for_comparison();
    table_tabs_->setCurrentWidget(compare_);
  });
  auto* replan = new QAction(tr("Re-plan"), this);
  replan->setShortcut(QKeySequence::Refresh);
  connect(replan, &QAction::triggered, this, &MainWindow::start_search);

  auto* view = menuBar()->addMenu(tr("&Plan"));
  view->addAction(pin);
  view->addAction(replan);

  auto* bar = addToolBar(tr("Actions"));
  bar->setObjectName("actions");
  bar->setMovable(false);
  bar->setToolButtonStyle(Qt::ToolButtonTextOnly);
  bar->addAction(replan);
  bar->addSeparator();
  bar->addAction(export_plan_action);
  bar->addAction(export_trace_action);
  bar->addAction(export_csv_action);
  bar->addSeparator();
  bar->addAction(pin);
}

void MainWindow::save_with_dialog(const QString& title, const QString& filter, const QString& suggested,
                                  bool (MainWindow::*write)(const QString&, QString*) const) {
  const QString path = QFileDialog::getSaveFileName(this, title, suggested, filter);
  if (path.isEmpty()) return;
  QString error;
  if (!(this->*write)(path, &error)) QMessageBox::warning(this, title, error);
}

namespace {

bool write_file(const QString& path, const std::string& text, QString* error) {
  if (auto s = write_text_file_atomic(path.toStdString(), text); !s) {
    if (error) *error = QString::fromStdString(s.error().message);
    return false;
  }
  return true;
}

}  // namespace

bool MainWindow::export_plan(const QString& path, QString* error) const {
  const PlanRow* row = plans_model_->row(selected_plan_);
  if (!row) {
    if (error) *error = tr("no plan is selected");
    return false;
  }
  return write_file(path, plan_file_text(outcome_.specs_for(*row), *row), error);
}

bool MainWindow::export_trace(const QString& path, QString* error) const {
  const PlanRow* row = plans_model_->row(selected_plan_);
  if (!row) {
    if (error) *error = tr("no plan is selected");
    return false;
  }
  const Specs& specs = outcome_.specs_for(*row);
  if (detail_ && detail_->config == row->config && detail_->framework == row->framework)
    return write_file(path, trace_json(specs, *detail_), error);
  // The selected plan's simulation has not come back yet: simulate it here.
  auto detail = simulate_detail(specs, row->config);
  if (!detail) {
    if (error) *error = QString::fromStdString(detail.error().message);
    return false;
  }
  return write_file(path, trace_json(specs, *detail), error);
}

bool MainWindow::export_csv(const QString& path, QString* error) const {
  if (!outcome_.ok()) {
    if (error) *error = tr("no search results to export");
    return false;
  }
  return write_file(path, format_csv(stacks_report_context(outcome_.stacks), outcome_.result, 0), error);
}

}  // namespace loom::gui
