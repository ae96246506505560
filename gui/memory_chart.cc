#include "gui/memory_chart.h"

#include <QBarSet>
#include <QGraphicsLayout>
#include <QLineSeries>
#include <QStackedBarSeries>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

namespace loom::gui {

namespace {
const QColor kCategoryColours[] = {QColor(0x4C, 0x78, 0xA8), QColor(0x72, 0xB7, 0xB2), QColor(0x54, 0xA2, 0x4B),
                                   QColor(0xF5, 0x85, 0x18), QColor(0xBA, 0xB0, 0xAC)};
}

MemoryChart::MemoryChart(QWidget* parent) : QChartView(parent) {
  setRenderHint(QPainter::Antialiasing);
  chart()->setAnimationOptions(QChart::NoAnimation);
  chart()->legend()->setAlignment(Qt::AlignBottom);
  QFont legend_font = chart()->legend()->font();
  legend_font.setPointSizeF(legend_font.pointSizeF() * 0.9);
  chart()->legend()->setFont(legend_font);
  chart()->setMargins(QMargins(4, 4, 4, 4));
  chart()->layout()->setContentsMargins(0, 0, 0, 0);
  chart()->setBackgroundRoundness(0);
  clear();
}

void MemoryChart::clear() {
  chart()->removeAllSeries();
  for (QAbstractAxis* axis : chart()->axes()) chart()->removeAxis(axis), delete axis;
  bar_series_ = nullptr;
  capacity_series_ = nullptr;
  bars_ = {};
  chart()->setTitle(tr("Memory per pipeline stage"));
}

void MemoryChart::set_bars(const MemoryBars& bars, const QString& title) {
  clear();
  bars_ = bars;
  chart()->setTitle(title);
  bar_series_ = new QStackedBarSeries;
  for (std::size_t c = 0; c < MemoryBars::kCategories.size(); ++c) {
    auto* set = new QBarSet(MemoryBars::kCategories[c]);
    set->setColor(kCategoryColours[c]);
    set->setBorderColor(kCategoryColours[c].darker(115));
    for (const auto& stage : bars.gib) *set << stage[c];
    bar_series_->append(set);
  }
  bar_series_->setBarWidth(bars.gib.size() > 24 ? 0.9 : 0.7);
  chart()->addSeries(bar_series_);

  // Capacity across the whole plot: x in category units, from the left edge to the right edge.
  capacity_series_ = new QLineSeries;
  capacity_series_->setName(tr("capacity"));
  const double n = static_cast<double>(bars.gib.size());
  capacity_series_->append(-0.5, bars.capacity_gib);
  capacity_series_->append(n - 0.5, bars.capacity_gib);
  QPen pen(QColor(0xC0, 0x39, 0x2B));
  pen.setWidthF(2);
  pen.setStyle(Qt::DashLine);
  capacity_series_->setPen(pen);
  chart()->addSeries(capacity_series_);

  // Stages on a value axis (bar i at x = i) so deep pipelines get sparse, unelided tick labels.
  auto* x = new QValueAxis;
  x->setRange(-0.5, n - 0.5);
  x->setTickType(QValueAxis::TicksDynamic);
  x->setTickAnchor(0);
  x->setTickInterval(n <= 16 ? 1 : std::ceil(n / 8.0));
  x->setLabelFormat("%d");
  x->setGridLineVisible(false);
  x->setTitleText(tr("pipeline stage"));
  auto* y = new QValueAxis;
  const double top = std::max(bars.capacity_gib, bars.max_total_gib()) * 1.1;
  y->setRange(0, top > 0 ? top : 1);
  y->setTitleText(tr("GiB per GPU"));
  y->setLabelFormat("%.0f");
  y->applyNiceNumbers();
  chart()->addAxis(x, Qt::AlignBottom);
  chart()->addAxis(y, Qt::AlignLeft);
  bar_series_->attachAxis(x);
  bar_series_->attachAxis(y);
  capacity_series_->attachAxis(x);
  capacity_series_->attachAxis(y);
}

}  // namespace loom::gui
