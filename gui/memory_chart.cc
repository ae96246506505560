#include "gui/memory_chart.h"

#include <QBarCategoryAxis>
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

  auto* x = new QBarCategoryAxis;
  QStringList labels;
  // Label every stage when they fit, otherwise every k-th.
  const std::size_t every = std::max<std::size_t>(1, bars.stage_labels.size() / 16);
  for (std::size_t s = 0; s < bars.stage_labels.size(); ++s)
    labels << (s % every == 0 ? QString::fromStdString(bars.stage_labels[s]) : QString(s, QChar(0x200B)));
  x->append(labels);
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
