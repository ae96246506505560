#include "gui/pareto_chart.h"

#include <QGraphicsLayout>
#include <QLegendMarker>
#include <QLineF>
#include <QLineSeries>
#include <QMouseEvent>
#include <QScatterSeries>
#include <QValueAxis>
#include <algorithm>

namespace loom::gui {

ParetoChart::ParetoChart(QWidget* parent) : QChartView(parent) {
  setRenderHint(QPainter::Antialiasing);
  chart()->setAnimationOptions(QChart::NoAnimation);
  chart()->legend()->setAlignment(Qt::AlignBottom);
  chart()->setMargins(QMargins(4, 4, 4, 4));
  chart()->layout()->setContentsMargins(0, 0, 0, 0);
  chart()->setBackgroundRoundness(0);
  chart()->setTitle(tr("Throughput vs memory per GPU"));

  all_ = new QScatterSeries;
  all_->setName(tr("plans"));
  all_->setMarkerSize(6);
  all_->setColor(QColor(0x4C, 0x78, 0xA8, 110));
  all_->setBorderColor(QColor(0x4C, 0x78, 0xA8, 160));
  frontier_line_ = new QLineSeries;
  frontier_line_->setName(tr("Pareto frontier"));
  QPen pen(QColor(0xF5, 0x85, 0x18));
  pen.setWidthF(2);
  frontier_line_->setPen(pen);
  frontier_points_ = new QScatterSeries;
  frontier_points_->setMarkerSize(8);
  frontier_points_->setColor(QColor(0xF5, 0x85, 0x18));
  frontier_points_->setBorderColor(Qt::white);
  selected_ = new QScatterSeries;
  selected_->setName(tr("selected"));
  selected_->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
  selected_->setMarkerSize(13);
  selected_->setColor(QColor(0xC0, 0x39, 0x2B));
  selected_->setBorderColor(Qt::white);
  for (QAbstractSeries* s : std::initializer_list<QAbstractSeries*>{all_, frontier_line_, frontier_points_, selected_})
    chart()->addSeries(s);
  auto* x = new QValueAxis;
  x->setTitleText(tr("memory per GPU, most loaded stage (GiB)"));
  x->setLabelFormat("%.0f");
  auto* y = new QValueAxis;
  y->setTitleText(tr("tokens/s"));
  y->setLabelFormat("%.0f");
  chart()->addAxis(x, Qt::AlignBottom);
  chart()->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* s : chart()->series()) s->attachAxis(x), s->attachAxis(y);
  chart()->legend()->markers(frontier_points_).first()->setVisible(false);
}

void ParetoChart::set_points(std::vector<ParetoPoint> points, double capacity_gib) {
  points_ = std::move(points);
  QList<QPointF> all, frontier;
  double max_m = capacity_gib, max_t = 0;
  for (const auto& p : points_) {
    all << QPointF(p.memory_gib, p.tokens_per_s);
    max_m = std::max(max_m, p.memory_gib);
    max_t = std::max(max_t, p.tokens_per_s);
  }
  for (const auto& p : pareto_frontier(points_)) frontier << QPointF(p.memory_gib, p.tokens_per_s);
  all_->replace(all);
  frontier_line_->replace(frontier);
  frontier_points_->replace(frontier);
  auto* x = qobject_cast<QValueAxis*>(chart()->axes(Qt::Horizontal).first());
  auto* y = qobject_cast<QValueAxis*>(chart()->axes(Qt::Vertical).first());
  x->setRange(0, max_m > 0 ? max_m * 1.05 : 1);
  x->applyNiceNumbers();
  y->setRange(0, max_t > 0 ? max_t * 1.08 : 1);
  y->applyNiceNumbers();
  set_selected(selected_plan_);
}

void ParetoChart::set_selected(int plan_index) {
  selected_plan_ = plan_index;
  QList<QPointF> sel;
  for (const auto& p : points_)
    if (p.plan_index == plan_index) sel << QPointF(p.memory_gib, p.tokens_per_s);
  selected_->replace(sel);
}

void ParetoChart::mouseReleaseEvent(QMouseEvent* event) {
  QChartView::mouseReleaseEvent(event);
  if (event->button() != Qt::LeftButton) return;
  // The plan whose point is drawn nearest the cursor, within a marker's reach. (A series' own
  // click signal reports the marker on top: the large "selected" marker would shadow its
  // neighbours.)
  constexpr double kReachPx = 8;
  int plan = -1;
  double nearest = kReachPx;
  for (const auto& p : points_) {
    const QPointF in_chart = chart()->mapToPosition(QPointF(p.memory_gib, p.tokens_per_s), all_);
    const QPointF on_screen = mapFromScene(chart()->mapToScene(in_chart));
    const double d = QLineF(on_screen, event->position()).length();
    // Plans drawn on the same spot: the better-ranked one.
    if (d < nearest || (d == nearest && plan >= 0 && p.plan_index < plan)) nearest = d, plan = p.plan_index;
  }
  if (plan >= 0) emit plan_clicked(plan);
}

}  // namespace loom::gui
