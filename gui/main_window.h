// loom-gui's main window: the inputs on the left; the plans table (sortable, filterable), the
// rejected configurations and the comparison in tabs; the Pareto scatter and TP×PP heat map;
// and for the selected plan its pipeline Gantt, memory bars and summary. Searches and detail
// simulations run off the UI thread; a newer input supersedes an older search.
#pragma once

#include <QFutureWatcher>
#include <QMainWindow>
#include <QTimer>
#include <memory>
#include <optional>

#include "gui/models/plan_detail.h"
#include "gui/models/plan_request.h"

class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QSortFilterProxyModel;
class QTabWidget;
class QTableView;

namespace loom::gui {

class CompareView;
class GanttView;
class HeatMapView;
class InputsPanel;
class MemoryChart;
class ParetoChart;
class PlanFilterProxy;
class PlanTableModel;
class RejectedTableModel;
class SummaryView;

struct DetailOutcome {
  int search = 0;  // the search whose plans it belongs to
  int plan_index = -1;
  std::shared_ptr<const PlanDetail> detail;
  std::string error;
};

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Loads inputs and searches at once (no debounce).
  void set_request(const PlanRequest& request);
  void set_search_threads(int threads) { threads_ = threads; }

  // True while a search or a detail simulation is queued or running.
  bool busy() const;
  const PlanOutcome& outcome() const { return outcome_; }
  int selected_plan() const { return selected_plan_; }
  void select_plan(int plan_index);
  void pin_selected_for_comparison();

  // Exports; on failure return false and set *error to one line.
  bool export_plan(const QString& path, QString* error) const;
  bool export_trace(const QString& path, QString* error) const;
  bool export_csv(const QString& path, QString* error) const;

  InputsPanel* inputs() const { return inputs_; }
  QTableView* plans_view() const { return plans_view_; }
  PlanTableModel* plans_model() const { return plans_model_; }
  PlanFilterProxy* plans_proxy() const { return plans_proxy_; }
  RejectedTableModel* rejected_model() const { return rejected_model_; }
  QTableView* rejected_view() const { return rejected_view_; }
  GanttView* gantt() const { return gantt_; }
  MemoryChart* memory_chart() const { return memory_chart_; }
  ParetoChart* pareto_chart() const { return pareto_; }
  HeatMapView* heat_map() const { return heat_map_; }
  CompareView* compare_view() const { return compare_; }
  QTabWidget* table_tabs() const { return table_tabs_; }
  QTabWidget* chart_tabs() const { return chart_tabs_; }

 signals:
  void plans_ready();   // a search finished and the views show it (or its error)
  void detail_ready();  // the selected plan's Gantt, memory and summary are shown
  void idle();          // nothing queued or running

 private:
  void build_layout();
  void build_actions();
  void start_search();
  void on_search_finished();
  void start_detail();
  void on_detail_finished();
  void on_selection_changed();
  void refresh_charts();
  void refresh_compare();
  void emit_idle_if_done();
  void save_with_dialog(const QString& title, const QString& filter, const QString& suggested,
                        bool (MainWindow::*write)(const QString&, QString*) const);

  InputsPanel* inputs_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* search_info_ = nullptr;
  QTabWidget* table_tabs_ = nullptr;
  QTabWidget* chart_tabs_ = nullptr;
  QLineEdit* filter_ = nullptr;
  QDoubleSpinBox* memory_limit_ = nullptr;
  QLabel* filter_count_ = nullptr;
  QTableView* plans_view_ = nullptr;
  QTableView* rejected_view_ = nullptr;
  PlanTableModel* plans_model_ = nullptr;
  PlanFilterProxy* plans_proxy_ = nullptr;
  RejectedTableModel* rejected_model_ = nullptr;
  QSortFilterProxyModel* rejected_proxy_ = nullptr;
  GanttView* gantt_ = nullptr;
  MemoryChart* memory_chart_ = nullptr;
  ParetoChart* pareto_ = nullptr;
  HeatMapView* heat_map_ = nullptr;
  SummaryView* summary_ = nullptr;
  CompareView* compare_ = nullptr;

  QTimer replan_timer_;
  QFutureWatcher<PlanOutcome> search_;
  QFutureWatcher<DetailOutcome> detail_search_;
  // Set when a worker starts, cleared when its finished() is handled (the future itself reports
  // "not running" a moment before that, while the signal is still queued).
  bool search_running_ = false;
  bool detail_running_ = false;
  bool search_pending_ = false;
  int detail_pending_ = -1;  // plan to simulate once the running one finishes
  int threads_ = 0;
  int search_generation_ = 0;  // bumped each time a search's results are shown
  PlanOutcome outcome_;
  int selected_plan_ = -1;
  std::shared_ptr<const PlanDetail> detail_;
  std::optional<int> pinned_plan_;
};

}  // namespace loom::gui
