// Tokens/s against memory per GPU for every plan the table shows, the Pareto frontier drawn as
// a line, the selected plan highlighted; clicking a point selects that plan (the point drawn
// nearest the cursor, whichever marker lies on top).
#pragma once

#include <QChartView>

#include "gui/models/chart_data.h"

class QScatterSeries;
class QLineSeries;

namespace loom::gui {

class ParetoChart : public QChartView {
  Q_OBJECT

 public:
  explicit ParetoChart(QWidget* parent = nullptr);
  void set_points(std::vector<ParetoPoint> points, double capacity_gib);
  void set_selected(int plan_index);
  const std::vector<ParetoPoint>& points() const { return points_; }

 signals:
  void plan_clicked(int plan_index);

 protected:
  void mouseReleaseEvent(QMouseEvent* event) override;

 private:
  std::vector<ParetoPoint> points_;
  QScatterSeries* all_ = nullptr;
  QScatterSeries* frontier_points_ = nullptr;
  QLineSeries* frontier_line_ = nullptr;
  QScatterSeries* selected_ = nullptr;
  int selected_plan_ = -1;
};

}  // namespace loom::gui
