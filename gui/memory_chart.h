// Memory per pipeline stage of the selected plan as stacked bars (params, grads, optimizer,
// activations, buffers + reserve) with the GPU's capacity as a line, on Qt Charts.
#pragma once

#include <QChartView>

#include "gui/models/chart_data.h"

class QStackedBarSeries;
class QLineSeries;

namespace loom::gui {

class MemoryChart : public QChartView {
  Q_OBJECT

 public:
  explicit MemoryChart(QWidget* parent = nullptr);
  void set_bars(const MemoryBars& bars, const QString& title);
  void clear();
  const MemoryBars& bars() const { return bars_; }
  QStackedBarSeries* bar_series() const { return bar_series_; }
  QLineSeries* capacity_series() const { return capacity_series_; }

 private:
  MemoryBars bars_;
  QStackedBarSeries* bar_series_ = nullptr;
  QLineSeries* capacity_series_ = nullptr;
};

}  // namespace loom::gui
