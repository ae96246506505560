// TP×PP heat map: one cell per (tensor-parallel, pipeline-parallel) layout, coloured by the best
// tokens/s of the plans in it, grey where nothing fits; clicking a cell selects its best plan.
#pragma once

#include <QWidget>

#include "gui/models/chart_data.h"

namespace loom::gui {

class HeatMapView : public QWidget {
  Q_OBJECT

 public:
  explicit HeatMapView(QWidget* parent = nullptr);
  void set_heat_map(HeatMap map);
  void set_selected(int plan_index);
  const HeatMap& heat_map() const { return map_; }
  // The cell under a point: (tp index, pp index), or (-1, -1).
  std::pair<int, int> cell_at(QPointF pos) const;
  QRectF cell_rect(std::size_t tp_i, std::size_t pp_i) const;

  QSize sizeHint() const override { return {480, 320}; }

 signals:
  void plan_clicked(int plan_index);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

 private:
  QRectF grid_rect() const;
  HeatMap map_;
  int selected_plan_ = -1;
};

}  // namespace loom::gui
