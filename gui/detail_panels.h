// Text panels for the selected plan: the summary (metrics, exposed communication, what limits
// it, the critical path) and the side-by-side comparison of a pinned plan with the selected one.
#pragma once

#include <QTextBrowser>
#include <QWidget>
#include <optional>

#include "gui/models/plan_detail.h"
#include "planner/search.h"

class QLabel;
class QTableWidget;

namespace loom::gui {

class SummaryView : public QTextBrowser {
  Q_OBJECT

 public:
  explicit SummaryView(QWidget* parent = nullptr);
  void set_plan(int rank, const PlanDetail& detail);
  void show_message(const QString& message);
};

class CompareView : public QWidget {
  Q_OBJECT

 public:
  explicit CompareView(QWidget* parent = nullptr);
  // `a` is the pinned plan, `b` the selected one; either may be missing.
  void set_plans(std::optional<std::pair<int, PlanRow>> a, std::optional<std::pair<int, PlanRow>> b);
  QTableWidget* table() const { return table_; }

 private:
  QLabel* hint_;
  QTableWidget* table_;
};

}  // namespace loom::gui
