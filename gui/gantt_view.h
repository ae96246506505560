// The pipeline Gantt of the selected plan: one compute row per stage (F, B, W in distinct
// colours, bubbles hatched, critical-path ops underlined), thin rows for communication, a time
// ruler; wheel zooms at the cursor, drag pans, double-click fits, hovering shows a slice's tooltip.
#pragma once

#include <QWidget>
#include <memory>

#include "gui/models/gantt_data.h"
#include "gui/models/plan_detail.h"
#include "gui/models/timeline_axis.h"

namespace loom::gui {

class GanttView : public QWidget {
  Q_OBJECT

 public:
  explicit GanttView(QWidget* parent = nullptr);

  void set_detail(std::shared_ptr<const PlanDetail> detail);
  void clear();
  bool has_plan() const { return detail_ != nullptr; }
  const PlanDetail* detail() const { return detail_.get(); }
  const GanttData& data() const { return data_; }
  const TimelineAxis& axis() const { return axis_; }

  void zoom(double factor);  // about the centre of the view
  void fit();
  void set_show_critical_path(bool on);
  void set_show_communication(bool on);  // the thin pp/dp rows under each stage

  // The row under y (-1 when none) and the op under a point (-1 when none), for tooltips and tests.
  int row_at(double y) const;
  std::int32_t op_at(QPointF pos) const;

  QSize sizeHint() const override { return {900, 420}; }
  QSize minimumSizeHint() const override { return {300, 160}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  bool event(QEvent* event) override;

 private:
  struct RowGeometry {
    double top = 0, height = 0;
  };
  void rebuild_rows();
  void layout_rows();
  void paint_ruler(class QPainter& p);
  // `next_label_y`: below the last label drawn, so labels of thin rows never overlap.
  void paint_row(class QPainter& p, const GanttRow& row, const RowGeometry& g, double& next_label_y);
  void paint_kernels(class QPainter& p, std::int32_t op, const QRectF& slice, const QColor& colour);
  void paint_legend(class QPainter& p);

  std::shared_ptr<const PlanDetail> detail_;
  GanttData data_;
  TimelineAxis axis_;
  std::vector<RowGeometry> geometry_;
  bool show_critical_path_ = true;
  bool show_communication_ = true;
  bool dragging_ = false;
  double last_drag_x_ = 0;
};

}  // namespace loom::gui
